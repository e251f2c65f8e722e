"""Concurrent proposals: one idempotency key or one identical proposal makes exactly one draft.

Each scenario starts many real threads at a barrier, each running a whole tool call through
the core (its own connection and transactions), against SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import func
from sqlmodel import select

from mcp_adapter.tools import ToolDoor
from service.audit import actions as audit_actions
from service.audit import repository as audit_repository
from service.db import session_scope
from service.drafts.models import Draft, DraftRevision, IdempotencyKey
from service.errors import DomainError
from service.runtime import Runtime
from service.tracing import new_trace_id
from tests.support.backends import both_backends
from tests.support.mcp_helpers import module_host_fixtures

pytestmark = [both_backends]

# One runtime per backend for the module, its database emptied and the demo seeded per test.
mcp_hosts, module_host, demo, runtime, mcp_url = module_host_fixtures()


def run_together(door: ToolDoor, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Run every call in its own thread, released at once by a barrier.

    Returns, per call, its result dict or the exception it raised.
    """
    barrier = threading.Barrier(len(calls))
    outcomes: list[Any] = [None] * len(calls)

    def worker(index: int, name: str, arguments: dict[str, Any]) -> None:
        barrier.wait()
        try:
            outcomes[index] = door.call(name, arguments, new_trace_id(), None)
        except Exception as exc:  # collected and asserted on below
            outcomes[index] = exc

    threads = [
        threading.Thread(target=worker, args=(index, name, arguments))
        for index, (name, arguments) in enumerate(calls)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def refund(amount_minor: int = 2_500, **extra: Any) -> dict[str, Any]:
    return {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
        **extra,
    }


def describe(outcome: Any) -> str:
    if isinstance(outcome, DomainError):
        return f"{outcome.code}: {outcome.message}"
    if isinstance(outcome, Exception):
        return f"{type(outcome).__name__}: {outcome}"
    return f"draft {outcome['draft_id']} replayed={outcome['replayed']}"


def row_counts(runtime: Runtime) -> dict[str, int]:
    with session_scope(runtime.engine) as session:
        return {
            name: session.exec(select(func.count()).select_from(model)).one()
            for name, model in (
                ("drafts", Draft),
                ("draft_revisions", DraftRevision),
                ("idempotency_keys", IdempotencyKey),
            )
        }


def audited(runtime: Runtime, type_: str) -> int:
    with session_scope(runtime.engine) as session:
        return len(audit_repository.events_for(session, "demo", type_=type_))


def assert_chain_ok(runtime: Runtime) -> None:
    with session_scope(runtime.engine) as session:
        result = audit_actions.verify(session, "demo")
    assert result.ok, result.problem


def test_fifty_concurrent_calls_with_one_key_create_one_draft(runtime, demo):
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    outcomes = run_together(door, [("propose_refund", refund(idempotency_key="ticket-1"))] * 50)

    failures = [describe(o) for o in outcomes if isinstance(o, Exception)]
    assert failures == [], failures
    assert len({outcome["draft_id"] for outcome in outcomes}) == 1
    assert sorted(outcome["replayed"] for outcome in outcomes) == [False] + [True] * 49
    assert row_counts(runtime) == {"drafts": 1, "draft_revisions": 1, "idempotency_keys": 1}
    assert audited(runtime, "draft.proposed") == 1
    assert audited(runtime, "tool.called") == 50
    assert_chain_ok(runtime)


def test_concurrent_calls_with_one_key_and_different_params_create_one_draft(runtime, demo):
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    calls = [
        ("propose_refund", refund(amount_minor=1_000 + index, idempotency_key="ticket-2"))
        for index in range(10)
    ]
    outcomes = run_together(door, calls)

    created = [o for o in outcomes if isinstance(o, dict)]
    refused = [o for o in outcomes if isinstance(o, DomainError)]
    unexpected = [describe(o) for o in outcomes if not isinstance(o, dict | DomainError)]
    assert unexpected == []
    assert len(created) == 1, [describe(o) for o in outcomes]
    assert created[0]["replayed"] is False
    assert {error.code for error in refused} == {"IDEMPOTENCY_KEY_REUSED"}
    assert len(refused) == 9
    assert row_counts(runtime) == {"drafts": 1, "draft_revisions": 1, "idempotency_keys": 1}
    assert audited(runtime, "tool.refused") == 9
    assert_chain_ok(runtime)


def test_twenty_concurrent_identical_proposals_without_a_key_make_one_open_draft(runtime, demo):
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    outcomes = run_together(door, [("propose_refund", refund())] * 20)

    failures = [describe(o) for o in outcomes if isinstance(o, Exception)]
    assert failures == [], failures
    assert len({outcome["draft_id"] for outcome in outcomes}) == 1
    assert sorted(outcome["replayed"] for outcome in outcomes) == [False] + [True] * 19
    with session_scope(runtime.engine) as session:
        drafts = list(session.exec(select(Draft)).all())
    assert [draft.status for draft in drafts] == ["proposed"]
    assert row_counts(runtime) == {"drafts": 1, "draft_revisions": 1, "idempotency_keys": 0}
    assert audited(runtime, "draft.proposed") == 1
    assert_chain_ok(runtime)
