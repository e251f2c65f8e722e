"""The hash chain: how an event's hash is built and how events join the chain.

Construction (documented for auditors in docs/audit.md):

    body  = {"seq", "at", "tenant", "actor", "type", "draft_id",
             "execution_id", "trace_id", "data", "prev_hash"}
    hash  = hex(SHA-256(b"draftgate.audit.v1\\n" || JCS(body)))

``at`` is RFC 3339 UTC with microseconds (``2026-11-30T10:00:00.123456Z``);
absent ids are JSON ``null``; the first event of a tenant has
``prev_hash = "0" * 64``. The domain prefix keeps these hashes from ever
colliding with any other SHA-256 the system computes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlmodel import Session, col, select

from service.audit.models import AuditEvent, AuditHead
from service.canonical import canonical_json, sha256_hex
from service.sql import insert_or_ignore, rfc3339, utcnow

DOMAIN_PREFIX = b"draftgate.audit.v1\n"
GENESIS_HASH = "0" * 64
_PENDING_KEY = "draftgate.audit.pending"


@dataclass(frozen=True)
class RecordedEvent:
    """An event recorded during a unit of work, not yet on the chain."""

    tenant: str
    actor: str
    type: str
    data: dict[str, Any] = field(default_factory=dict)
    draft_id: str | None = None
    execution_id: str | None = None
    trace_id: str | None = None


def hash_body(event: AuditEvent | dict[str, Any]) -> dict[str, Any]:
    """The exact JSON value that is hashed for an event."""
    values = event if isinstance(event, dict) else event.model_dump()
    at = values["at"]
    return {
        "seq": values["seq"],
        "at": at if isinstance(at, str) else rfc3339(at),
        "tenant": values["tenant"],
        "actor": values["actor"],
        "type": values["type"],
        "draft_id": values["draft_id"],
        "execution_id": values["execution_id"],
        "trace_id": values["trace_id"],
        "data": values["data"],
        "prev_hash": values["prev_hash"],
    }


def event_hash(event: AuditEvent | dict[str, Any]) -> str:
    return sha256_hex(DOMAIN_PREFIX + canonical_json(hash_body(event)))


def record(session: Session, event: RecordedEvent) -> None:
    """Remember an event; it joins the chain when the unit of work commits."""
    session.info.setdefault(_PENDING_KEY, []).append(event)


def discard_recorded(session: Session) -> None:
    """Forget recorded events (the unit of work they described was rolled back)."""
    session.info.pop(_PENDING_KEY, None)


def append_recorded(session: Session) -> None:
    """Append every recorded event to its tenant's chain, in recording order.

    Called by ``session_scope`` as the last step before commit. The tenant's
    head row is locked here, at the very end, so the lock is held only for the
    commit and never ordered before a business row lock (no deadlocks).
    """
    pending: list[RecordedEvent] = session.info.pop(_PENDING_KEY, [])
    by_tenant: dict[str, list[RecordedEvent]] = {}
    for event in pending:
        by_tenant.setdefault(event.tenant, []).append(event)
    for tenant in sorted(by_tenant):  # a fixed lock order across tenants
        head = _lock_head(session, tenant)
        # ``at`` is the moment of joining the chain, taken under the head lock and never
        # before the previous event's, so time and seq order agree: a time range is a
        # contiguous run of seqs, even across servers whose clocks disagree a little.
        at = max(utcnow(), head.at) if head.at is not None else utcnow()
        for recorded in by_tenant[tenant]:
            row = AuditEvent(
                tenant=tenant,
                seq=head.seq + 1,
                at=at,
                actor=recorded.actor,
                type=recorded.type,
                draft_id=recorded.draft_id,
                execution_id=recorded.execution_id,
                trace_id=recorded.trace_id,
                data=recorded.data,
                prev_hash=head.hash,
                hash="",
            )
            row.hash = event_hash(row)
            session.add(row)
            head.seq, head.hash, head.at = row.seq, row.hash, at
        session.add(head)
    session.flush()


def _lock_head(session: Session, tenant: str) -> AuditHead:
    table = AuditHead.__table__  # type: ignore[attr-defined]
    insert_or_ignore(session, table, {"tenant": tenant, "seq": 0, "hash": GENESIS_HASH})
    statement = (
        select(AuditHead)
        .where(col(AuditHead.tenant) == tenant)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    return session.exec(statement).one()
