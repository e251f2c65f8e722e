"""Every query on the audit tables."""

from __future__ import annotations

from collections.abc import Generator
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, select

from service.audit.models import AuditEvent, AuditHead
from service.audit.schemas import EventFilter

_BATCH = 1_000


def iter_chain(session: Session, tenant: str) -> Generator[AuditEvent]:
    """A tenant's whole chain in ``seq`` order, fetched in batches (constant memory)."""
    return stream(session, tenant, EventFilter())


def get_head(session: Session, tenant: str) -> AuditHead | None:
    return session.get(AuditHead, tenant)


def head_seq(session: Session, tenant: str) -> int:
    """The tenant's last seq (0 for an empty chain), read without loading the head row."""
    found = session.exec(select(AuditHead.seq).where(col(AuditHead.tenant) == tenant)).first()
    return found if found is not None else 0


def events_for(
    session: Session, tenant: str, *, draft_id: str | None = None, type_: str | None = None
) -> list[AuditEvent]:
    statement = _filtered(tenant, EventFilter(draft_id=draft_id, type=type_))
    return list(session.exec(statement.order_by(col(AuditEvent.seq))).all())


def _filtered(tenant: str, filters: EventFilter) -> Any:
    statement = select(AuditEvent).where(col(AuditEvent.tenant) == tenant)
    for name in ("type", "actor", "draft_id", "execution_id", "trace_id"):
        value = getattr(filters, name)
        if value is not None:
            statement = statement.where(getattr(AuditEvent, name) == value)
    if filters.since is not None:
        statement = statement.where(col(AuditEvent.at) >= filters.since)
    if filters.until is not None:
        statement = statement.where(col(AuditEvent.at) < filters.until)
    if filters.through_seq is not None:
        statement = statement.where(col(AuditEvent.seq) <= filters.through_seq)
    return statement


def page(
    session: Session, tenant: str, filters: EventFilter, *, after_seq: int, limit: int
) -> list[AuditEvent]:
    """Matching events with seq > after_seq, oldest first. Appends only ever add higher seqs,
    so a seq cursor neither skips nor repeats while the log grows."""
    statement = _filtered(tenant, filters).where(col(AuditEvent.seq) > after_seq)
    if filters.since is not None or filters.until is not None:
        first, last = _seq_range(session, tenant, filters)
        statement = statement.where(col(AuditEvent.seq).between(first, last))
    statement = statement.order_by(col(AuditEvent.seq)).limit(limit)
    return list(session.exec(statement).all())


def _seq_range(session: Session, tenant: str, filters: EventFilter) -> tuple[int, int]:
    """The seqs a time window covers. ``at`` never decreases along the chain, so the window
    is one contiguous run, found with two index seeks instead of a scan."""
    first, last = 1, 2**62
    if filters.since is not None:
        found = session.exec(
            select(AuditEvent.seq)
            .where(col(AuditEvent.tenant) == tenant, col(AuditEvent.at) >= filters.since)
            .order_by(col(AuditEvent.at), col(AuditEvent.seq))
            .limit(1)
        ).first()
        first = found if found is not None else last
    if filters.until is not None:
        found = session.exec(
            select(AuditEvent.seq)
            .where(col(AuditEvent.tenant) == tenant, col(AuditEvent.at) < filters.until)
            .order_by(col(AuditEvent.at).desc(), col(AuditEvent.seq).desc())
            .limit(1)
        ).first()
        last = found if found is not None else 0
    return first, last


def stream(session: Session, tenant: str, filters: EventFilter) -> Generator[AuditEvent]:
    """Every matching event, oldest first, fetched in batches (constant memory)."""
    statement = (
        _filtered(tenant, filters).order_by(col(AuditEvent.seq)).execution_options(yield_per=_BATCH)
    )
    result = session.exec(statement)
    try:
        for event in result:
            yield event
            session.expunge(event)
    finally:
        result.close()


def for_drafts(session: Session, tenant: str, draft_ids: set[str]) -> list[AuditEvent]:
    if not draft_ids:
        return []
    statement = (
        select(AuditEvent)
        .where(col(AuditEvent.tenant) == tenant, col(AuditEvent.draft_id).in_(sorted(draft_ids)))
        .order_by(col(AuditEvent.seq))
    )
    return list(session.exec(statement).all())


def events_matching(session: Session, tenant: str, filters: EventFilter) -> list[AuditEvent]:
    return list(session.exec(_filtered(tenant, filters).order_by(col(AuditEvent.seq))).all())


def tool_calls_in_traces(
    session: Session, tenant: str, trace_ids: set[str], *, actor: str, limit: int
) -> list[AuditEvent]:
    """The first ``limit`` tool.* events ``actor`` recorded in the traces, oldest first (a
    trace id is the caller's choice: anyone's events may share it, and any number)."""
    if not trace_ids:
        return []
    statement = (
        select(AuditEvent)
        .where(
            col(AuditEvent.tenant) == tenant,
            col(AuditEvent.trace_id).in_(sorted(trace_ids)),
            col(AuditEvent.actor) == actor,
            col(AuditEvent.type).startswith("tool."),
        )
        .order_by(col(AuditEvent.seq))
        .limit(limit)
    )
    return list(session.exec(statement).all())


def page_newest_first(
    session: Session, tenant: str, filters: EventFilter, *, before_seq: int | None, limit: int
) -> list[AuditEvent]:
    """Matching events with seq < before_seq (all when None), newest first: the console's
    view of the log (the API pages oldest first)."""
    statement = _filtered(tenant, filters)
    if before_seq is not None:
        statement = statement.where(col(AuditEvent.seq) < before_seq)
    statement = statement.order_by(col(AuditEvent.seq).desc()).limit(limit)
    return list(session.exec(statement).all())


def tool_calls_between(
    session: Session, tenant: str, actor: str, *, since: datetime, until: datetime, limit: int
) -> list[AuditEvent]:
    """The tool.* events ``actor`` recorded between the two moments, oldest first."""
    statement = (
        select(AuditEvent)
        .where(
            col(AuditEvent.tenant) == tenant,
            col(AuditEvent.actor) == actor,
            col(AuditEvent.type).startswith("tool."),
            col(AuditEvent.at) >= since,
            col(AuditEvent.at) <= until,
        )
        .order_by(col(AuditEvent.seq))
        .limit(limit)
    )
    return list(session.exec(statement).all())
