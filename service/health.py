"""What readiness probes and ``draftgate doctor`` check (no framework, no Celery)."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from sqlalchemy import Engine, create_engine, text
from sqlmodel import Session

from service.config import Settings
from service.sql import utcnow

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


def readiness(engine: Engine, settings: Settings) -> dict[str, str]:
    """Each check: "ok", or what is wrong. Ready means every check is ok."""
    checks = {"database": database_reachable(engine)}
    checks["broker"] = broker_reachable(settings.resolved_broker_url())
    if checks["database"] == "ok":
        checks["audit_checkpoints"] = audit_anchored(engine, settings)
    return checks


def database_reachable(engine: Engine) -> str:
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # a probe reports, it does not raise
        return f"unavailable: {type(exc).__name__}"
    return "ok"


def audit_anchored(engine: Engine, settings: Settings) -> str:
    from service.audit.health import checkpoint_health  # the audit domain, only when asked

    with Session(engine) as session:
        health = checkpoint_health(session, settings, now=utcnow())
    return "ok" if health.ok else f"not anchored: {health.detail}"
