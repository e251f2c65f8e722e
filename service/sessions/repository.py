"""Every query of the console: its session rows, and the cheap reads its live views poll."""

from __future__ import annotations

from collections.abc import Collection

from sqlmodel import Session, col, select

from service.audit.models import AuditEvent
from service.sessions.models import ConsoleSession


def add(session: Session, console_session: ConsoleSession) -> None:
    session.add(console_session)
    session.flush()


def by_secret_digest(session: Session, secret_sha256: str) -> ConsoleSession | None:
    statement = select(ConsoleSession).where(col(ConsoleSession.secret_sha256) == secret_sha256)
    return session.exec(statement).one_or_none()


def get(session: Session, session_id: str, *, for_update: bool = False) -> ConsoleSession | None:
    statement = select(ConsoleSession).where(col(ConsoleSession.id) == session_id)
    if for_update:
        statement = statement.with_for_update().execution_options(populate_existing=True)
    return session.exec(statement).one_or_none()


def events_after(
    session: Session, tenant: str, *, after_seq: int, types: Collection[str], limit: int
) -> list[AuditEvent]:
    """The tenant's events of ``types`` with seq > after_seq, oldest first (one index range
    on (tenant, seq): what a live view polls every second)."""
    statement = (
        select(AuditEvent)
        .where(
            col(AuditEvent.tenant) == tenant,
            col(AuditEvent.seq) > after_seq,
            col(AuditEvent.type).in_(sorted(types)),
        )
        .order_by(col(AuditEvent.seq))
        .limit(limit)
    )
    return list(session.exec(statement).all())
