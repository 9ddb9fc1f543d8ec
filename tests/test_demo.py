"""The out-of-the-box demo: the shipped repository, the task file and the scripted model.

Every agent here is a real `Agent` with the real coding tools, talking to the simulator
(zero latency) running `demo_script`, in real git worktrees of a fresh demo repository;
merges use `git apply --3way --index` as the merge queue does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from swarm._analysis.critical_path import critical_path_method
from swarm._analysis.loader import load_trace
from swarm._analysis.model import Trace
from swarm._demo import DEMO_REPO, PLAN, create_demo_repo, demo_script, init_source
from swarm._tracing import semconv as sc
from swarm.agent._loop import Agent
from swarm.agent._tool import ToolContext, scrub_env
from swarm.agent._toolbox import coding_tools
from swarm.catalog import LatencyProfile
from swarm.messages import ChatRequest, ChatResult, Message
from swarm.model import ChatModel
from swarm.providers.sim import SimProvider
from swarm.providers.sim._reply import prose
from swarm.run._plan import Plan, Subtask, parse_plan_reply, validate_plan
from swarm.run._roles import (
    CODER,
    FIXER,
    PLANNER,
    PLANNER_TOOLS,
    coder_prompt,
    fix_prompt,
    planner_prompt,
    rebase_prompt,
)
from swarm.run._solve import SolveRequest, solve
from swarm.run._task import Task, load_task

TASK_FILE = Path(__file__).resolve().parents[1] / "tasks" / "refactor.md"
_FAST = LatencyProfile(ttft_s=0.0, output_tps=1e9, jitter=0.0)


class _SimModel(ChatModel):
    """The in-process simulator as a `Model`, with the demo's script."""

    name = "sim"

    def __init__(self) -> None:
        self.provider = SimProvider("sim", script=demo_script, profile=_FAST)

    async def chat(self, request: ChatRequest) -> ChatResult:
        return await self.provider.chat("demo", request)


def _env() -> dict[str, str]:
    env = scrub_env(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("VIRTUAL_ENV", None)
    return env


async def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args]
    return await anyio.run_process(command, cwd=cwd, check=check)


async def _check(cwd: Path, task: Task) -> subprocess.CompletedProcess[bytes]:
    assert task.check is not None
    return await anyio.run_process(
        ["/bin/sh", "-c", task.check], cwd=cwd, env=_env(), check=False, stderr=subprocess.STDOUT
    )


async def _worktree(repo: Path, name: str) -> Path:
    path = repo.parent / f"wt-{name}"
    await _git(repo, "worktree", "add", "--quiet", "--detach", str(path), "HEAD")
    return path


async def _patch(worktree: Path) -> str:
    await _git(worktree, "add", "-A")
    return (await _git(worktree, "diff", "--cached", "--binary", "HEAD")).stdout.decode()


class _Merged:
    """Whether a patch landed (truthy), and git's words when it did not."""

    def __init__(self, why: str = "") -> None:
        self.why = why

    def __bool__(self) -> bool:
        return not self.why

    def __repr__(self) -> str:
        return f"not merged: {self.why}" if self.why else "merged"


async def _merge(repo: Path, patch: str, message: str) -> _Merged:
    """Apply a patch on the integration checkout as the merge queue does; commit if clean."""
    file = repo.parent / "change.patch"
    file.write_text(patch)
    # the planner's sandboxed search granted the sandbox's uid this checkout (ACLs move
    # every file's ctime): as the merge queue resets its trees first, refresh the index,
    # or `apply --index` finds the files "do not match index" (a second later, under load)
    await _git(repo, "update-index", "-q", "--refresh", check=False)
    applied = await _git(repo, "apply", "--3way", "--index", str(file), check=False)
    if applied.returncode != 0:
        await _git(repo, "reset", "--hard", "--quiet", "HEAD")
        await _git(repo, "clean", "-fdq")
        why = applied.stderr.decode(errors="replace").strip()
        return _Merged(f"git apply exited {applied.returncode}: {why}")
    await _git(repo, "commit", "--quiet", "-m", message)
    return _Merged()


def _agent(role: str, agent_id: str, path: Path, task: Task, st: Subtask) -> Agent[str]:
    return Agent(
        role,
        model=_SimModel(),
        instructions=CODER if role == "coder" else FIXER,
        tools=coding_tools(),
        context=ToolContext(root=path, check=task.check, env=_env()),
        max_steps=12,
        agent_id=agent_id,
        subtask_id=st.id,
    )


@pytest.fixture
def task() -> Task:
    return load_task(TASK_FILE)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return create_demo_repo(tmp_path / "demo")


def test_task_file_runs_the_demo_repo_on_its_own_check(task: Task) -> None:
    assert task.repo is None
    assert task.check == "python -m pytest -q"
    assert task.max_agents == 4
    assert task.budget is not None
    assert (task.budget.usd, task.budget.deadline) == (1.0, 600.0)
    assert task.title == "Modernise the inventory package"


async def test_fresh_demo_repo_is_committed_and_green(repo: Path, task: Task) -> None:
    log = (await _git(repo, "log", "--format=%an <%ae> %s")).stdout.decode().splitlines()
    assert log == ["swarm <swarm@localhost> inventory"]
    status = (await _git(repo, "status", "--porcelain")).stdout.decode()
    assert status == ""
    assert (repo / "inventory" / "__init__.py").read_text() == init_source(set())
    assert not (DEMO_REPO / ".git").exists()  # shipped as plain files
    tracked = (await _git(repo, "ls-files")).stdout.decode().split()
    assert {".gitignore", "pyproject.toml", "inventory/pricing.py"} <= set(tracked)
    assert not [p for p in tracked if "cache" in p]
    result = await _check(repo, task)
    assert result.returncode == 0, result.stdout.decode()
    assert b"8 passed" in result.stdout
    with pytest.raises(FileExistsError):
        create_demo_repo(repo)


async def test_the_copy_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    """Made beside its place and renamed in: what a run killed while making it left (a
    half copy, no commit) is not the copy, and is cleared by the next one."""
    left = tmp_path / ".demo.building"
    (left / "inventory").mkdir(parents=True)
    (left / "inventory" / "pricing.py").write_text("half")
    made = create_demo_repo(tmp_path / "demo")
    assert not left.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["demo"]
    assert (await _git(made, "rev-parse", "HEAD")).returncode == 0
    assert "half" not in (made / "inventory" / "pricing.py").read_text()


async def test_same_commit_every_time(tmp_path: Path) -> None:
    heads = set()
    for name in ("a", "b"):
        made = create_demo_repo(tmp_path / name)
        heads.add((await _git(made, "rev-parse", "HEAD")).stdout)
    assert len(heads) == 1


async def test_planner_explores_then_answers_with_a_valid_plan(repo: Path, task: Task) -> None:
    plan = await _plan(repo, task)
    assert [s.id for s in plan.subtasks] == ["item", "pricing", "stock", "docs"]
    assert plan.added_dependencies == ()  # declared scopes are disjoint where concurrent
    assert [s.id for s in plan.ready({"item"})] == ["pricing", "stock"]
    assert [s.id for s in plan.ready(set())] == ["item"]


async def _plan(repo: Path, task: Task) -> Plan:
    agent: Agent[str] = Agent(
        "planner",
        model=_SimModel(),
        instructions=PLANNER,
        tools=coding_tools(include=PLANNER_TOOLS),
        context=ToolContext(root=repo, check=task.check, env=_env()),
        agent_id="planner",
    )
    result = await agent.run(planner_prompt(task))
    assert result.stop_reason == "final_answer"
    assert result.tool_calls == 2
    observations = [m.content or "" for m in result.messages if m.role == "tool"]
    assert "pricing.py" in observations[0]  # list_dir
    assert "report.py" in observations[1]  # search for calc_total's callers
    return parse_plan_reply(str(result.output))


async def test_the_whole_story(repo: Path, task: Task) -> None:
    plan = await _plan(repo, task)
    st = plan.by_id()

    # item: a coder on main, merged
    wt = await _worktree(repo, "item")
    coder = _agent("coder", "coder:item", wt, task, st["item"])
    result = await coder.run(coder_prompt(task, st["item"]))
    patch = await _patch(wt)  # (a failure under load once: say which step went wrong)
    assert patch.strip(), (result.stop_reason, [m.content for m in result.messages[-4:]])
    merged = await _merge(repo, patch, "item")
    assert merged, f"{merged!r}\n{patch}"

    # pricing and stock in parallel, both from the new head
    paths = {name: await _worktree(repo, name) for name in ("pricing", "stock")}
    results: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def code(name: str) -> None:
        agent = _agent("coder", f"coder:{name}", paths[name], task, st[name])
        finished = await agent.run(coder_prompt(task, st[name]))
        assert finished.stop_reason == "finish"
        results[name] = await _check(paths[name], task)

    async with anyio.create_task_group() as tg:
        for name in ("pricing", "stock"):
            tg.start_soon(code, name)

    # the pricing coder's off-by-one passes its own tests but fails the full check
    assert results["stock"].returncode == 0
    red = results["pricing"].stdout.decode()
    assert results["pricing"].returncode != 0
    assert "test_summary_lists_lines_and_total" in red
    fixer = _agent("fixer", "fixer:pricing:1", paths["pricing"], task, st["pricing"])
    fixed = await fixer.run(fix_prompt(task, st["pricing"], task.check or "", red))
    assert "`>=`" in str(fixed.output) and "all tests pass" in str(fixed.output)
    patches = {name: await _patch(paths[name]) for name in ("pricing", "stock")}

    # both touched the __all__ line, so whichever merges second conflicts and a rebase
    # fixer re-applies it on the new head; try both orders (the other on a second branch)
    other = repo.parent / "other-integration"
    await _git(repo, "worktree", "add", "--quiet", "-b", "other", str(other), "HEAD")
    for integration, first, second in ((repo, "stock", "pricing"), (other, "pricing", "stock")):
        assert await _merge(integration, patches[first], first)
        assert not await _merge(integration, patches[second], second)
        wt = await _worktree(integration, f"{second}-rebase1")
        reason = "its patch no longer applies (merge conflict)"
        rebase = _agent("fixer", f"fixer:{second}:rebase1", wt, task, st[second])
        done = await rebase.run(rebase_prompt(st[second], patches[second], reason))
        assert done.stop_reason == "finish" and "tests pass" in str(done.output), done.output
        assert await _merge(integration, await _patch(wt), second)
    trees = [(await _git(repo, "rev-parse", f"{b}^{{tree}}")).stdout for b in ("main", "other")]
    assert trees[0] == trees[1]  # the same code, whatever the merge order

    # docs last, then the whole refactor is on the integration branch and green
    wt = await _worktree(repo, "docs")
    await _agent("coder", "coder:docs", wt, task, st["docs"]).run(coder_prompt(task, st["docs"]))
    assert await _merge(repo, await _patch(wt), "docs")
    final = await _check(repo, task)
    assert final.returncode == 0, final.stdout.decode()
    assert b"12 passed" in final.stdout
    assert (repo / "inventory" / "__init__.py").read_text() == init_source(
        {"item", "pricing", "stock"}
    )
    grep = await _git(repo, "grep", "-n", "calc_total", check=False)
    assert grep.returncode == 1, grep.stdout.decode()  # renamed everywhere
    pricing = (repo / "inventory" / "pricing.py").read_text()
    assert "def order_total(items: Iterable[Item]) -> float:" in pricing
    assert "Item(" in (repo / "README.md").read_text()


_SYSTEM = {"coder": CODER, "fixer": FIXER, "planner": PLANNER}


def _request(role: str, first: str, *turns: Message) -> ChatRequest:
    """A conversation as an agent starts it; no metadata (none crosses HTTP)."""
    return ChatRequest(messages=[Message.system(_SYSTEM[role]), Message.user(first), *turns])


def test_script_is_stateless_and_plays_unplanned_agents_safely() -> None:
    request = _request("coder", "Your subtask: Rename calc_total to order_total and price Items")
    assert demo_script(request) == demo_script(request)
    names = [c.name for c in demo_script(request).tool_calls]
    assert names == ["read_file"] * 5

    stranger = _request("fixer", "The check failed for your subtask: all of it.")
    first = demo_script(stranger)
    assert [c.name for c in first.tool_calls] == ["run_tests"]
    later = _request(
        "fixer",
        "The check failed for your subtask: x.",
        Message.assistant("x", []),
    )
    later.messages.append(Message.assistant("y", []))
    assert [c.name for c in demo_script(later).tool_calls] == ["finish"]


def test_script_reads_its_role_from_the_conversation_alone() -> None:
    """Planner, coder, fixer and rebase fixer are told apart without request metadata;
    anything else gets the plain simulator's prose."""
    plan = demo_script(_request("planner", "# Refactor", Message.assistant("look", [])))
    assert '"subtasks"' in (plan.text or "")
    stock, pricing = "Type-hint stock.py and add low_stock", "Rename calc_total to order_total"
    rebase = _request("fixer", f"Your subtask, {stock}, was done on an older version of the ...")
    assert [c.name for c in demo_script(rebase).tool_calls] == ["read_file"] * 3
    told = f"The check failed for your subtask: {pricing} and price Items."
    fixer = demo_script(_request("fixer", told))
    assert [c.name for c in fixer.tool_calls] == ["read_file"]
    chat = ChatRequest(messages=[Message.user("hello")], metadata={"sim.tokens": "5"})
    assert demo_script(chat).text == prose(5)


def test_the_scripted_plan_declares_disjoint_scopes_for_the_conflicting_pair() -> None:
    plan = validate_plan(PLAN)
    scopes = {s.id: set(s.files) for s in plan.subtasks}
    assert not scopes["pricing"] & scopes["stock"]
    # both edit __init__.py anyway (outside their scopes): that is the demo's conflict
    assert "inventory/__init__.py" not in scopes["pricing"] | scopes["stock"]
    assert plan.added_dependencies == ()


async def _solved_demo(tmp_path: Path, config_text: str) -> Trace:
    """`swarm solve` of the demo with this config: all four merged; the run's trace."""
    config = tmp_path / "swarm.toml"
    config.write_text(config_text)
    report = await solve(
        SolveRequest(
            task_path=str(TASK_FILE),
            config_path=str(config),
            state_dir=str(tmp_path / "state"),
            traces_dir=str(tmp_path / "traces"),
            quiet=True,
        )
    )
    assert report.status == "done", report
    assert report.count("merged") == 4
    return load_trace(Path(str(report.trace)))


async def test_demo_run_traces_its_structure_for_the_exact_critical_path(tmp_path: Path) -> None:
    """`swarm solve` on the demo: every dependency wait is linked, so the critical path
    follows `depends_on` links rather than guessing from timestamps."""
    trace = await _solved_demo(tmp_path, '[providers.sim]\nkind = "sim"\ntime_scale = 0.02\n')
    assert critical_path_method(trace) == "links"
    waits = [i for i in range(len(trace)) if trace.wait_kind[i] == sc.WAIT_DEPENDENCY]
    # pricing and stock wait for item; docs waits for pricing and stock
    assert len(waits) == 3
    assert sorted(len(trace.links.get(i, [])) for i in waits) == [1, 1, 2]


async def test_the_demo_merges_on_a_simulated_real_model(tmp_path: Path) -> None:
    """Calls written as text in every format, wrong tool names, repeats, cut-off JSON,
    chatter around the plan, code's quotes left unescaped in JSON and invented tool
    results: still all four merge."""
    trace = await _solved_demo(
        tmp_path,
        '[providers.sim]\nkind = "sim"\ntime_scale = 0\nseed = 1\n'
        "[providers.sim.real_model]\nchatter = 1.0\nraw_quotes = 0.5\ninvented_results = 0.2\n",
    )
    agents = [trace.attributes(i) for i in range(len(trace)) if trace.op[i] == sc.OP_AGENT]
    parsed = sum(a.get(sc.TOOL_CALLS_PARSED, 0) for a in agents)
    native = sum(a.get(sc.TOOL_CALLS_NATIVE, 0) for a in agents)
    assert parsed > 0 and native > 0  # calls came both ways, and every one was read
    formats = {
        trace.attributes(i).get(sc.TOOL_CALL_FORMAT)
        for i in range(len(trace))
        if trace.op[i] == sc.OP_CHAT
    }
    assert {"hermes", "json", "native"} <= formats
