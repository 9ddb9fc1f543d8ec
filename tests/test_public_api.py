import swarm


def test_all_is_sorted_and_pinned() -> None:
    assert list(swarm.__all__) == sorted(swarm.__all__)
    assert set(swarm.__all__) == {
        "Agent",
        "AgentEvent",
        "AgentResult",
        "AgentRun",
        "BudgetExceeded",
        "ChatRequest",
        "ChatResult",
        "ConfigError",
        "ContextWindowExceeded",
        "Finish",
        "Hooks",
        "McpError",
        "Message",
        "Model",
        "ModelBehaviorError",
        "ModelSettings",
        "Need",
        "Provider",
        "ProviderError",
        "RateLimitInfo",
        "RateLimited",
        "ReplayModel",
        "Router",
        "StepInfo",
        "SwarmConfig",
        "SwarmError",
        "Timing",
        "Tool",
        "ToolCall",
        "ToolContext",
        "ToolError",
        "ToolSpec",
        "Usage",
        "UsageError",
        "Veto",
        "Workspace",
        "WorkspaceError",
        "coding_tools",
        "load_config",
        "run_tracing",
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


def _public_members(obj: object) -> list[tuple[str, object]]:
    members = []
    for name, member in vars(obj).items():
        if name.startswith("_") or not (callable(member) or isinstance(member, property)):
            continue
        members.append((name, member))
    return members


def test_every_public_name_and_its_methods_have_a_docstring() -> None:
    """The API reference is built from docstrings: nothing public goes without one."""
    import inspect

    missing = []
    for name in swarm.__all__:
        obj = getattr(swarm, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if not inspect.getdoc(obj):
            missing.append(name)
        if inspect.isclass(obj) and obj.__module__.startswith("swarm"):
            for member_name, member in _public_members(obj):
                target = member.fget if isinstance(member, property) else member
                if not getattr(target, "__doc__", None):
                    missing.append(f"{name}.{member_name}")
    assert not missing, f"document these: {missing}"
