"""Commits shipped to cluster nodes as git bundles (through the object store, never a
shared filesystem): a whole history for a new clone, or only what a clone lacks."""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path

import anyio

from swarm.errors import WorkspaceError
from swarm.run._git import git, git_retry

__all__ = ["has_commit", "make_bundle", "missing_since"]


async def make_bundle(repo: Path, sha: str, run_id: str, *, since: str = "") -> bytes:
    """A git bundle of `repo` holding commit `sha` and its history (`since`: only what the
    receiver, who has commit `since`, lacks; `sha` must not be in `since`'s history)."""
    # a ref of its own: bundles of one commit made at once must not delete each other's
    ref = f"refs/swarm-bundle/{run_id}/{sha}-{secrets.token_hex(4)}"
    with tempfile.TemporaryDirectory(prefix="swarm-bundle-") as tmp:
        out = Path(tmp) / "base.bundle"
        await git_retry("update-ref", ref, sha, cwd=repo)
        try:
            have = (f"^{since}",) if since else ()
            await git("bundle", "create", "--quiet", str(out), ref, *have, cwd=repo)
        finally:
            await git_retry("update-ref", "-d", ref, cwd=repo)
        return await anyio.Path(out).read_bytes()


async def has_commit(repo: Path, commit: str, at: str) -> bool:
    """Whether a clone at commit `at` has `commit` (it is in `at`'s history)."""
    try:
        await git("merge-base", "--is-ancestor", commit, at, cwd=repo)
    except WorkspaceError:
        return False
    return True


async def missing_since(repo: Path, sha: str, run_id: str, have: str) -> bytes | None:
    """What a clone at commit `have` lacks to check `sha` out, as a bundle (None: it has
    `sha` already)."""
    if await has_commit(repo, sha, have):
        return None
    return await make_bundle(repo, sha, run_id, since=have)
