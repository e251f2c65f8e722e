"""What one tool call costs the database (issue 9, the fast path), with every guarantee kept.

Profiling one server showed a read (get_order) running 13 statements in two write
transactions, and propose_refund 18: the token lookup in a write transaction of its own, the
refunds summed twice, the audit head upserted on every append, the expired-key DELETE and the
approvals and execution of a draft created a moment ago looked up on every proposal.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event
from sqlmodel import Session, col, select

from mcp_adapter.tools import ToolDoor
from service import db
from service.audit.models import AuditEvent
from service.errors import DomainError
from service.runtime import Runtime, build_runtime
from service.tracing import new_trace_id
from tests.support.backends import both_backends, sqlite_only

# The fast path's own transaction handling: both backends (the on_sqlite ones aside).
pytestmark = both_backends

on_sqlite = sqlite_only

# Statements per call (SQLite counts its BEGINs; PostgreSQL's go with the driver).
BUDGET = {
    ("sqlite", "get_order"): 9,
    ("postgresql", "get_order"): 5,
    # +1 since webhooks: an announced event (draft.proposed) looks up the tenant's endpoints.
    # +1 since the agent's view reports the execute gate's count: the number required as the
    # gate resolves it (its cumulative peers as of the draft's creation).
    # +1 since source-bound drafts: the order as the approver will see it (its customer,
    # refunds and shipment in one statement), recorded with its revision.
    ("sqlite", "propose_refund"): 15,
    ("postgresql", "propose_refund"): 13,
}


@pytest.fixture
def door(runtime: Runtime, demo: dict[str, Any]) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


@pytest.fixture
def statements(runtime: Runtime) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    event.listen(runtime.engine, "before_cursor_execute", record)
    yield seen
    event.remove(runtime.engine, "before_cursor_execute", record)


def propose(door: ToolDoor, n: int) -> dict[str, Any]:
    arguments = {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": 100 + n, "currency": "USD"},
        "reason": "damaged",
        "idempotency_key": f"ticket-{n}",
    }
    return door.call("propose_refund", arguments, new_trace_id(), None)


def get_order(door: ToolDoor) -> dict[str, Any]:
    return door.call("get_order", {"order_id": "ORD-1004"}, new_trace_id(), None)


def count(statements: list[str], fragment: str) -> int:
    return sum(fragment in statement for statement in statements)


def test_a_read_runs_within_its_budget_of_statements(runtime, door, statements):
    get_order(door)  # the tenant's audit head exists from here on
    statements.clear()

    order = get_order(door)

    assert order["order_id"] == "ORD-1004"
    budget = BUDGET[(runtime.engine.dialect.name, "get_order")]
    assert len(statements) <= budget, "\n".join(statements)
    assert count(statements, "shop_refunds") == 1, "the refunded sum is read once"
    assert count(statements, "INSERT INTO audit_heads") == 0, "the head is created only once"
    assert count(statements, "INSERT INTO audit_events") == 1


def test_a_proposal_runs_within_its_budget_of_statements(runtime, door, statements):
    propose(door, 0)
    statements.clear()

    draft = propose(door, 1)

    assert draft["replayed"] is False
    assert draft["approvals"]["received"] == 0
    budget = BUDGET[(runtime.engine.dialect.name, "propose_refund")]
    assert len(statements) <= budget, "\n".join(statements)
    assert count(statements, "DELETE FROM idempotency_keys") == 0, "no expired key in the way"
    assert count(statements, "FROM executions") == 0, "a draft made just now has no execution"
    assert count(statements, "FROM approvals") == 0, "nor approvals"


def test_a_replayed_proposal_still_reports_its_approvals_and_outcome(runtime, door, statements):
    first = propose(door, 7)
    statements.clear()

    replay = propose(door, 7)

    assert (replay["draft_id"], replay["replayed"]) == (first["draft_id"], True)
    assert count(statements, "FROM executions") == 1, "an older draft is looked up"
    assert count(statements, "FROM approvals") == 1


@on_sqlite
def test_on_sqlite_a_read_takes_one_write_transaction_only_for_its_audit_event(door, statements):
    get_order(door)

    assert count(statements, "BEGIN IMMEDIATE") == 1
    write_starts = statements.index("BEGIN IMMEDIATE")
    assert all("shop_" not in s for s in statements[write_starts:]), "the read ran before it"


@on_sqlite
def test_on_sqlite_a_read_handler_runs_while_another_process_holds_the_write_lock(
    runtime, door, sqlite_url, statements
):
    other_process = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    other_process.execute("BEGIN IMMEDIATE")
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(get_order(door)))
    try:
        thread.start()
        # The handler's queries run in a snapshot; only the audit append waits for the lock.
        thread.join(1.0)
        assert any("FROM shop_order_items" in s for s in statements), "the read waited"
        assert outcome == [], "nothing is answered before the call is recorded"
    finally:
        other_process.execute("ROLLBACK")
        other_process.close()
        thread.join(10)
    assert outcome[0]["order_id"] == "ORD-1004"
    with Session(runtime.engine) as session:
        called = session.exec(select(AuditEvent).where(col(AuditEvent.type) == "tool.called")).all()
    assert [event.data["tool"] for event in called] == ["get_order"]


@on_sqlite
def test_a_read_whose_audit_event_cannot_be_written_answers_nothing(
    settings, demo, sqlite_url, monkeypatch
):
    monkeypatch.setattr(db, "SQLITE_BUSY_TIMEOUT_MS", 300)
    runtime = build_runtime(settings)  # its connections wait 300 ms for a lock, not 30 s
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    other_process = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    other_process.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(DomainError) as caught:
            get_order(door)
    finally:
        other_process.execute("ROLLBACK")
        other_process.close()

    assert caught.value.code == "DATABASE_UNAVAILABLE"
    with Session(runtime.engine) as session:
        types = session.exec(select(AuditEvent.type)).all()
    assert "tool.called" not in types
    runtime.engine.dispose()
