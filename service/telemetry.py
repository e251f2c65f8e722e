"""Traces: OpenTelemetry, switched on only by the standard OTLP endpoint variables.

``configure(component)`` installs a tracer provider exporting over OTLP/HTTP when
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set; everything
else comes from the standard ``OTEL_*`` variables (service name, resource attributes,
sampler, batch delays, headers). Without them nothing is imported or installed, and the
helpers below cost one boolean test. docs/observability.md lists the spans.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from service import tracing
from service.tracing import outgoing_traceparent, trace_id_from

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from sqlalchemy import Engine

# The ASGI interface, spelt out: the core imports no web framework (import-linter).
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
SERVICE_NAMES = {
    "api": "draftgate-api",
    "mcp": "draftgate-mcp",
    "worker": "draftgate-worker",
    "beat": "draftgate-beat",
}
TRACER_NAME = "draftgate"
UNKNOWN_TOOL = "<unknown>"
# The MCP SDK wraps each message in a span of its own ("tools/call <name>", the name as the
# client sent it); ours, inside it, is the core's work with draftgate's outcome and draft id.
TOOL_SPAN = "draftgate.call_tool"
# The ASGI instrumentation's spans for each body chunk received and sent: noise here.
EXCLUDED_ASGI_SPANS = ["receive", "send"]
UNTRACED_PATHS = "healthz,readyz,metrics"  # probes and scrapes: not worth a trace each


class _Installed:
    """This process's tracer provider, once ``configure`` installed one."""

    provider: TracerProvider | None = None


def endpoint_configured(environ: Mapping[str, str] = os.environ) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def build_tracer_provider(component: str) -> TracerProvider | None:
    """A provider exporting this component's spans in batches over OTLP/HTTP, or None when
    no OTLP endpoint is configured."""
    if not endpoint_configured():
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_SERVICE_NAME, when set, wins over the component's default name.
    defaults = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: _name(component)}
    provider = TracerProvider(
        resource=Resource.create(defaults), sampler=_sampler(), span_limits=_span_limits()
    )
    provider.add_span_processor(_bounded_tool_names())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def _sampler() -> Any:
    """The operator's sampler (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG), deciding for
    remote parents too: the client's sampled flag is the agent's to set, and would otherwise
    let it drop its own calls from the traces (flags 00) or force every one in (01)."""
    from opentelemetry.sdk.trace import sampling

    name = os.environ.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").strip().lower()
    root: sampling.Sampler = sampling.ALWAYS_ON
    if name.endswith("always_off"):
        root = sampling.ALWAYS_OFF
    elif name.endswith("traceidratio"):
        try:
            ratio = float(os.environ.get("OTEL_TRACES_SAMPLER_ARG", "1.0"))
        except ValueError:
            ratio = 1.0
        root = sampling.TraceIdRatioBased(min(max(ratio, 0.0), 1.0))
    return sampling.ParentBased(root, remote_parent_sampled=root, remote_parent_not_sampled=root)


def _span_limits() -> Any:
    """Attribute values bounded (the SDK's spans carry client-sent text), unless the operator
    set OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT."""
    from opentelemetry.sdk.trace import SpanLimits

    limit = None if os.environ.get("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT") else MAX_ATTRIBUTE_LENGTH
    return SpanLimits(max_attribute_length=limit)


MAX_ATTRIBUTE_LENGTH = 256


class _KnownTools:
    """The tool names this process serves (the registry's), set by the MCP door."""

    names: frozenset[str] = frozenset()


def known_tools(names: Iterable[str]) -> None:
    _KnownTools.names = frozenset(names)


def bound_tool_name(span: Any) -> None:
    """The MCP SDK names its span ``tools/call <name>`` with the name the client sent; a name
    that is not one of ours becomes ``<unknown>``, so the model's text cannot mint span names
    (unbounded cardinality in a trace backend) or fill attributes."""
    attributes = span.attributes or {}
    for attribute in ("gen_ai.tool.name", "gen_ai.prompt.name"):
        value = attributes.get(attribute)
        if value is not None and value not in _KnownTools.names:
            span.set_attribute(attribute, UNKNOWN_TOOL)
            method = str(attributes.get("mcp.method.name", "mcp"))[:32]
            span.update_name(f"{method} {UNKNOWN_TOOL}")


def _bounded_tool_names() -> Any:
    """A span processor applying ``bound_tool_name`` as each span starts (built here: the SDK
    is imported only when tracing is on)."""
    from opentelemetry.sdk.trace import SpanProcessor

    class BoundedToolNames(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            bound_tool_name(span)

    return BoundedToolNames()


def configure(component: str) -> bool:
    """Install the tracer provider for this process; False (and nothing done) without an
    OTLP endpoint. Call after any fork: the batch exporter's thread does not survive one."""
    if _Installed.provider is not None:
        return True
    provider = build_tracer_provider(component)
    if provider is None:
        return False
    from opentelemetry import trace

    trace.set_tracer_provider(provider)
    _Installed.provider = provider
    tracing.enable_spans()
    return True


def enabled() -> bool:
    return _Installed.provider is not None


def tracer_provider() -> TracerProvider | None:
    return _Installed.provider


def instrument_engine(engine: Engine) -> Engine:
    """``engine``, with SQL spans when tracing. Per engine, not by patching create_engine:
    the broker's own engines (kombu's SQLite transport polls) must not fill traces."""
    if _Installed.provider is None:
        return engine
    from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
    from opentelemetry.metrics import get_meter

    tracer = _Installed.provider.get_tracer("opentelemetry.instrumentation.sqlalchemy")
    usage = get_meter(TRACER_NAME).create_up_down_counter("db.client.connections.usage")
    EngineTracer(tracer, engine, usage)  # type: ignore[no-untyped-call]
    return engine


def instrument_celery_worker() -> None:
    """Spans for the tasks this worker runs, each a child of the context in its headers."""
    if _Installed.provider is None:
        return
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    CeleryInstrumentor().instrument(tracer_provider=_Installed.provider)  # type: ignore[no-untyped-call]


@contextmanager
def publishing(task: str) -> Iterator[dict[str, str]]:
    """The headers a task is published with, inside a producer span when tracing: the
    worker's span becomes a child of it. With tracing off, the bound trace id travels alone
    (for the worker's logs)."""
    if _Installed.provider is None:
        outgoing = outgoing_traceparent()
        yield {"traceparent": outgoing} if outgoing else {}
        return
    from opentelemetry import propagate, trace

    kind = trace.SpanKind.PRODUCER
    with _Installed.provider.get_tracer(TRACER_NAME).start_as_current_span(
        f"publish {task}", kind=kind
    ):
        headers: dict[str, str] = {}
        propagate.inject(headers)
        yield headers


class ToolCallSpan:
    """The span of one MCP tool call; a no-op with tracing off. Carries the tool's name, its
    outcome and the draft it concerns, never the arguments (they are the model's text)."""

    def __init__(self, span: Any = None) -> None:
        self._span = span

    def finish(self, outcome: str, *, draft_id: object = None) -> None:
        if self._span is None:
            return
        self._span.set_attribute("draftgate.outcome", outcome)
        if isinstance(draft_id, str):
            self._span.set_attribute("draftgate.draft_id", draft_id)
        if outcome != "ok":
            from opentelemetry.trace import StatusCode

            self._span.set_status(StatusCode.ERROR, outcome)


@contextmanager
def tool_call(tool: str | None, traceparent: str | None) -> Iterator[ToolCallSpan]:
    """A span for one ``tools/call`` of ``tool`` (None: a name not in the catalogue, which is
    the model's text), child of the SDK's span of the message (or the HTTP request's), else
    of the client's traceparent."""
    if _Installed.provider is None:
        yield ToolCallSpan()
        return
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    tool = tool or UNKNOWN_TOOL
    parent = None
    if not trace.get_current_span().get_span_context().is_valid:  # stdio, or no HTTP span
        parent = TraceContextTextMapPropagator().extract({"traceparent": traceparent or ""})
    attributes = {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
    }
    tracer = _Installed.provider.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"{TOOL_SPAN} {tool}", context=parent, kind=trace.SpanKind.INTERNAL, attributes=attributes
    ) as span:
        yield ToolCallSpan(span)


def observe_asgi(app: ASGIApp) -> ASGIApp:
    """An HTTP server app with its request's trace bound for logs and audit, and a server
    span per request (child of the client's ``traceparent``) when tracing."""
    bound: ASGIApp = TraceContext(app)
    if _Installed.provider is None:
        return bound
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    return OpenTelemetryMiddleware(
        bound,
        excluded_urls=UNTRACED_PATHS,
        tracer_provider=_Installed.provider,
        exclude_spans=EXCLUDED_ASGI_SPANS,  # type: ignore[arg-type]
    )


class TraceContext:
    """ASGI middleware binding each HTTP request's trace id (the server span's when tracing,
    else the client's ``traceparent``'s or a fresh one), so that every line logged and every
    audit event of the request names the same trace."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        traceparent = None
        for key, value in scope["headers"]:
            if key.lower() == b"traceparent":
                traceparent = value.decode("latin-1")
        with tracing.bound(trace_id_from(traceparent)):
            await self.app(scope, receive, send)


def _name(component: str) -> str:
    return SERVICE_NAMES.get(component, f"draftgate-{component}")
