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

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Table, insert, update
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key
from sqlmodel import Session, select

from service import metrics
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


def append_recorded(session: Session) -> list[dict[str, Any]]:
    """Append every recorded event to its tenant's chain, in recording order; the appended
    events as stored (``seq``, ``at``, ``hash`` included), for the caller to act on.

    Called by ``session_scope`` as the last step before commit (which then registers the
    webhook deliveries they announce). The tenant's head row is locked here, at the very
    end, so the lock is held only for the commit and never ordered before a business row
    lock (no deadlocks).
    """
    pending: list[RecordedEvent] = session.info.pop(_PENDING_KEY, [])
    by_tenant: dict[str, list[RecordedEvent]] = {}
    for event in pending:
        by_tenant.setdefault(event.tenant, []).append(event)
    if not by_tenant:
        return []
    session.flush()  # the unit's own changes go first, in the order the ORM gives them
    started = time.perf_counter()
    appended: list[dict[str, Any]] = []
    for tenant in sorted(by_tenant):  # a fixed lock order across tenants
        appended += _append(session, tenant, by_tenant[tenant])
    metrics.audit_appended(session, pending, started)
    return appended


def _append(session: Session, tenant: str, recorded: list[RecordedEvent]) -> list[dict[str, Any]]:
    seq, prev_hash, last_at = _lock_head(session, tenant)
    # ``at`` is the moment of joining the chain, taken under the head lock and never
    # before the previous event's, so time and seq order agree: a time range is a
    # contiguous run of seqs, even across servers whose clocks disagree a little.
    at = max(utcnow(), last_at) if last_at is not None else utcnow()
    rows: list[dict[str, Any]] = []
    for event in recorded:
        seq += 1
        row = {
            "tenant": tenant,
            "seq": seq,
            "at": at,
            "actor": event.actor,
            "type": event.type,
            "draft_id": event.draft_id,
            "execution_id": event.execution_id,
            "trace_id": event.trace_id,
            "data": event.data,
            "prev_hash": prev_hash,
        }
        row["hash"] = prev_hash = event_hash(row)
        rows.append(row)
    moved = update(_HEADS).where(_HEADS.c.tenant == tenant).values(seq=seq, hash=prev_hash, at=at)
    if len(rows) == 1 and session.get_bind().dialect.name == "postgresql":
        # One round trip: PostgreSQL runs a data-modifying WITH whether or not it is read. (Not
        # for several events: the order of several WITHs is unspecified, and ids follow seq.)
        session.execute(moved.add_cte(insert(_EVENTS).values(rows[0]).cte("appended")))
    else:
        session.execute(insert(_EVENTS), rows)  # in order; one statement compiled once
        session.execute(moved)
    _refresh_loaded_head(session, tenant, seq, prev_hash, at)
    return rows


_HEADS: Table = AuditHead.__table__  # type: ignore[attr-defined]
_EVENTS: Table = AuditEvent.__table__  # type: ignore[attr-defined]


def _lock_head(session: Session, tenant: str) -> tuple[int, str, datetime | None]:
    """The tenant's head (seq, hash, at), locked until commit; created on the first append."""
    statement = (
        select(_HEADS.c.seq, _HEADS.c.hash, _HEADS.c.at)
        .where(_HEADS.c.tenant == tenant)
        .with_for_update()
    )
    head = session.execute(statement).one_or_none()
    if head is None:  # the tenant's first event ever (or a concurrent first one: wait for it)
        insert_or_ignore(session, _HEADS, {"tenant": tenant, "seq": 0, "hash": GENESIS_HASH})
        head = session.execute(statement).one()
    return int(head.seq), str(head.hash), head.at


def _refresh_loaded_head(session: Session, tenant: str, seq: int, hash: str, at: datetime) -> None:
    # The head was moved by SQL, not the ORM: a copy this session loaded earlier shows the move.
    loaded = session.identity_map.get(identity_key(AuditHead, tenant))
    if loaded is not None:
        for name, value in (("seq", seq), ("hash", hash), ("at", at)):
            set_committed_value(loaded, name, value)
