"""The run journal: SQLite state that makes `swarm solve` resumable after any crash.

One file per project (default `.swarm/journal.db`) holds every run, its plan, each
subtask's state and every completed model call. Each write is its own transaction,
committed at once (WAL, `synchronous=NORMAL`), so a `kill -9` loses at most the call in
flight. `swarm.run._replay.ReplayModel` answers an agent's calls from it on resume, so
finished work is neither redone nor paid for twice.

One process, one connection, many tasks: writes are small and run inline on the event
loop thread (tens of microseconds); a lock makes the journal safe from worker threads too.
The schema is versioned with `PRAGMA user_version`; a newer one is refused, not guessed at.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from pydantic import BaseModel

from swarm.errors import ConfigError
from swarm.run._plan import Plan
from swarm.run._task import Task

__all__ = [
    "DEFAULT_JOURNAL",
    "Journal",
    "RunRow",
    "SubtaskRow",
]

DEFAULT_JOURNAL = Path(".swarm") / "journal.db"
"""Where a project's journal lives, relative to the target repository."""
SCHEMA_VERSION = 2
# `stopped` means a budget or deadline ended the run (`detail` says which); `interrupted`
# means it was cancelled (Ctrl-C, SIGTERM) and can be resumed.
RUN_STATUSES = frozenset({"running", "done", "failed", "stopped", "interrupted"})
SUBTASK_STATUSES = frozenset(
    {"pending", "running", "coded", "testing", "fixing", "merged", "empty", "failed", "skipped"}
)
_RUN_FIELDS = {"branch", "cost_usd", "tokens", "detail"}
_SUBTASK_FIELDS = {
    "attempts": "attempts",
    "patch": "patch",
    "commit": "commit_sha",
    "error": "error",
    "cost_usd": "cost_usd",
}
_TABLES = {"runs", "plans", "subtasks", "calls", "bases"}
_BASES = """CREATE TABLE IF NOT EXISTS bases (
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    workspace TEXT NOT NULL, base TEXT NOT NULL, PRIMARY KEY (run_id, workspace))"""
"""Version 2: the commit each workspace started from, so a resumed one starts there too."""
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT PRIMARY KEY, status TEXT NOT NULL, created_at REAL NOT NULL,
        updated_at REAL NOT NULL, task_title TEXT NOT NULL, task_json TEXT NOT NULL,
        repo TEXT NOT NULL, config_json TEXT NOT NULL, branch TEXT,
        cost_usd REAL NOT NULL DEFAULT 0, tokens INTEGER NOT NULL DEFAULT 0, detail TEXT)""",
    """CREATE TABLE IF NOT EXISTS plans (
        run_id TEXT PRIMARY KEY REFERENCES runs(run_id) ON DELETE CASCADE,
        plan_json TEXT NOT NULL, saved_at REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS subtasks (
        run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        subtask_id TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
        patch TEXT, commit_sha TEXT, error TEXT, cost_usd REAL NOT NULL DEFAULT 0,
        updated_at REAL NOT NULL, PRIMARY KEY (run_id, subtask_id))""",
    """CREATE TABLE IF NOT EXISTS calls (
        run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        key TEXT NOT NULL, request_hash TEXT NOT NULL, result_json TEXT NOT NULL,
        created_at REAL NOT NULL, PRIMARY KEY (run_id, key, request_hash))""",
    _BASES,
)


class RunRow(BaseModel, frozen=True):
    """One run as the journal holds it."""

    run_id: str
    status: str
    """`running`, `done`, `failed`, `stopped` (`detail`: budget, deadline) or `interrupted`."""
    created_at: datetime
    updated_at: datetime
    task_title: str
    repo: str
    branch: str | None = None
    """The result branch (`swarm/<run-id>`), once known."""
    cost_usd: float = 0.0
    tokens: int = 0
    detail: str | None = None
    """Why the run stopped or failed, in a few words."""


class SubtaskRow(BaseModel, frozen=True):
    """One subtask's latest state in one run."""

    subtask_id: str
    status: str
    """pending, running, coded, testing, fixing, merged, failed or skipped."""
    attempts: int = 0
    patch: str | None = None
    """The subtask's diff, once coded."""
    commit: str | None = None
    """The integration-branch commit it was merged as."""
    error: str | None = None
    cost_usd: float = 0.0
    updated_at: datetime


class Journal:
    """The SQLite journal of one project. Open with `Journal.open(path)`; close when done."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self.path = path
        """The database file."""

    @classmethod
    def open(cls, path: Path) -> Journal:
        """Open (creating if needed) the journal at `path`; ConfigError if it is not one."""
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.parent.name == ".swarm" and not (path.parent / ".gitignore").exists():
                # the journal usually lives inside the target repo: keep it out of its commits
                (path.parent / ".gitignore").write_text("*\n")
        except OSError as exc:
            raise ConfigError(f"cannot create the journal: {exc}", path=str(path)) from None
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            _migrate(conn, path)
        except sqlite3.OperationalError as exc:  # locked, unreadable, disk full
            conn.close()
            raise ConfigError(f"cannot open the journal: {exc}", path=str(path)) from None
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise ConfigError(f"not a swarm journal ({exc})", path=str(path)) from None
        except BaseException:
            conn.close()
            raise
        return cls(conn, path)

    def close(self) -> None:
        """Close the database (every write is already committed)."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- runs ----------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        *,
        task: Task | dict[str, Any],
        repo: str,
        config: dict[str, Any],
        status: str = "running",
    ) -> None:
        """Record a new run; ValueError if `run_id` is taken."""
        _check(status, RUN_STATUSES, "run status")
        if isinstance(task, Task):
            title, task_json = task.title, task.model_dump_json()
        else:
            title, task_json = str(task.get("title", "")), json.dumps(task, default=str)
        now = time.time()
        try:
            self._write(
                "INSERT INTO runs (run_id, status, created_at, updated_at, task_title,"
                " task_json, repo, config_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, status, now, now, title, task_json, repo, json.dumps(config, default=str)),
            )
        except sqlite3.IntegrityError:
            raise ValueError(f"run {run_id!r} is already in the journal") from None

    def set_run_status(self, run_id: str, status: str, **fields: Any) -> None:
        """Set a run's status and any of `branch`, `cost_usd`, `tokens`, `detail`."""
        _check(status, RUN_STATUSES, "run status")
        sets = ["status = ?", "updated_at = ?"]
        values: list[Any] = [status, time.time()]
        for name, value in fields.items():
            if name not in _RUN_FIELDS:
                raise TypeError(f"unknown run field {name!r} (known: {sorted(_RUN_FIELDS)})")
            sets.append(f"{name} = ?")
            values.append(value)
        if (
            self._write(f"UPDATE runs SET {', '.join(sets)} WHERE run_id = ?", (*values, run_id))
            == 0
        ):
            raise KeyError(f"no run {run_id!r} in the journal")

    def get_run(self, run_id: str) -> RunRow | None:
        """The run, or None if the journal has no such run."""
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,))
        return _run_row(rows[0]) if rows else None

    def list_runs(self) -> list[RunRow]:
        """Every run, oldest first."""
        return [
            _run_row(r) for r in self._read(f"SELECT {_RUN_COLUMNS} FROM runs ORDER BY rowid", ())
        ]

    def run_task(self, run_id: str) -> dict[str, Any]:
        """The task the run was created with, as a dict (KeyError if no such run)."""
        return self._run_json(run_id, "task_json")

    def run_config(self, run_id: str) -> dict[str, Any]:
        """The config dict the run was created with (KeyError if no such run)."""
        return self._run_json(run_id, "config_json")

    def _run_json(self, run_id: str, column: str) -> dict[str, Any]:
        rows = self._read(f"SELECT {column} FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            raise KeyError(f"no run {run_id!r} in the journal")
        value: dict[str, Any] = json.loads(rows[0][0])
        return value

    # -- plans and subtasks ------------------------------------------------------------

    def save_plan(self, run_id: str, plan: Plan) -> None:
        """Keep the run's plan (replacing an earlier one); KeyError if no such run."""
        self._write_for_run(
            run_id,
            "INSERT OR REPLACE INTO plans (run_id, plan_json, saved_at) VALUES (?, ?, ?)",
            (run_id, plan.to_json(), time.time()),
        )

    def load_plan(self, run_id: str) -> Plan | None:
        """The run's saved plan, or None before one is saved."""
        rows = self._read("SELECT plan_json FROM plans WHERE run_id = ?", (run_id,))
        return Plan.model_validate_json(rows[0][0]) if rows else None

    def set_subtask(self, run_id: str, subtask_id: str, status: str, **fields: Any) -> None:
        """Upsert a subtask's status and any of attempts, patch, commit, error, cost_usd.

        Fields not given keep their stored value; a field given as None is cleared.
        """
        _check(status, SUBTASK_STATUSES, "subtask status")
        columns = ["run_id", "subtask_id", "status", "updated_at"]
        values: list[Any] = [run_id, subtask_id, status, time.time()]
        for name, value in fields.items():
            if name not in _SUBTASK_FIELDS:
                known = sorted(_SUBTASK_FIELDS)
                raise TypeError(f"unknown subtask field {name!r} (known: {known})")
            columns.append(_SUBTASK_FIELDS[name])
            values.append(value)
        updates = ", ".join(f"{c} = excluded.{c}" for c in columns[2:])
        self._write_for_run(
            run_id,
            f"INSERT INTO subtasks ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
            f" ON CONFLICT (run_id, subtask_id) DO UPDATE SET {updates}",
            values,
        )

    def subtasks(self, run_id: str) -> dict[str, SubtaskRow]:
        """Every subtask the run has recorded, in the order first recorded."""
        rows = self._read(
            "SELECT subtask_id, status, attempts, patch, commit_sha, error, cost_usd, updated_at"
            " FROM subtasks WHERE run_id = ? ORDER BY rowid",
            (run_id,),
        )
        return {
            r[0]: SubtaskRow(
                subtask_id=r[0],
                status=r[1],
                attempts=r[2],
                patch=r[3],
                commit=r[4],
                error=r[5],
                cost_usd=r[6],
                updated_at=_time(r[7]),
            )
            for r in rows
        }

    # -- model calls ---------------------------------------------------------------------

    def record_call(self, run_id: str, key: str, request_hash: str, result_json: str) -> None:
        """Keep a completed call's result under (agent call key, request hash)."""
        self._write_for_run(
            run_id,
            "INSERT OR REPLACE INTO calls (run_id, key, request_hash, result_json, created_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (run_id, key, request_hash, result_json, time.time()),
        )

    def find_call(self, run_id: str, key: str, request_hash: str) -> str | None:
        """The result JSON `record_call` kept for (key, request hash), or None."""
        rows = self._read(
            "SELECT result_json FROM calls WHERE run_id = ? AND key = ? AND request_hash = ?",
            (run_id, key, request_hash),
        )
        return str(rows[0][0]) if rows else None

    def base_of(self, run_id: str, workspace: str, head: str) -> str:
        """The commit `workspace` started from in this run; `head` (recorded) the first time.

        A resumed subtask starts where it first did, not from a newer head, so its agents
        see what they saw and their journaled calls replay."""
        self._write_for_run(
            run_id,
            "INSERT OR IGNORE INTO bases (run_id, workspace, base) VALUES (?, ?, ?)",
            (run_id, workspace, head),
        )
        rows = self._read(
            "SELECT base FROM bases WHERE run_id = ? AND workspace = ?", (run_id, workspace)
        )
        return str(rows[0][0])

    # -- plumbing ------------------------------------------------------------------------

    def _write(self, sql: str, params: Any) -> int:
        with self._lock:  # autocommit: each statement is its own committed transaction
            return self._conn.execute(sql, params).rowcount

    def _write_for_run(self, run_id: str, sql: str, params: Any) -> None:
        try:
            self._write(sql, params)
        except sqlite3.IntegrityError:
            raise KeyError(f"no run {run_id!r} in the journal") from None

    def _read(self, sql: str, params: Any) -> list[Any]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()


_RUN_COLUMNS = (
    "run_id, status, created_at, updated_at, task_title, repo, branch, cost_usd, tokens, detail"
)


def _run_row(r: Any) -> RunRow:
    return RunRow(
        run_id=r[0],
        status=r[1],
        created_at=_time(r[2]),
        updated_at=_time(r[3]),
        task_title=r[4],
        repo=r[5],
        branch=r[6],
        cost_usd=r[7],
        tokens=r[8],
        detail=r[9],
    )


def _time(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


def _check(value: str, allowed: frozenset[str], what: str) -> None:
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r} (known: {', '.join(sorted(allowed))})")


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Create the schema in a new file; refuse a newer or foreign one."""
    conn.execute("BEGIN IMMEDIATE")  # two processes opening a new file: one creates
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"journal schema version {version} is newer than this swarm understands"
                f" ({SCHEMA_VERSION}): upgrade swarm or use another journal path",
                path=str(path),
            )
        if version == 0:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            if tables - _TABLES:
                raise ConfigError("is a SQLite database but not a swarm journal", path=str(path))
            for statement in _SCHEMA:
                conn.execute(statement)
        elif version == 1:
            conn.execute(_BASES)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
