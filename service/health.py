"""Reachability checks used by readiness probes (no framework, no Celery)."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from sqlalchemy import create_engine, text

TIMEOUT_SECONDS = 2.0


def broker_reachable(url: str) -> str:
    """ "ok", or why the broker cannot be reached."""
    if url.startswith("sqla+"):  # kombu's server-less SQLAlchemy transport: query its database
        engine = create_engine(url.removeprefix("sqla+"))
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
            return "ok"
        except Exception as exc:  # a probe reports, it does not raise
            return f"unavailable: {type(exc).__name__}"
        finally:
            engine.dispose()
    parts = urlsplit(url)
    host, port = parts.hostname or "localhost", parts.port or _default_port(parts.scheme)
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_SECONDS):
            return "ok"
    except OSError as exc:
        return f"unavailable: {exc.strerror or type(exc).__name__}"


def _default_port(scheme: str) -> int:
    return {"redis": 6379, "rediss": 6380, "amqp": 5672}.get(scheme, 6379)
