"""Trace ids: taken from a W3C ``traceparent`` when the client sends one, else generated."""

from __future__ import annotations

import re
import secrets

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
TRACE_ID_PATTERN = r"^[0-9a-f]{32}$"


def new_trace_id() -> str:
    return secrets.token_hex(16)


def trace_id_from(traceparent: str | None) -> str:
    """The trace id of a valid ``traceparent`` header; a fresh one for a missing or invalid header.

    Per W3C Trace Context, version ``ff`` and all-zero ids are invalid.
    """
    if traceparent:
        match = _TRACEPARENT.match(traceparent.strip())  # upper-case hex is invalid (W3C)
        if match:
            version, trace_id, parent_id, _flags = match.groups()
            if version != "ff" and trace_id != "0" * 32 and parent_id != "0" * 16:
                return trace_id
    return new_trace_id()
