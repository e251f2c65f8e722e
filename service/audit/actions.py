"""Audit use cases: record an event, verify a tenant's chain."""

from __future__ import annotations

from contextlib import closing
from typing import Any

from sqlmodel import Session

from service.audit import chain, repository
from service.errors import DomainError
from service.sql import utcnow


def record(
    session: Session,
    *,
    tenant: str,
    actor: str,
    type: str,
    data: dict[str, Any] | None = None,
    draft_id: str | None = None,
    execution_id: str | None = None,
    trace_id: str | None = None,
) -> None:
    """Record an event in the current unit of work (it commits with the change it describes).

    ``data`` must already be masked: no secrets, no raw PII.
    """
    chain.record(
        session,
        chain.RecordedEvent(
            tenant=tenant,
            actor=actor,
            type=type,
            at=utcnow(),
            data=data or {},
            draft_id=draft_id,
            execution_id=execution_id,
            trace_id=trace_id,
        ),
    )


def verify(session: Session, tenant: str) -> chain.Verification:
    """Recompute the tenant's chain and check it ends at the recorded head."""
    # closing(): an early return on the first bad event must still release the DB cursor.
    with closing(repository.iter_chain(session, tenant)) as events:
        result = chain.verify_events(event.model_dump() for event in events)
    if not result.ok:
        return result
    head = repository.get_head(session, tenant)
    if head is not None and (head.seq, head.hash) != (result.head_seq, result.head_hash):
        # The tail was cut off (or the head row was edited): the chain stops short.
        return chain.Verification(
            False,
            result.events_checked,
            result.head_seq,
            result.head_hash,
            result.head_seq + 1,
            f"the chain ends at seq {result.head_seq} but the head records seq {head.seq}",
        )
    return result


def record_refusal(
    session: Session,
    *,
    tenant: str,
    actor: str,
    operation: str,
    error: DomainError,
    draft_id: str | None = None,
    execution_id: str | None = None,
    trace_id: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Audit a refused request as ``<operation>.refused`` with the error's code and message."""
    record(
        session,
        tenant=tenant,
        actor=actor,
        type=f"{operation}.refused",
        draft_id=draft_id,
        execution_id=execution_id,
        trace_id=trace_id,
        data={
            **(data or {}),
            "error": {
                "code": error.code,
                "category": error.category.value,
                "message": error.message,
            },
        },
    )
