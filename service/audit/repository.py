"""Every query on the audit tables."""

from __future__ import annotations

from collections.abc import Generator

from sqlmodel import Session, col, select

from service.audit.models import AuditEvent, AuditHead

_BATCH = 1_000


def iter_chain(session: Session, tenant: str) -> Generator[AuditEvent]:
    """A tenant's events in ``seq`` order, fetched in batches (constant memory)."""
    statement = (
        select(AuditEvent)
        .where(col(AuditEvent.tenant) == tenant)
        .order_by(col(AuditEvent.seq))
        .execution_options(yield_per=_BATCH)
    )
    result = session.exec(statement)
    try:
        for event in result:
            yield event
            session.expunge(event)
    finally:
        result.close()  # a server-side cursor must not outlive an abandoned walk


def get_head(session: Session, tenant: str) -> AuditHead | None:
    return session.get(AuditHead, tenant)


def events_for(
    session: Session, tenant: str, *, draft_id: str | None = None, type_: str | None = None
) -> list[AuditEvent]:
    statement = select(AuditEvent).where(col(AuditEvent.tenant) == tenant)
    if draft_id is not None:
        statement = statement.where(col(AuditEvent.draft_id) == draft_id)
    if type_ is not None:
        statement = statement.where(col(AuditEvent.type) == type_)
    return list(session.exec(statement.order_by(col(AuditEvent.seq))).all())
