"""Sandboxes: where agents' and the coordinator's commands run, and what they may touch.

`Sandbox` is the seam (`base`); `BwrapSandbox` confines a command to its worktree with
bubblewrap, `NoSandbox` runs it on the host; `make_sandbox` chooses from the config
(`[sandbox]`), a task's `sandbox:` or `--sandbox`; `default_sandbox` is what the library
uses when given none (bubblewrap where it works: secure by default). Below
`swarm.agent`: the toolbox runs every command through one.
"""

from swarm._sandbox.base import Launch, Limits, Network, Sandbox, SandboxPolicy, git_dir
from swarm._sandbox.bwrap import BwrapSandbox, bwrap_path
from swarm._sandbox.factory import bwrap_problem, default_sandbox, make_sandbox
from swarm._sandbox.hooks import sandboxed_git
from swarm._sandbox.none import NoSandbox, UnsandboxedWarning

__all__ = [
    "BwrapSandbox",
    "Launch",
    "Limits",
    "Network",
    "NoSandbox",
    "Sandbox",
    "SandboxPolicy",
    "UnsandboxedWarning",
    "bwrap_path",
    "bwrap_problem",
    "default_sandbox",
    "git_dir",
    "make_sandbox",
    "sandboxed_git",
]
