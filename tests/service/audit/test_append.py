"""How events join the chain (service/audit/chain.py ``append_recorded``), in few round trips.

Issue 9: every append upserted the tenant's head (``INSERT … ON CONFLICT``), locked it, then
flushed the ORM: four statements per event. The head is now created once, on the tenant's
first event; on PostgreSQL the events and the moved head are one statement.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, event
from sqlmodel import Session, col, select

from service.audit import actions as audit
from service.audit.chain import GENESIS_HASH, event_hash
from service.audit.models import AuditEvent, AuditHead
from service.db import session_scope
from tests.support.backends import both_backends

# The append is one statement on PostgreSQL (ON CONFLICT, the head locked): both backends.
pytestmark = both_backends


def record(engine: Engine, tenant: str, *types: str) -> None:
    with session_scope(engine) as session:
        for type_ in types:
            audit.record(session, tenant=tenant, actor="test:writer", type=type_)


def statements_of(engine: Engine, work: Any) -> list[str]:
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", note)
    try:
        work()
    finally:
        event.remove(engine, "before_cursor_execute", note)
    return [s for s in seen if not s.startswith("BEGIN")]


def test_an_append_to_an_existing_chain_takes_few_statements(runtime):
    engine = runtime.engine
    record(engine, "acme", "test.first")

    one = statements_of(engine, lambda: record(engine, "acme", "test.a"))
    two = statements_of(engine, lambda: record(engine, "acme", "test.b", "test.c"))

    assert not any("INSERT INTO audit_heads" in s for s in one + two), one + two
    postgres = engine.dialect.name == "postgresql"
    assert len(one) == (2 if postgres else 3), one  # lock; the event and the moved head
    assert len(two) == 3, two  # lock; the events; the moved head


def test_the_events_of_one_unit_are_stored_in_chain_order(runtime):
    record(runtime.engine, "acme", "test.first")
    record(runtime.engine, "acme", *(f"test.{i}" for i in range(5)))

    with Session(runtime.engine) as session:
        events = session.exec(select(AuditEvent).order_by(col(AuditEvent.id))).all()
    assert [e.seq for e in events] == list(range(1, 7))
    assert [e.type for e in events[1:]] == [f"test.{i}" for i in range(5)]


def test_the_first_event_of_a_tenant_creates_its_head(runtime):
    record(runtime.engine, "fresh", "test.first", "test.second")

    with Session(runtime.engine) as session:
        head = session.get(AuditHead, "fresh")
        events = session.exec(
            select(AuditEvent)
            .where(col(AuditEvent.tenant) == "fresh")
            .order_by(col(AuditEvent.seq))
        ).all()
    assert head is not None
    assert [e.seq for e in events] == [1, 2]
    assert events[0].prev_hash == GENESIS_HASH
    assert events[1].prev_hash == events[0].hash
    assert all(e.hash == event_hash(e) for e in events)
    assert (head.seq, head.hash, head.at) == (2, events[1].hash, events[1].at)


def test_a_head_the_unit_loaded_shows_where_the_chain_now_ends(runtime):
    record(runtime.engine, "acme", "test.first")

    with session_scope(runtime.engine) as session:
        loaded = session.get(AuditHead, "acme")
        assert loaded is not None
        assert loaded.seq == 1
        audit.record(session, tenant="acme", actor="test:writer", type="test.second")

    assert loaded.seq == 2, "the copy in the session was moved with the chain"
    with Session(runtime.engine) as session:
        stored = session.get(AuditHead, "acme")
        assert stored is not None
        assert (stored.seq, stored.hash) == (loaded.seq, loaded.hash)
