"""What the config puts on the wire, checked before any request: a provider's base URL,
and header names and values (a CR or LF in a header would split the request)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

__all__ = ["check_base_url", "check_headers"]

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
"""An HTTP header name (RFC 9110 token)."""
_BAD_HEADER_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""Control characters (CR, LF, NUL, ...) that would split or corrupt a header line."""


def check_base_url(value: str) -> str:
    """`value`, if it is an http(s) URL with a host; ValueError saying why not."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError as exc:
        raise ValueError(f"not a valid URL ({exc}): {value!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http:// or https:// URL with a host, got {value!r}")
    if _BAD_HEADER_VALUE.search(value) or " " in value:
        raise ValueError(f"must not contain spaces or control characters: {value!r}")
    return value


def check_headers(value: dict[str, str]) -> dict[str, str]:
    """`value`, if every name is a header name and no value holds a control character."""
    for name, text in value.items():
        if not _HEADER_NAME.match(name):
            raise ValueError(f"{name!r} is not a valid HTTP header name")
        if _BAD_HEADER_VALUE.search(text):
            raise ValueError(f"the value of {name!r} contains CR, LF or another control character")
    return value
