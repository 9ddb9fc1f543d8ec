"""Loading a trace file: `load_trace` reads the column cache or parses the OTLP JSON Lines.

`parse` makes one pass over the file: the few attributes the columns need are picked out
by key and strings interned; the per-span work is inlined because it runs a million times
(a documented hot loop, exempt from the 60-line rule).
"""

from __future__ import annotations

import gc
import json
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swarm._analysis import _colcache
from swarm._analysis.model import Trace
from swarm._analysis.otlp import COLUMN_OF, hex_id, op_of, otlp_value
from swarm._tracing import semconv as sc
from swarm.errors import ConfigError

__all__ = ["JSON_PARSER", "derive", "load_trace", "parse"]

_loads: Callable[[bytes], Any]
try:  # optional: parses OTLP lines ~1.5x faster than json
    import orjson

    _loads, JSON_PARSER = orjson.loads, "orjson"
except ImportError:  # pragma: no cover - depends on the environment
    _loads, JSON_PARSER = json.loads, "json"


def _as_str(x: Any, intern: dict[str, str]) -> str:
    if x is None:
        return ""
    x = str(x)
    return intern.setdefault(x, x)


_SHAPE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError)
"""What a JSON line that is not OTLP spans raises in the parser's lookups and conversions."""


def _bad_line(path: Path, line_no: int, exc: Exception) -> ConfigError:
    detail = f"{type(exc).__name__}: {exc}"
    detail = detail if len(detail) <= 120 else detail[:117] + "..."
    return ConfigError(
        f"not OTLP JSON spans ({detail}); a trace line is "
        '{"resourceSpans": [{"scopeSpans": [{"spans": [...]}]}]}',
        path=str(path),
        key=f"line {line_no + 1}",
    )


def parse(path: Path, *, head_bytes: int | None = None) -> Trace:
    """Parse the whole file into a new `Trace`; with `head_bytes`, only its lines that
    start within that many bytes (a span whose parent is further on is then a root)."""
    tr = Trace(path)
    intern: dict[str, str] = {"": ""}
    sd = intern.setdefault
    ops: dict[tuple[str, str, str], str] = {}
    parent_ids: list[str] = []
    link_ids: dict[int, list[str]] = {}
    first_token: dict[int, int] = {}
    want_get = COLUMN_OF.get
    app_sid, app_pid, app_name = tr.span_id.append, parent_ids.append, tr.name.append
    app_kind, app_start, app_end = tr.kind.append, tr.start.append, tr.end.append
    app_status, app_op, app_agent = tr.status.append, tr.op.append, tr.agent.append
    app_sub = tr.subtask.append
    app_tier, app_prov, app_model = tr.tier.append, tr.provider.append, tr.model.append
    app_wait, app_tool, app_err = tr.wait_kind.append, tr.tool.append, tr.error.append
    app_in, app_out = tr.input_tokens.append, tr.output_tokens.append
    app_reason, app_ttft, app_cost = tr.reasoning_tokens.append, tr.ttft.append, tr.cost.append
    app_att, app_failed = tr.attempts.append, tr.tests_failed.append
    app_cached, app_route = tr.cached_input_tokens.append, tr.route_reason.append
    trace_ids = tr.trace_ids
    last_tid = None
    str_, dict_ = str, dict
    i = 0
    offset = 0
    with path.open("rb") as fh:
        for line_no, line in enumerate(fh):
            if head_bytes is not None and offset >= head_bytes:
                break
            tr._line_offsets.append(offset)
            offset += len(line)
            if not line.strip():
                continue
            try:
                doc = _loads(line)
            except ValueError:
                if not line.endswith(b"\n"):  # a run killed mid-write: keep the rest
                    tr.truncated = True
                    break
                raise ConfigError(
                    "not a JSON line (a trace has one OTLP JSON object per line)",
                    path=str(path),
                    key=f"line {line_no + 1}",
                ) from None
            try:
                pos = 0
                for rs in doc.get("resourceSpans", ()):
                    for a in (rs.get("resource") or {}).get("attributes", ()):
                        if a["key"] == sc.RUN_ID and not tr.run_id:
                            tr.run_id = str(otlp_value(a["value"]))
                    for ss in rs.get("scopeSpans", ()):
                        for sp in ss.get("spans", ()):
                            pos += 1
                            tid = sp.get("traceId", "")
                            if tid != last_tid:
                                last_tid = tid
                                if tid:
                                    trace_ids.add(tid if len(tid) == 32 else hex_id(tid, 16))
                            sid = sp.get("spanId", "")
                            app_sid(sid if len(sid) == 16 else hex_id(sid, 8))
                            pid = sp.get("parentSpanId") or ""
                            app_pid(pid if len(pid) == 16 or not pid else hex_id(pid, 8))
                            name = sp.get("name", "")
                            name = sd(name, name)
                            app_name(name)
                            app_kind(int(sp.get("kind", 0)) & 0x7F)
                            app_start(int(sp.get("startTimeUnixNano", 0)))
                            app_end(int(sp.get("endTimeUnixNano", 0)))
                            st = sp.get("status")
                            code = int(st.get("code", 0)) if st else 0
                            app_status(code)
                            vals: list[Any] = [None] * 20
                            for a in sp.get("attributes", ()):
                                c = want_get(a["key"])
                                if c is not None:
                                    v = a["value"]
                                    try:  # an AnyValue has one field; ints come as strings
                                        (x,) = v.values()
                                    except ValueError:
                                        x = otlp_value(v)
                                    if x.__class__ is dict_:
                                        x = otlp_value(v)
                                    vals[c] = x
                            op_attr, wait_kind = vals[0], vals[13]
                            wait_kind = (
                                sd(wait_kind, wait_kind)
                                if wait_kind.__class__ is str_
                                else _as_str(wait_kind, intern)
                            )
                            key = (name, op_attr or "", wait_kind)
                            op = ops.get(key)
                            if op is None:
                                op = op_of(name, str(key[1]), wait_kind)
                                op = ops[key] = sd(op, op)
                            app_op(op)
                            app_wait(wait_kind)
                            x = vals[1]
                            app_agent(sd(x, x) if x.__class__ is str_ else _as_str(x, intern))
                            x = vals[2]
                            app_tier(sd(x, x) if x.__class__ is str_ else _as_str(x, intern))
                            x = vals[3]
                            app_prov(sd(x, x) if x.__class__ is str_ else _as_str(x, intern))
                            x = vals[4] or vals[5]
                            app_model(sd(x, x) if x.__class__ is str_ else _as_str(x, intern))
                            x = vals[17]
                            app_sub(sd(x, x) if x.__class__ is str_ else _as_str(x, intern))
                            x = vals[14]
                            app_tool(sd(x, x) if x.__class__ is str_ else _as_str(x, intern))
                            x = vals[12] or (
                                ((st or {}).get("message", "") or "error") if code == 2 else ""
                            )
                            app_err(sd(x, x) if x.__class__ is str_ else _as_str(x, intern))
                            app_in(int(vals[6] or 0))
                            app_out(int(vals[7] or 0))
                            x = vals[8]
                            app_reason(-1 if x is None else int(x))
                            x = vals[9]
                            app_ttft(-1.0 if x is None else float(x))
                            app_cost(float(vals[10] or 0.0))
                            app_att(int(vals[11] or 1))
                            x = vals[15]
                            app_failed(-1 if x is None else int(x))
                            app_cached(int(vals[18] or 0))
                            x = vals[19]
                            app_route(sd(x, x) if x.__class__ is str_ else _as_str(x, intern))
                            if vals[16] and not tr.run_id:
                                tr.run_id = str(vals[16])
                            if vals[9] is None and op == sc.OP_CHAT:
                                for ev in sp.get("events", ()):
                                    if ev.get("name") == sc.FIRST_TOKEN_EVENT:
                                        first_token[i] = int(ev.get("timeUnixNano", 0))
                                        break
                            for ln in sp.get("links", ()):
                                for a in ln.get("attributes", ()):
                                    if (
                                        a["key"] == sc.LINK_TYPE
                                        and otlp_value(a["value"]) == sc.LINK_DEPENDS_ON
                                    ):
                                        link_ids.setdefault(i, []).append(hex_id(ln["spanId"], 8))
                            i += 1
                tr._line_of.extend(array("i", [line_no]) * pos)
                tr._pos_in_line.extend(range(pos))
            except _SHAPE_ERRORS as exc:
                raise _bad_line(path, line_no, exc) from None
    _resolve(tr, parent_ids, link_ids, first_token)
    return tr


def _resolve(
    tr: Trace, parent_ids: list[str], link_ids: dict[int, list[str]], first_token: dict[int, int]
) -> None:
    """Turn ids into indices, then derive roots, children and each span's role."""
    index = dict(zip(tr.span_id, range(len(tr.span_id)), strict=True))
    get = index.get
    tr.parent = array("q", [get(pid, -1) if pid else -1 for pid in parent_ids])
    for i, ids in link_ids.items():
        targets = [index[t] for t in ids if t in index]
        if targets:
            tr.links[i] = targets
    for i, t in first_token.items():
        tr.ttft[i] = max(0.0, (t - tr.start[i]) / 1e9)
    derive(tr)


def _refuse_loops(tr: Trace, roots: list[int], children: dict[int, list[int]]) -> None:
    """Every span must hang from a root: one that does not is in a parentSpanId loop."""
    seen = bytearray(len(tr.span_id))
    stack = list(roots)
    while stack:
        i = stack.pop()
        seen[i] = 1
        stack.extend(children.get(i, ()))
    if all(seen):
        return
    j = seen.index(0)
    raise ConfigError(
        f"span {tr.span_id[j]} is its own ancestor (its parentSpanId chain loops)",
        path=str(tr.path),
        key=f"line {tr._line_of[j] + 1}" if j < len(tr._line_of) else None,
    )


def derive(tr: Trace) -> None:
    """Children, roots, the root and each span's role, from the parent column."""
    children: dict[int, list[int]] = {}
    roots: list[int] = []
    cget = children.get
    for i, p in enumerate(tr.parent):
        if p < 0:
            roots.append(i)
        else:
            kids = cget(p)
            if kids is None:
                children[p] = [i]
            else:
                kids.append(i)
    _refuse_loops(tr, roots, children)
    tr.children, tr.roots = children, roots
    workflows = [r for r in tr.roots if tr.op[r] == sc.OP_WORKFLOW]
    if workflows or tr.roots:
        tr.root = min(workflows or tr.roots, key=lambda r: tr.start[r])
    # role = nearest enclosing agent's name; memoised walk up the tree
    op, parent, agent, name = tr.op, tr.parent, tr.agent, tr.name
    role: list[str | None] = [None] * len(tr.span_id)
    for i in range(len(role)):
        if role[i] is not None:
            continue
        path = []
        j = i
        while j >= 0 and role[j] is None:
            if op[j] == sc.OP_AGENT:
                role[j] = agent[j] or name[j].split(" ", 1)[-1]
                break
            path.append(j)
            j = parent[j]
        found = role[j] if j >= 0 else ""
        for k in path:
            role[k] = found
    tr.role = [r or "" for r in role]


HEAD_BYTES = 4_000_000
"""The head of a trace handed to `load_trace`'s `on_head`: about 4,500 spans, parsed in a
quarter of a second, where the whole of a 100k-span trace takes five."""


def load_trace(
    path: Path | str,
    *,
    cache: bool = True,
    on_head: Callable[[Trace], None] | None = None,
    head_bytes: int = HEAD_BYTES,
) -> Trace:
    """Read an OTLP JSON Lines trace file (one `TracesData` object per line).

    With `cache`, the columns are kept in `<path>.cols` after the first load (keyed by the
    file's size and mtime, rewritten when either changes) and read from there next time.
    `on_head`: when the file must be parsed (no cache, or one older than the trace) and is
    larger than twice `head_bytes`, it first gets a `Trace` of the file's first
    `head_bytes` alone, so a viewer can draw something while the whole file is read."""
    path = Path(path)
    # Parsing allocates millions of short-lived containers; the cyclic GC would rescan the
    # growing heap over and over (40% of the time at 1M spans), and nothing here is cyclic.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        if cache:
            tr = _colcache.read(path, Trace(path))
            if tr is not None:
                return tr
        if on_head is not None and path.stat().st_size > 2 * head_bytes:
            on_head(parse(path, head_bytes=head_bytes))
        tr = parse(path)
        if cache and not tr.truncated:
            _colcache.write(tr)
        return tr
    finally:
        if was_enabled:
            gc.enable()
