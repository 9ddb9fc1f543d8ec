import functools
import importlib
import importlib.util
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

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
        "MalformedReply",
        "McpError",
        "Message",
        "Model",
        "ModelBehaviorError",
        "ModelSettings",
        "Need",
        "NoSandbox",
        "Provider",
        "ProviderError",
        "RateLimitInfo",
        "RateLimited",
        "ReplayModel",
        "Sandbox",
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


DOCS = Path(__file__).parent.parent / "docs"


def documented_modules() -> list[str]:
    """The modules the API reference (docs/api.md) renders, in its order."""
    return re.findall(r"^::: ([\w.]+)$", (DOCS / "api.md").read_text(), re.MULTILINE)


def _public_names(module: ModuleType) -> list[str]:
    """Its `__all__` plus every class and function defined in it not starting with `_`."""
    own = [
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and obj.__module__ == module.__name__
    ]
    return sorted({*getattr(module, "__all__", ()), *own})


def _public_members(cls: type) -> Iterator[tuple[str, object]]:
    """The methods, class/static methods and properties a class defines itself."""
    for name, member in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(member, classmethod | staticmethod):
            member = member.__func__
        elif isinstance(member, property):
            member = member.fget
        elif isinstance(member, functools.cached_property):
            member = member.func
        if inspect.isfunction(member) or inspect.isclass(member):
            yield name, member


def _undocumented(module: ModuleType) -> Iterator[str]:
    if not inspect.getdoc(module):
        yield module.__name__
    for name in _public_names(module):
        obj = getattr(module, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if not obj.__doc__:
            yield f"{module.__name__}.{name}"
        if inspect.isclass(obj) and obj.__module__.startswith("swarm"):
            for member_name, member in _public_members(obj):
                if not member.__doc__:
                    yield f"{module.__name__}.{name}.{member_name}"


def test_every_public_name_in_the_api_reference_has_a_docstring() -> None:
    """The API reference is built from docstrings: in each module it renders, every public
    class, function, method and property has one (`swarm`: what `__all__` re-exports)."""
    modules = documented_modules()
    assert "swarm" in modules and "swarm.testing" in modules
    missing = [name for m in modules for name in _undocumented(importlib.import_module(m))]
    assert not missing, f"document these: {missing}"


def _named_module(name: str) -> bool:
    """Whether `name` (`swarm.agent.context`, `swarm.run.id`) is a public module."""
    if any(part.startswith("_") for part in name.split(".")):
        return False
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def test_every_module_the_docs_point_users_to_is_in_the_api_reference() -> None:
    """A module the README or the cookbook imports from or names is one users reach into."""
    text = "\n".join(p.read_text() for p in [DOCS.parent / "README.md", *DOCS.rglob("*.md")])
    imported = set(re.findall(r"^\s*from (swarm[\w.]*) import", text, re.MULTILINE))
    named = {n for n in re.findall(r"`(swarm(?:\.\w+)+)", text) if _named_module(n)}
    assert {"swarm", "swarm.testing", "swarm.agent.mcp", "swarm.agent.context"} <= imported | named
    assert not (imported | named) - set(documented_modules())


DOORS = {"swarm.agent", "swarm.run", "swarm.providers", "swarm.cli"}
"""Public-looking modules that are not in the reference: packages' doors (a docstring that
maps the room, and re-exports) and the console script's module."""


def test_every_public_module_is_in_the_api_reference() -> None:
    """The public line is drawn in the file tree: a module whose dotted name has no part
    starting with `_` is one users may import, so the reference documents it; every other
    module is private (`_`-named, or inside a `_`-package)."""
    package = Path(swarm.__file__).parent
    public = {
        "swarm." + ".".join(p.relative_to(package).with_suffix("").parts).removesuffix(".__init__")
        for p in package.rglob("*.py")
        if "repo" not in p.relative_to(package).parts  # the demo's repository, data
    }
    public = {m for m in public if not any(part.startswith("_") for part in m.split("."))}
    assert public == set(documented_modules()) - {"swarm"} | DOORS


def test_the_docs_import_no_private_module() -> None:
    """README, cookbook and reference reach swarm only through its public modules."""
    text = "\n".join(p.read_text() for p in [DOCS.parent / "README.md", *DOCS.rglob("*.md")])
    private = re.findall(r"(swarm(?:\.\w+)*\._\w+)", text)
    assert not private, private
