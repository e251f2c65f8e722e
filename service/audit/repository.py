"""Every query on the audit tables."""

from __future__ import annotations

from collections.abc import Iterator

from sqlmodel import Session, col, select

from service.audit.models import AuditEvent, AuditHead

_BATCH = 1_000


def iter_chain(session: Session, tenant: str) -> Iterator[AuditEvent]:
    """A tenant's events in ``seq`` order, fetched in batches (constant memory)."""
    statement = (
        select(AuditEvent)
        .where(col(AuditEvent.tenant) == tenant)
        .order_by(col(AuditEvent.seq))
        .execution_options(yield_per=_BATCH)
    )
    for event in session.exec(statement):
        yield event
        session.expunge(event)


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
