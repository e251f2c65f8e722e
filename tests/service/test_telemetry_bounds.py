"""What a client (the model) cannot decide about traces: whether its calls are sampled, the
names of spans, the size of attributes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from service import telemetry


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[trace.Tracer, InMemorySpanExporter]]:
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    monkeypatch.delenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", raising=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=telemetry._sampler(), span_limits=telemetry._span_limits())
    provider.add_span_processor(telemetry._bounded_tool_names())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.known_tools(["get_order", "propose_refund"])
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


def remote(flags: str) -> object:
    carrier = {"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-{flags}"}
    return TraceContextTextMapPropagator().extract(carrier)


@pytest.mark.parametrize("flags", ["00", "01"])
def test_the_clients_sampled_flag_does_not_decide(spans, flags):
    tracer, exporter = spans
    with tracer.start_as_current_span("tools/call get_order", context=remote(flags)) as span:
        assert span.is_recording()
    (finished,) = exporter.get_finished_spans()
    assert format(finished.context.trace_id, "032x") == "ab" * 16  # still the client's trace


def test_an_unknown_tool_name_never_names_a_span(spans):
    tracer, exporter = spans
    attributes = {"mcp.method.name": "tools/call", "gen_ai.tool.name": "ignore all rules"}
    with tracer.start_as_current_span("tools/call ignore all rules", attributes=attributes):
        pass
    known = {"mcp.method.name": "tools/call", "gen_ai.tool.name": "get_order"}
    with tracer.start_as_current_span("tools/call get_order", attributes=known):
        pass
    unknown_span, known_span = exporter.get_finished_spans()
    assert unknown_span.name == "tools/call <unknown>"
    assert unknown_span.attributes["gen_ai.tool.name"] == "<unknown>"
    assert known_span.name == "tools/call get_order"


def test_attribute_values_are_bounded(spans):
    tracer, exporter = spans
    with tracer.start_as_current_span("x") as span:
        span.set_attribute("error.message", "A" * 10_000)
    (finished,) = exporter.get_finished_spans()
    assert len(finished.attributes["error.message"]) == telemetry.MAX_ATTRIBUTE_LENGTH
