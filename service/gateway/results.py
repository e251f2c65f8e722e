"""An upstream's answer as draftgate may record it, hash it and relay it.

An answer is the upstream's (or a hostile server's) JSON. What the audit chain hashes is
RFC 8785 JSON, which has no integer beyond 2^53 - 1, no NaN or infinity, and no lone
surrogate: such a value would make recording an execution's outcome raise, leaving it
RUNNING to be called again after its lease. So those become strings, deep nesting is cut,
and an answer larger than ``MAX_RESULT_BYTES`` serialised is not kept (``TooLarge``).
Strings are otherwise kept as they are: renderers show them inert.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_RESULT_BYTES = 64 * 1024
MAX_RESULT_DEPTH = 32
MAX_SAFE_INTEGER = 2**53 - 1
DEEPER = "(nested deeper than draftgate keeps)"
SURROGATE = re.compile("[\ud800-\udfff]")


class TooLarge(Exception):
    """The answer is larger than draftgate relays or records."""

    def __init__(self, size: int) -> None:
        super().__init__(f"{size} bytes")
        self.size = size


def recordable(value: Any) -> Any:
    """``value`` made hashable as RFC 8785 JSON and bounded; TooLarge when too large."""
    cleaned = _clean(value, 0)
    size = len(json.dumps(cleaned, ensure_ascii=False, separators=(",", ":")).encode())
    if size > MAX_RESULT_BYTES:
        raise TooLarge(size)
    return cleaned


def too_large_note(size: int) -> str:
    return (
        f"(not kept: the upstream's answer is {size} bytes serialised; draftgate keeps at "
        f"most {MAX_RESULT_BYTES})"
    )


def bounded_text(text: str) -> str:
    """Text an upstream answered, cut to the same bound (the caller makes it inert)."""
    if len(text) <= MAX_RESULT_BYTES // 4:  # at most 4 bytes a character
        return text
    encoded = text.encode(errors="surrogatepass")
    if len(encoded) <= MAX_RESULT_BYTES:
        return text
    return encoded[: MAX_RESULT_BYTES - 3].decode(errors="ignore") + "…"


def _clean(value: Any, depth: int) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if abs(value) <= MAX_SAFE_INTEGER else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return _text(value)
    if depth >= MAX_RESULT_DEPTH:
        return DEEPER
    if isinstance(value, dict):
        return {_text(str(key)): _clean(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(item, depth + 1) for item in value]
    return str(value)


def _text(value: str) -> str:
    """A lone surrogate (valid in JSON's escapes, never in UTF-8) shown as its escape."""
    return SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", value)
