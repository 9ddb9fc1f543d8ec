"""Decoding OTLP JSON: attribute values, span ids, and which attributes become columns.

The pieces the loader and `Trace.span_json` share; pure functions over decoded JSON that
import nothing from the rest of `swarm._analysis`.
"""

from __future__ import annotations

import base64
from typing import Any

from swarm._tracing import semconv as sc

__all__ = ["COLUMN_OF", "hex_id", "op_of", "otlp_value"]


def otlp_value(v: dict[str, Any]) -> Any:
    """Decode one OTLP JSON `AnyValue`."""
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        return [otlp_value(x) for x in v["arrayValue"].get("values", [])]
    if "kvlistValue" in v:
        return {kv["key"]: otlp_value(kv.get("value", {})) for kv in v["kvlistValue"]["values"]}
    if "bytesValue" in v:
        return v["bytesValue"]
    return None


def hex_id(raw: str, size: int) -> str:
    """Ids are hex in the file-exporter format; accept base64 (protobuf JSON) too."""
    if len(raw) == size * 2:
        return raw.lower()
    try:
        return base64.b64decode(raw).hex()
    except ValueError:
        return raw


# attribute key -> slot in the parser's per-span value list (see `loader.parse`)
COLUMN_OF = {
    sc.OPERATION: 0,
    sc.AGENT_NAME: 1,
    sc.TIER: 2,
    sc.PROVIDER: 3,
    sc.REQUEST_MODEL: 4,
    sc.RESPONSE_MODEL: 5,
    sc.INPUT_TOKENS: 6,
    sc.OUTPUT_TOKENS: 7,
    sc.REASONING_TOKENS: 8,
    sc.TIME_TO_FIRST_CHUNK: 9,
    sc.TTFT_S: 9,
    sc.COST_USD: 10,
    sc.ATTEMPTS: 11,
    sc.ERROR_TYPE: 12,
    sc.WAIT_KIND: 13,
    sc.TOOL_NAME: 14,
    sc.TESTS_FAILED: 15,
    sc.RUN_ID: 16,
    sc.SUBTASK_ID: 17,
    sc.CACHED_INPUT_TOKENS: 18,
    sc.ROUTE_REASON: 19,
}


def op_of(name: str, op_attr: str, wait_kind: str) -> str:
    """A span's operation: its `gen_ai.operation.name`, else guessed from name and wait."""
    if op_attr:
        return op_attr
    if wait_kind or name.startswith(sc.WAIT_SPAN):
        return "wait"
    if name.startswith(sc.WORKSPACE_SPAN):
        return sc.OP_WORKSPACE
    first = name.split(" ", 1)[0]
    return first if first in (sc.OP_CHAT, sc.OP_TOOL, sc.OP_AGENT, sc.OP_WORKFLOW) else "other"
