"""The system calls a sandboxed command may not make: a seccomp filter bubblewrap loads.

A short deny-list, as Flatpak's and Docker's default profiles hold it: what reaches the
kernel's debugging, keys, mounts, modules and namespaces, none of which a build or a test
suite needs. Each is refused with EPERM: `ptrace` and `process_vm_*` (another process's
memory), `keyctl`, `add_key`, `request_key` (the kernel's keyrings are not namespaced),
`mount`, `umount2`, `pivot_root`, `chroot`, `setns` and the new mount API (`fsopen`,
`open_tree`, `move_mount`, ...), `kexec_*`, `bpf`, `perf_event_open`, `userfaultfd` (a
staple of kernel exploits), module loading, `open_by_handle_at` (the Docker "shocker"
escape), `swapon`, `reboot`, `acct`, `syslog`, `quotactl`, `iopl`; `unshare` and `clone`
with `CLONE_NEWUSER` (a nested user namespace's root could mount a `/proc` of its own, and
is the start of most unprivileged kernel exploits); `ioctl` `TIOCSTI` and `TIOCLINUX`
(keystrokes pushed into a terminal). `clone3` fails with ENOSYS: its flags are in memory a
filter cannot read, and C libraries fall back to `clone`, which is checked (as Flatpak
does). System calls of another ABI (i386's `int 0x80`, x32) fail with ENOSYS: the numbers
above are the machine's own.

The program is written here in classic BPF (a few dozen instructions, assembled into a
file a user's processes share, which bubblewrap reads through `--seccomp FD`): libseccomp's
Python bindings are not on PyPI and `pyseccomp` (ctypes over libseccomp) has had no release
since 2021, while the program is short and fixed. x86_64 and aarch64; elsewhere `path()` is
None and commands run without the filter.
"""

from __future__ import annotations

import errno
import functools
import platform
import struct
from collections.abc import Sequence
from pathlib import Path

from swarm._sandbox import _store

__all__ = ["DENIED", "FD", "OPEN", "VARIABLE", "folded", "opener", "path"]

FD = 9
"""The descriptor bubblewrap reads the program from (`opener` or `OPEN` opens it)."""
VARIABLE = "SWARM_SECCOMP_FILTER"
"""Names the filter's file for a launcher shell that runs `OPEN` before it execs bwrap."""
OPEN = f'[ -z "${{{VARIABLE}-}}" ] || exec {FD}<"${VARIABLE}"; unset {VARIABLE}'
"""Shell steps that open the file `VARIABLE` names as `FD` (and take the variable out of
what the command sees), for a seat (`swarm._sandbox._seats`), which gets its command's
environment as data."""
_OPENER_SCRIPT = f'exec "$@" {FD}<"$0"'
DENIED = (
    *("ptrace", "process_vm_readv", "process_vm_writev", "keyctl", "add_key", "request_key"),
    *("mount", "umount2", "pivot_root", "chroot", "setns", "fsopen", "fsconfig", "fsmount"),
    *("fspick", "move_mount", "open_tree", "mount_setattr", "kexec_load", "kexec_file_load"),
    *("bpf", "perf_event_open", "userfaultfd", "init_module", "finit_module", "delete_module"),
    *("open_by_handle_at", "swapon", "swapoff", "reboot", "acct", "syslog", "quotactl"),
)
"""Refused whatever their arguments (those the machine has: `iopl` is x86's)."""


def _table(text: str) -> dict[str, int]:
    return {name: int(nr) for name, _, nr in (w.partition("=") for w in text.split())}


_NUMBERS = {
    "x86_64": _table(
        "ptrace=101 process_vm_readv=310 process_vm_writev=311 keyctl=250 add_key=248 "
        "request_key=249 mount=165 umount2=166 pivot_root=155 chroot=161 setns=308 "
        "kexec_load=246 kexec_file_load=320 bpf=321 perf_event_open=298 userfaultfd=323 "
        "init_module=175 finit_module=313 delete_module=176 open_by_handle_at=304 "
        "swapon=167 swapoff=168 reboot=169 acct=163 syslog=103 quotactl=179 iopl=172 "
        "ioperm=173 unshare=272 clone=56 clone3=435 ioctl=16 "
    ),
    "aarch64": _table(
        "ptrace=117 process_vm_readv=270 process_vm_writev=271 keyctl=219 add_key=217 "
        "request_key=218 mount=40 umount2=39 pivot_root=41 chroot=51 setns=268 "
        "kexec_load=104 kexec_file_load=294 bpf=280 perf_event_open=241 userfaultfd=282 "
        "init_module=105 finit_module=273 delete_module=106 open_by_handle_at=265 "
        "swapon=224 swapoff=225 reboot=142 acct=89 syslog=116 quotactl=60 unshare=97 "
        "clone=220 clone3=435 ioctl=29 "
    ),
}
_NEW_MOUNT_API = _table(
    "open_tree=428 move_mount=429 fsopen=430 fsconfig=431 fsmount=432 fspick=433 mount_setattr=442 "
)
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_BIT = 0x40000000
_CLONE_NEWUSER = 0x10000000
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C

# classic BPF, as seccomp runs it
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24  # offsets in struct seccomp_data (low 32 bits)
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000

Step = tuple[int, int, str | int, str | int]
"""(code, k, jump if true, jump if false): a jump is a label or 0 (the next step)."""


def program(machine: str) -> bytes:
    """The filter for `machine` (`platform.machine()`), as `struct sock_filter`s."""
    numbers = {**_NUMBERS[machine], **_NEW_MOUNT_API}
    steps: list[Step | str] = [
        (_LD_ABS, _ARCH, 0, 0),
        (_JEQ, _AUDIT_ARCH[machine], 0, "nosys"),
        (_LD_ABS, _NR, 0, 0),
    ]
    if machine == "x86_64":
        steps.append((_JGE, _X32_BIT, "nosys", 0))
    for name in DENIED + (("iopl", "ioperm") if machine == "x86_64" else ()):
        steps.append((_JEQ, numbers[name], "deny", 0))
    steps += [
        (_JEQ, numbers["clone3"], "nosys", 0),
        (_JEQ, numbers["unshare"], "flags", 0),
        (_JEQ, numbers["clone"], "flags", 0),
        (_JEQ, numbers["ioctl"], 0, "allow"),
        (_LD_ABS, _ARG1, 0, 0),
        (_JEQ, _TIOCSTI, "deny", 0),
        (_JEQ, _TIOCLINUX, "deny", "allow"),
        "flags",
        (_LD_ABS, _ARG0, 0, 0),
        (_JSET, _CLONE_NEWUSER, "deny", "allow"),
        "allow",
        (_RET, _ALLOW, 0, 0),
        "deny",
        (_RET, _ERRNO | errno.EPERM, 0, 0),
        "nosys",
        (_RET, _ERRNO | errno.ENOSYS, 0, 0),
    ]
    return _assembled(steps)


def _assembled(steps: list[Step | str]) -> bytes:
    labels: dict[str, int] = {}
    for step in steps:
        if isinstance(step, str):
            labels[step] = sum(1 for s in steps[: steps.index(step)] if not isinstance(s, str))
    out, at = b"", 0
    for step in steps:
        if isinstance(step, str):
            continue
        code, k, true, false = step
        jt, jf = (labels[j] - at - 1 if isinstance(j, str) else j for j in (true, false))
        out += struct.pack("<HBBI", code, jt, jf, k)
        at += 1
    return out


@functools.cache
def path() -> Path | None:
    """The filter of this machine in a file (`swarm._sandbox._store`: one per machine and
    user, shared by its processes), or None where swarm has none for its architecture."""
    machine = platform.machine()
    if machine not in _NUMBERS:
        return None
    return _store.file("seccomp", program(machine))


def opener(filter_file: Path) -> list[str]:
    """A `/bin/sh` that opens `filter_file` as `FD`, then execs the rest of its argv
    (bubblewrap): how the descriptor reaches a command that no launcher shell starts."""
    return ["/bin/sh", "-c", _OPENER_SCRIPT, str(filter_file)]


def folded(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """`argv` without its `opener`, and the file the opener would open (None: it has
    none). The launchers that move a command into its cgroups (`swarm._sandbox._pids.joined`,
    `swarm._sandbox._seats`) are shells already: they open the file themselves, which
    spares the command the opener's exec (~0.8 ms of CPU)."""
    if len(argv) > 4 and argv[0] == "/bin/sh" and argv[1:3] == ["-c", _OPENER_SCRIPT]:
        return argv[3], list(argv[4:])
    return None, list(argv)
