import swarm


def test_all_is_sorted_and_pinned() -> None:
    assert list(swarm.__all__) == sorted(swarm.__all__)
    assert set(swarm.__all__) == {
        "Agent",
        "AgentResult",
        "BudgetExceeded",
        "ChatRequest",
        "ChatResult",
        "ConfigError",
        "ContextWindowExceeded",
        "Finish",
        "Message",
        "Model",
        "ModelBehaviorError",
        "Need",
        "Provider",
        "ProviderError",
        "RateLimitInfo",
        "RateLimited",
        "Router",
        "SwarmConfig",
        "SwarmError",
        "Timing",
        "Tool",
        "ToolCall",
        "ToolContext",
        "ToolError",
        "ToolSpec",
        "Usage",
        "Workspace",
        "WorkspaceError",
        "coding_tools",
        "load_config",
        "tool",
    }


def test_every_exported_name_resolves() -> None:
    for name in swarm.__all__:
        assert getattr(swarm, name) is not None


def test_errors_share_one_root() -> None:
    for name in swarm.__all__:
        obj = getattr(swarm, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and obj is not swarm.Finish:
            assert issubclass(obj, swarm.SwarmError)  # Finish is control flow, not an error


def test_model_behavior_error_has_typed_fields() -> None:
    err = swarm.ModelBehaviorError("output is not a valid Verdict", agent="tester", attempts=3)
    assert (err.problem, err.agent, err.attempts) == ("output is not a valid Verdict", "tester", 3)
    assert str(err) == "agent tester: output is not a valid Verdict (after 3 attempts)"
