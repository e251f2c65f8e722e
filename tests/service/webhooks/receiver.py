"""A real webhook receiver for tests: an HTTP server on 127.0.0.1 that verifies each request
with ``standardwebhooks.Webhook.verify`` and keeps what arrived, as a receiver would.

``behaviour`` decides the answers: ``"ok"`` (204), ``"fail"`` (500), ``"slow"`` (answers
only after ``delay`` seconds), or a list of those, one per request, the last repeating.
``events()`` gives each verified message once, deduplicated by ``webhook-id``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError

from harness.servers import free_port


@dataclass
class Arrival:
    headers: dict[str, str]
    body: bytes
    verified: bool
    answered: int


@dataclass
class Receiver:
    url: str
    behaviour: list[str] = field(default_factory=lambda: ["ok"])
    delay: float = 5.0
    secret: str | None = None
    arrivals: list[Arrival] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_answer(self) -> str:
        with self.lock:
            index = min(len(self.arrivals), len(self.behaviour) - 1)
            return self.behaviour[index]

    def verified_events(self) -> list[dict[str, Any]]:
        """Each verified message once (by webhook-id), in order of first arrival."""
        seen: dict[str, dict[str, Any]] = {}
        with self.lock:
            for arrival in self.arrivals:
                if arrival.verified and 200 <= arrival.answered < 300:
                    seen.setdefault(arrival.headers["webhook-id"], json.loads(arrival.body))
        return list(seen.values())

    def all_bytes(self) -> bytes:
        with self.lock:
            return b"\n".join(a.body for a in self.arrivals)

    def count(self) -> int:
        with self.lock:
            return len(self.arrivals)


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            answer = receiver.next_answer()
            verified = False
            if receiver.secret is not None:
                try:
                    Webhook(receiver.secret).verify(body, headers)
                    verified = True
                except WebhookVerificationError:
                    verified = False
            status = {"ok": 204, "fail": 500, "slow": 204, "redirect": 302}[answer]
            if not verified and receiver.secret is not None:
                status = 401  # a receiver refuses what does not verify
            with receiver.lock:
                receiver.arrivals.append(Arrival(headers, body, verified, status))
            if answer == "slow":
                time.sleep(receiver.delay)
            self.send_response(status)
            if answer == "redirect":
                self.send_header("location", "http://127.0.0.1:9/elsewhere")
            body_out = b"nope \x00\x1b[31m secret-looking reply" if status >= 400 else b""
            self.send_header("content-length", str(len(body_out)))
            self.end_headers()
            if body_out:
                self.wfile.write(body_out)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def receiving(behaviour: str | list[str] = "ok", *, delay: float = 5.0) -> Iterator[Receiver]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_placeholder())
    server.daemon_threads = True
    _host, port = server.server_address[:2]
    receiver = Receiver(
        url=f"http://127.0.0.1:{port}/hooks/draftgate",
        behaviour=[behaviour] if isinstance(behaviour, str) else list(behaviour),
        delay=delay,
    )
    server.RequestHandlerClass = _handler(receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def _handler_placeholder() -> type[BaseHTTPRequestHandler]:
    return BaseHTTPRequestHandler


def refused_url() -> str:
    """A loopback URL nothing listens on (connection refused at once)."""
    return f"http://127.0.0.1:{free_port()}/hooks"
