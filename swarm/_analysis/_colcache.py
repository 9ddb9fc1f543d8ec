"""The column cache beside a trace file: `<trace>.cols`, so a trace is parsed once.

Format: a magic line, an 8-byte little-endian header length, a JSON header, then the raw
bytes of every `array` column in header order. String columns are stored as indices into a
per-column table of distinct values (kept in the header). The header records the trace
file's size and mtime (ns): a cache whose key does not match, or that cannot be read for
any reason, is ignored and rewritten. No pickle: a cache file is data, never code.
"""

from __future__ import annotations

import itertools
import json
import os
import struct
import sys
from array import array
from pathlib import Path
from typing import Any

from swarm._analysis.model import Trace

__all__ = ["cache_path", "read", "write"]

_MAGIC = b"SWARMCOLS 3\n"
_STRINGS = (
    "span_id",
    "name",
    "op",
    "role",
    "agent",
    "subtask",
    "tier",
    "provider",
    "model",
    "wait_kind",
    "tool",
    "error",
    "route_reason",
)
_ARRAYS = (
    "parent",
    "kind",
    "start",
    "end",
    "status",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "ttft",
    "cost",
    "attempts",
    "tests_failed",
    "cached_input_tokens",
    "_line_offsets",
    "_line_of",
    "_pos_in_line",
)
_GRAPHS = ("children", "links")


def cache_path(trace_path: Path) -> Path:
    return trace_path.with_name(trace_path.name + ".cols")


def _key(trace_path: Path) -> tuple[int, int]:
    st = trace_path.stat()
    return st.st_size, st.st_mtime_ns


def write(tr: Trace) -> bool:
    """Write the cache for `tr` (best effort: False when the directory is not writable)."""
    dest = cache_path(tr.path)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
    try:
        size, mtime_ns = _key(tr.path)
        blobs: list[tuple[str, array[Any]]] = []
        tables: dict[str, list[str]] = {}
        ids = "".join(tr.span_id)
        if len(ids) == 16 * len(tr.span_id) and ids.isascii():  # the usual hex ids
            blobs.append(("span_id.blob", array("B", ids.encode("ascii"))))
        for name in _STRINGS:
            col: list[str] = getattr(tr, name)
            if name == "span_id" and blobs:
                continue
            table = list(dict.fromkeys(col))
            code = {s: k for k, s in enumerate(table)}
            tables[name] = table
            blobs.append((name, array("I", map(code.__getitem__, col))))
        for name in _ARRAYS:
            blobs.append((name, getattr(tr, name)))
        for name in _GRAPHS:
            graph: dict[int, list[int]] = getattr(tr, name)
            blobs.append((f"{name}.keys", array("q", graph.keys())))
            blobs.append((f"{name}.counts", array("q", map(len, graph.values()))))
            blobs.append(
                (f"{name}.flat", array("q", itertools.chain.from_iterable(graph.values())))
            )
        blobs.append(("roots", array("q", tr.roots)))
        header = json.dumps(
            {
                "size": size,
                "mtime_ns": mtime_ns,
                "byteorder": sys.byteorder,
                "run_id": tr.run_id,
                "trace_ids": sorted(tr.trace_ids),
                "root": tr.root,
                "strings": tables,
                "arrays": [[name, a.typecode, len(a)] for name, a in blobs],
            }
        ).encode()
        with tmp.open("wb") as fh:
            fh.write(_MAGIC + struct.pack("<Q", len(header)) + header)
            for _, a in blobs:
                a.tofile(fh)
        os.replace(tmp, dest)
        return True
    except OSError:
        tmp.unlink(missing_ok=True)
        return False


def read(trace_path: Path, tr: Trace) -> Trace | None:
    """Fill `tr` from the cache if it matches the trace file as it is now, else None."""
    try:
        with cache_path(trace_path).open("rb") as fh:
            data = fh.read()
        if not data.startswith(_MAGIC):
            return None
        at = len(_MAGIC)
        (hlen,) = struct.unpack_from("<Q", data, at)
        at += 8
        header = json.loads(data[at : at + hlen])
        at += hlen
        if (header["size"], header["mtime_ns"]) != _key(trace_path) or header[
            "byteorder"
        ] != sys.byteorder:
            return None
        arrays: dict[str, array[Any]] = {}
        view = memoryview(data)
        for name, typecode, length in header["arrays"]:
            a = array(typecode)
            end = at + length * a.itemsize
            if end > len(data):
                return None
            a.frombytes(view[at:end])
            arrays[name] = a
            at = end
        if at != len(data):
            return None
        for name, table in header["strings"].items():
            setattr(tr, name, list(map(table.__getitem__, arrays[name])))
        if "span_id.blob" in arrays:
            ids = arrays["span_id.blob"].tobytes().decode("ascii")
            tr.span_id = [ids[k : k + 16] for k in range(0, len(ids), 16)]
        for name in _ARRAYS:
            setattr(tr, name, arrays[name])
        for name in _GRAPHS:
            flat = arrays[f"{name}.flat"].tolist()
            graph: dict[int, list[int]] = {}
            o = 0
            for k, c in zip(arrays[f"{name}.keys"], arrays[f"{name}.counts"], strict=True):
                graph[k] = flat[o : o + c]
                o += c
            setattr(tr, name, graph)
        tr.roots = arrays["roots"].tolist()
        tr.root = int(header["root"])
        tr.run_id = str(header["run_id"])
        tr.trace_ids = set(header["trace_ids"])
        n = len(tr.span_id)
        if any(len(getattr(tr, c)) != n for c in (*_STRINGS, *_ARRAYS[:13])):
            return None
        return tr
    except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error):
        return None
