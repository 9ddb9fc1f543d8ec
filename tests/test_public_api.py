import swarm


def test_all_is_sorted_and_pinned() -> None:
    assert list(swarm.__all__) == sorted(swarm.__all__)
    assert set(swarm.__all__) == {
        "BudgetExceeded",
        "ChatRequest",
        "ChatResult",
        "ConfigError",
        "Message",
        "Model",
        "ModelBehaviorError",
        "Provider",
        "ProviderError",
        "RateLimitInfo",
        "RateLimited",
        "SwarmError",
        "Timing",
        "ToolCall",
        "ToolError",
        "ToolSpec",
        "Usage",
        "WorkspaceError",
    }


def test_every_exported_name_resolves() -> None:
    for name in swarm.__all__:
        assert getattr(swarm, name) is not None


def test_errors_share_one_root() -> None:
    for name in swarm.__all__:
        obj = getattr(swarm, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, swarm.SwarmError)
