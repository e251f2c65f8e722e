"""A real OTLP/HTTP trace receiver for tests: ``POST /v1/traces``, protobuf or JSON.

It decodes what the SDK's exporter sends (opentelemetry-proto) and keeps every span, so a
test can ask which spans of which services reached it, in which trace, under which parent.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str | None
    kind: int
    attributes: dict[str, Any]


@dataclass
class Receiver:
    url: str  # what OTEL_EXPORTER_OTLP_ENDPOINT is set to
    spans: list[ReceivedSpan] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def in_trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self.lock:
            return [span for span in self.spans if span.trace_id == trace_id]

    def wait_for(
        self, condition: Callable[[Receiver], bool], what: str, timeout: float = 60
    ) -> None:
        deadline = time.monotonic() + timeout
        while not condition(self):
            assert time.monotonic() < deadline, f"no {what}; received: {self.spans}"
            time.sleep(0.05)  # polling the condition, until the deadline

    def add(self, spans: list[ReceivedSpan]) -> None:
        with self.lock:
            self.spans.extend(spans)


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """A receiver on a free loopback port, serving until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    receiver = Receiver(url=f"http://127.0.0.1:{server.server_address[1]}")
    server.receiver = receiver  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        json_body = self.headers.get("Content-Type", "").startswith("application/json")
        spans = _from_json(json.loads(body)) if json_body else _from_protobuf(body)
        self.server.receiver.add(spans)  # type: ignore[attr-defined]
        if json_body:
            payload, content_type = b"{}", "application/json"
        else:
            payload = ExportTraceServiceResponse().SerializeToString()
            content_type = "application/x-protobuf"
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest shows a failing test's output, and this would be all of it."""


def _from_protobuf(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest.FromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        service=str(resource.get("service.name", "")),
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex() or None,
                        kind=span.kind,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                    )
                )
    return spans


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    return getattr(value, which) if which in _SCALARS else None


_SCALARS = {"string_value", "bool_value", "int_value", "double_value"}


def _from_json(document: dict[str, Any]) -> list[ReceivedSpan]:
    """OTLP/JSON: the protobuf's JSON mapping, except that ids are hex, not base64."""
    spans = []
    for resource_spans in document.get("resourceSpans", []):
        resource = _json_attributes(resource_spans.get("resource", {}).get("attributes", []))
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                spans.append(
                    ReceivedSpan(
                        service=str(resource.get("service.name", "")),
                        name=span["name"],
                        trace_id=span["traceId"].lower(),
                        span_id=span["spanId"].lower(),
                        parent_span_id=span.get("parentSpanId", "").lower() or None,
                        kind=int(span.get("kind", 0)),
                        attributes=_json_attributes(span.get("attributes", [])),
                    )
                )
    return spans


def _json_attributes(attributes: list[dict[str, Any]]) -> dict[str, Any]:
    found = {}
    for attribute in attributes:
        value = attribute.get("value", {})
        found[attribute["key"]] = next(
            (
                value[k]
                for k in ("stringValue", "boolValue", "intValue", "doubleValue")
                if k in value
            ),
            None,
        )
    return found
