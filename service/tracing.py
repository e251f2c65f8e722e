"""Trace ids: one per request, task or tool call, shared by the audit log, the logs and the spans.

The trace a piece of code runs in is, in this order: the active OpenTelemetry span's (when
``service.telemetry`` switched tracing on, so logs, audit and exported spans agree), else the
one a front door bound for the request or task, else the client's W3C ``traceparent``, else
a fresh one. With tracing off, nothing here imports OpenTelemetry.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
TRACE_ID_PATTERN = r"^[0-9a-f]{32}$"

# The trace of the request or task being served, bound by its front door.
_bound: ContextVar[str | None] = ContextVar("draftgate_trace_id", default=None)


class _Spans:
    """Whether an OpenTelemetry tracer provider is installed (service.telemetry.configure)."""

    on = False


def new_trace_id() -> str:
    return secrets.token_hex(16)


def parse_traceparent(traceparent: str | None) -> tuple[str, str] | None:
    """(trace id, parent span id) of a valid ``traceparent`` header, else None.

    Per W3C Trace Context, version ``ff`` and all-zero ids are invalid.
    """
    if traceparent:
        match = _TRACEPARENT.match(traceparent.strip())  # upper-case hex is invalid (W3C)
        if match:
            version, trace_id, parent_id, _flags = match.groups()
            if version != "ff" and trace_id != "0" * 32 and parent_id != "0" * 16:
                return trace_id, parent_id
    return None


def trace_id_from(traceparent: str | None) -> str:
    """The trace this request runs in (see the module docstring): the active span's or the
    bound one if any, else the trace id of a valid ``traceparent``, else a fresh one."""
    current = current_trace_id()
    if current is not None:
        return current
    parsed = parse_traceparent(traceparent)
    return parsed[0] if parsed else new_trace_id()


def current_trace_id() -> str | None:
    """The trace of the active span (tracing on), else the one bound by a front door."""
    if _Spans.on:
        span_trace = _span_context()
        if span_trace is not None:
            return span_trace[0]
    return _bound.get()


def current_traceparent() -> str | None:
    """The ``traceparent`` of the active span, so work done later (an execution published
    after commit or re-published by the sweeper) joins this trace; None with tracing off."""
    if not _Spans.on:
        return None
    ids = _span_context()
    return f"00-{ids[0]}-{ids[1]}-{ids[2]:02x}" if ids is not None else None


def outgoing_traceparent() -> str | None:
    """What a published task carries: the active span's ``traceparent``, or with tracing off
    one made of the bound trace id, so the worker's logs name the same trace."""
    active = current_traceparent()
    if active is not None:
        return active
    trace_id = _bound.get()
    return f"00-{trace_id}-{secrets.token_hex(8)}-01" if trace_id else None


@contextmanager
def bound(trace_id: str | None) -> Iterator[None]:
    """Bind the trace of the request or task being served for the block."""
    token = _bound.set(trace_id)
    try:
        yield
    finally:
        _bound.reset(token)


@contextmanager
def continued(traceparent: str | None, trace_id: str | None) -> Iterator[None]:
    """Run the block inside a trace that began earlier: a stored ``traceparent`` (its span
    becomes the parent of the spans started here), or only the stored trace id."""
    parsed = parse_traceparent(traceparent)
    trace = parsed[0] if parsed else trace_id
    with bound(trace):
        if not _Spans.on or trace is None:
            yield
            return
        # No sampled flag to carry: the sampler decides for remote parents (service.telemetry).
        with _remote_parent(trace, parsed[1] if parsed else None):
            yield


def enable_spans() -> None:
    """Called by ``service.telemetry`` once a tracer provider is installed in this process."""
    _Spans.on = True


@contextmanager
def _remote_parent(trace_id: str, span_id: str | None) -> Iterator[None]:
    """Make a span of another process the parent of the spans started in the block. Without
    its span id (a row stored with tracing off), the trace is joined under a made-up parent."""
    from opentelemetry import context, trace

    parent = trace.SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id or secrets.token_hex(8), 16),
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )
    token = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(parent)))
    try:
        yield
    finally:
        context.detach(token)


def _span_context() -> tuple[str, str, int] | None:
    """(trace id, span id, trace flags) of the active span, if there is one."""
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    trace_id, span_id = (
        trace.format_trace_id(context.trace_id),
        trace.format_span_id(context.span_id),
    )
    return trace_id, span_id, int(context.trace_flags)
