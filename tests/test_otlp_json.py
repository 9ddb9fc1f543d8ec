"""The OTLP JSON encoding of attributes: every value type, the same text whether a pair
was encoded before (cached) or not."""

from __future__ import annotations

import json
import math

from swarm._tracing.otlp_json import encode_attributes

ATTRS = {
    "s": "tier:speed",
    "u": 'naïve "quoted" \n line',
    "t": True,
    "f": False,
    "i": 1200,
    "d": 0.25,
    "big": 1e300,
    "nan": math.nan,
    "inf": -math.inf,
    "arr": ("stop", "length"),
    "ints": [1, 2],
    "b": b"\x01\xff",
}

EXPECTED = [
    {"key": "s", "value": {"stringValue": "tier:speed"}},
    {"key": "u", "value": {"stringValue": 'naïve "quoted" \n line'}},
    {"key": "t", "value": {"boolValue": True}},
    {"key": "f", "value": {"boolValue": False}},
    {"key": "i", "value": {"intValue": "1200"}},
    {"key": "d", "value": {"doubleValue": 0.25}},
    {"key": "big", "value": {"doubleValue": 1e300}},
    {"key": "nan", "value": {"stringValue": "nan"}},
    {"key": "inf", "value": {"stringValue": "-inf"}},
    {
        "key": "arr",
        "value": {"arrayValue": {"values": [{"stringValue": "stop"}, {"stringValue": "length"}]}},
    },
    {"key": "ints", "value": {"arrayValue": {"values": [{"intValue": "1"}, {"intValue": "2"}]}}},
    {"key": "b", "value": {"stringValue": "01ff"}},
]


def test_every_value_type_encodes_as_otlp_json() -> None:
    assert json.loads(encode_attributes(ATTRS)) == EXPECTED


def test_a_pair_seen_before_encodes_the_same() -> None:
    first = encode_attributes(ATTRS)
    assert encode_attributes(ATTRS) == first
    assert encode_attributes({"t": 1, "s": True}) == (
        '[{"key":"t","value":{"intValue":"1"}},{"key":"s","value":{"boolValue":true}}]'
    )


def test_no_attributes_is_an_empty_array() -> None:
    assert encode_attributes({}) == "[]"
    assert encode_attributes(None) == "[]"
