"""Verify reads the chain with one Core SELECT (``verification.stored_chain``), not ORM objects.

What it reads must be exactly what the ORM read before (every field, same values and types,
on both backends), only the tenant's own events, in seq order, across more than one batch.
"""

from __future__ import annotations

from contextlib import closing
from typing import Any

from sqlalchemy import Engine, update
from sqlmodel import Session, col, select

from service.audit import actions as audit
from service.audit import verification
from service.audit.models import AuditEvent
from service.audit.offline import FIELDS
from service.db import read_scope, session_scope
from service.runtime import Runtime
from tests.support.backends import both_backends

# What the verifier reads back must be the same on both backends.
pytestmark = both_backends

EVENTS = AuditEvent.__table__  # type: ignore[attr-defined]


def record(engine: Engine, tenant: str, count: int, data: dict[str, Any] | None = None) -> None:
    with session_scope(engine) as session:
        for index in range(count):
            audit.record(
                session,
                tenant=tenant,
                actor="test:stored",
                type="test.event",
                data=data if data is not None else {"index": index},
                draft_id=f"dft_{index}" if index % 2 else None,
            )


def stored(engine: Engine, tenant: str) -> list[dict[str, Any]]:
    with read_scope(engine) as session, closing(verification.stored_chain(session, tenant)) as rows:
        return list(rows)


def test_the_core_select_reads_what_the_orm_read(runtime: Runtime) -> None:
    nested = {"note": "Kratzer am Gehäuse \U0001f600", "amount": {"minor": 2500, "ok": True}}
    record(runtime.engine, "acme", 3)
    record(runtime.engine, "acme", 1, data=nested)
    with Session(runtime.engine) as session:
        statement = (
            select(AuditEvent).where(col(AuditEvent.tenant) == "acme").order_by(col(AuditEvent.seq))
        )
        through_orm = [event.model_dump() for event in session.exec(statement)]
    rows = stored(runtime.engine, "acme")
    assert [set(row) for row in rows] == [set(FIELDS)] * 4
    assert rows == [{name: event[name] for name in FIELDS} for event in through_orm]
    assert rows[-1]["data"] == nested
    assert all(row["at"].utcoffset() is not None for row in rows)  # aware UTC, as hashed


def test_only_the_tenants_own_events_are_read_in_seq_order(runtime: Runtime) -> None:
    record(runtime.engine, "tenant-a", 2)
    record(runtime.engine, "tenant-b", 3)
    record(runtime.engine, "tenant-a", 2)
    rows = stored(runtime.engine, "tenant-a")
    assert [row["seq"] for row in rows] == [1, 2, 3, 4]
    assert {row["tenant"] for row in rows} == {"tenant-a"}


def test_a_chain_longer_than_one_batch_is_read_whole_and_verifies(
    runtime: Runtime, monkeypatch: Any
) -> None:
    monkeypatch.setattr(verification, "_BATCH", 7)
    record(runtime.engine, "acme", 30)
    assert [row["seq"] for row in stored(runtime.engine, "acme")] == list(range(1, 31))
    with read_scope(runtime.engine) as session:
        result = audit.verify(session, "acme")
    assert result.ok, result.problem
    assert result.events_checked == 30


def test_an_event_moved_in_from_another_tenant_is_detected(runtime: Runtime) -> None:
    record(runtime.engine, "tenant-a", 2)
    record(runtime.engine, "tenant-b", 3)
    # Re-label tenant-b's third event as tenant-a's third: seq and prev_hash fit nowhere.
    with runtime.engine.begin() as connection:
        connection.execute(
            update(EVENTS)
            .where((EVENTS.c.tenant == "tenant-b") & (EVENTS.c.seq == 3))
            .values(tenant="tenant-a")
        )
    with read_scope(runtime.engine) as session:
        moved_into = audit.verify(session, "tenant-a")
        moved_from = audit.verify(session, "tenant-b")
    assert moved_into.ok is False
    assert moved_into.first_bad_seq == 3
    assert moved_from.ok is False  # its head records seq 3, the chain now ends at 2
    assert moved_from.first_bad_seq == 3
