"""service.telemetry and service.tracing: traces on only with an OTLP endpoint, and the trace
of a request carried to whatever runs later in its name (a published task)."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from service import telemetry, tracing
from service.tracing import bound, continued, new_trace_id, outgoing_traceparent, trace_id_from
from tests.support.otlp import otlp_receiver

SHOW_PROVIDER = """
from opentelemetry import trace
from service.cli.serve import _observe

_observe("mcp")
provider = trace.get_tracer_provider()
print(type(provider).__name__)
if hasattr(provider, "resource"):  # the SDK's provider, not the API's no-op proxy
    names, processor = provider._active_span_processor._span_processors  # names, then export
    print(type(names).__name__)
    exporter = processor.span_exporter
    print(type(processor).__name__, type(exporter).__name__, exporter._endpoint)
    print(provider.resource.attributes["service.name"])
"""


def serve_tracer_provider(**otel: str) -> list[str]:
    """What ``draftgate serve`` installs in a process of its own with these variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "DRAFTGATE_"))}
    shown = subprocess.run(
        [sys.executable, "-c", SHOW_PROVIDER],
        env={**env, **otel},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return shown.stdout.splitlines()


@pytest.mark.full  # a process of its own that imports draftgate: seconds
def test_serve_installs_no_tracer_provider_without_an_otlp_endpoint():
    assert serve_tracer_provider() == ["ProxyTracerProvider"]  # the API's no-op default
    assert serve_tracer_provider(
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318", OTEL_SDK_DISABLED="true"
    ) == ["ProxyTracerProvider"]


@pytest.mark.full  # a process of its own that imports draftgate: seconds
def test_serve_exports_in_batches_over_otlp_http_with_an_endpoint():
    assert serve_tracer_provider(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318") == [
        "TracerProvider",
        "BoundedToolNames",
        "BatchSpanProcessor OTLPSpanExporter http://127.0.0.1:4318/v1/traces",
        "draftgate-mcp",
    ]
    assert serve_tracer_provider(
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://collector:4318/traces",
        OTEL_SERVICE_NAME="shop-gateway",
    ) == [
        "TracerProvider",
        "BoundedToolNames",
        "BatchSpanProcessor OTLPSpanExporter http://collector:4318/traces",
        "shop-gateway",
    ]


def test_without_an_endpoint_nothing_is_built_and_the_helpers_do_nothing(monkeypatch):
    for name in telemetry.ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert telemetry.build_tracer_provider("api") is None
    assert not telemetry.configure("api")
    assert not telemetry.enabled()
    assert tracing.current_traceparent() is None
    with telemetry.tool_call("get_order", None) as span:
        span.finish("ok", draft_id="dft_1")  # a no-op span


def test_a_bound_trace_is_the_requests_trace_whatever_header_is_read_again():
    trace_id = new_trace_id()
    header = f"00-{new_trace_id()}-00f067aa0ba902b7-01"
    with bound(trace_id):
        assert trace_id_from(header) == trace_id  # one request, one trace
        assert trace_id_from(None) == trace_id
    assert trace_id_from(None) != trace_id_from(None)  # outside a request: fresh each time


@pytest.mark.parametrize("stored", ["traceparent", "trace id only"])
def test_a_task_published_later_carries_the_trace_it_was_requested_in(stored):
    trace_id = new_trace_id()
    traceparent = f"00-{trace_id}-00f067aa0ba902b7-01" if stored == "traceparent" else None
    assert outgoing_traceparent() is None  # nothing bound: a task published with no trace
    with continued(traceparent, trace_id), telemetry.publishing("draftgate.execute") as headers:
        carried = headers["traceparent"]
    parsed = tracing.parse_traceparent(carried)
    assert parsed is not None
    assert parsed[0] == trace_id
    with continued(f"00-{trace_id}-00f067aa0ba902b7-01", new_trace_id()):
        assert tracing.current_trace_id() == trace_id  # the stored traceparent wins


REPUBLISH = """
import sys
from service import telemetry
from service.tracing import continued

assert telemetry.configure("worker")
with continued(sys.argv[1], None), telemetry.publishing("draftgate.execute") as headers:
    print(headers["traceparent"])
"""


def test_a_republished_task_is_a_child_of_the_stored_request_span_when_tracing():
    """What the sweeper does hours later in another process: the stored traceparent of the
    execute request becomes the parent of the publish, whose context the task carries."""
    trace_id, request_span = new_trace_id(), "00f067aa0ba902b7"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "DRAFTGATE_"))}
    with otlp_receiver() as receiver:
        shown = subprocess.run(
            [sys.executable, "-c", REPUBLISH, f"00-{trace_id}-{request_span}-01"],
            env={**env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        receiver.wait_for(lambda r: bool(r.in_trace(trace_id)), "publish span")
    [publish] = receiver.in_trace(trace_id)
    assert (publish.name, publish.service) == ("publish draftgate.execute", "draftgate-worker")
    assert publish.parent_span_id == request_span
    assert shown.stdout.strip() == f"00-{trace_id}-{publish.span_id}-01"  # the task's parent


def test_the_test_receiver_reads_otlp_json_as_well_as_protobuf():
    """Exporters may send OTLP/JSON (ids in hex); the receiver the tests rely on reads it."""
    trace_id, span_id = new_trace_id(), "00f067aa0ba902b7"
    document = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "probe"}}]
                },
                "scopeSpans": [
                    {"spans": [{"traceId": trace_id, "spanId": span_id, "name": "a", "kind": 2}]}
                ],
            }
        ]
    }
    with otlp_receiver() as receiver:
        response = httpx.post(f"{receiver.url}/v1/traces", json=document, timeout=10)
    assert response.status_code == 200
    [span] = receiver.in_trace(trace_id)
    assert (span.service, span.name, span.span_id, span.parent_span_id) == (
        "probe",
        "a",
        span_id,
        None,
    )
