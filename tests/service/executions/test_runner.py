"""The execution state machine, driven directly through ``run_execution`` (DESIGN.md §5).

No broker and no worker: each test plays the worker by calling the core's runner on a real
database (each test runs once on SQLite and once on PostgreSQL), so every state the runner can
meet is set up exactly: finished, running under a live lease, running under a lease whose
worker died (before or after the downstream change), queued for a retry, raced by threads.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text, update
from sqlmodel import col, select

from mcp_adapter.tools import ToolDoor
from service.audit import actions as audit_actions
from service.audit import repository as audit_repository
from service.db import session_scope
from service.drafts import repository as drafts_repository
from service.drafts.models import Draft
from service.executions import repository as executions_repository
from service.executions import runner
from service.executions.models import Execution, ExecutionAttempt
from service.runtime import Runtime
from service.shop.models import Order, Refund
from service.sql import utcnow
from service.tracing import new_trace_id
from tests.support.backends import both_backends, postgresql_only
from tests.support.core import approve_in_core, request_execution_in_core

# Leases, claims and races are the database's: every test on both backends.
pytestmark = both_backends

ORDER = "ORD-1004"  # delivered 3 days ago, total 785.00 USD
SMALL = 2_500  # 25.00 USD: one approver
LARGE = 60_000  # 600.00 USD: two approvers, and more than half of what is refundable


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"execution_lease_seconds": 30, "execution_max_attempts": 3}


# --- helpers ------------------------------------------------------------------------------


@pytest.fixture
def door(runtime: Runtime, demo: dict[str, Any]) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


def propose_refund(door: ToolDoor, amount_minor: int, order: str = ORDER) -> str:
    arguments = {
        "order_id": order,
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
    }
    draft: dict[str, Any] = door.call("propose_refund", arguments, new_trace_id(), None)
    return str(draft["draft_id"])


def approve(runtime: Runtime, demo: dict[str, Any], draft_id: str, approver: str) -> None:
    approve_in_core(runtime, demo, draft_id, approver)


def request_execution(runtime: Runtime, demo: dict[str, Any], draft_id: str) -> str:
    return request_execution_in_core(runtime, demo, draft_id)[0].id


def approved_execution(
    runtime: Runtime, demo: dict[str, Any], door: ToolDoor, amount_minor: int = SMALL
) -> str:
    """A refund draft, approved by as many approvers as its policy needs, execution requested."""
    draft_id = propose_refund(door, amount_minor)
    approve(runtime, demo, draft_id, "alice")
    if amount_minor > 50_000:
        approve(runtime, demo, draft_id, "bob")
    return request_execution(runtime, demo, draft_id)


def state(runtime: Runtime, execution_id: str) -> tuple[Execution, list[ExecutionAttempt]]:
    with session_scope(runtime.engine) as session:
        execution = executions_repository.get(session, execution_id)
        assert execution is not None
        return execution, executions_repository.attempts(session, execution_id)


def draft_of(runtime: Runtime, draft_id: str) -> Draft:
    with session_scope(runtime.engine) as session:
        draft = drafts_repository.get(session, "demo", draft_id)
        assert draft is not None
        return draft


def refunds_for(runtime: Runtime, idempotency_key: str) -> list[Refund]:
    with session_scope(runtime.engine) as session:
        statement = select(Refund).where(col(Refund.idempotency_key) == idempotency_key)
        return list(session.exec(statement).all())


def all_refunds(runtime: Runtime) -> list[Refund]:
    with session_scope(runtime.engine) as session:
        return list(session.exec(select(Refund)).all())


def event_types(runtime: Runtime, draft_id: str) -> list[str]:
    with session_scope(runtime.engine) as session:
        return [e.type for e in audit_repository.events_for(session, "demo", draft_id=draft_id)]


def events(runtime: Runtime, draft_id: str, type_: str) -> list[dict[str, Any]]:
    with session_scope(runtime.engine) as session:
        return [
            e.model_dump()
            for e in audit_repository.events_for(session, "demo", draft_id=draft_id, type_=type_)
        ]


def chain_ok(runtime: Runtime) -> bool:
    with session_scope(runtime.engine) as session:
        return audit_actions.verify(session, "demo").ok


def expire_lease(runtime: Runtime, execution_id: str) -> None:
    """The worker holding the lease is gone: make its lease lie in the past."""
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Execution)
            .where(col(Execution.id) == execution_id)
            .values(lease_expires_at=utcnow() - timedelta(seconds=1))
        )


def make_due(runtime: Runtime, execution_id: str) -> None:
    """The retry's backoff has passed."""
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Execution)
            .where(col(Execution.id) == execution_id)
            .values(next_attempt_at=utcnow() - timedelta(seconds=1))
        )


def claim_and_die(runtime: Runtime, execution_id: str, *, after_downstream: bool) -> None:
    """What a worker leaves behind when it is killed: the claim committed (and, if
    ``after_downstream``, the downstream change too), the outcome never recorded."""
    claim = runner._claim(runtime, execution_id)
    assert isinstance(claim, runner.Claim), claim
    if after_downstream:
        runner._apply(runtime, claim)


# --- the shop's other writes ---------------------------------------------------------------

NEW_ADDRESS = {
    "recipient": "Ada King",
    "lines": ["1 Example Row"],
    "district": "Marylebone",
    "city": "London",
    "postal_code": "NW1 6XE",
    "country": "GB",
}


@pytest.mark.parametrize(
    ("tool", "arguments", "table"),
    [
        ("propose_cancel_order", {"reason": "customer_request"}, "shop_cancellations"),
        ("propose_change_shipping_address", {"address": NEW_ADDRESS}, "shop_address_changes"),
    ],
    ids=["cancel", "address"],
)
def test_a_cancellation_and_an_address_change_are_made_once_under_their_key(
    runtime, demo, door, tool, arguments, table
):
    """Each write looks up its idempotency key before it changes the order (the lookup and
    the locked order row are repository queries of their own, on both backends)."""
    order = demo["orders"]["paid"]
    proposed = door.call(tool, {"order_id": order, **arguments}, new_trace_id(), None)
    approve(runtime, demo, proposed["draft_id"], "alice")
    execution_id = request_execution(runtime, demo, proposed["draft_id"])

    for _ in range(2):  # a redelivery finds it finished
        assert runner.run_execution(runtime, execution_id) == runner.RunResult("succeeded")

    with session_scope(runtime.engine) as session:
        made = session.execute(text(f"SELECT idempotency_key FROM {table}")).scalars().all()
    assert made == [f"{proposed['draft_id']}:1"]


# --- a finished execution -----------------------------------------------------------------


def test_running_a_finished_execution_again_changes_nothing(runtime, demo, door):
    execution_id = approved_execution(runtime, demo, door)
    assert runner.run_execution(runtime, execution_id) == runner.RunResult("succeeded")
    execution, _attempts = state(runtime, execution_id)
    before = event_types(runtime, execution.draft_id)

    for _ in range(3):  # redeliveries, republished messages, duplicate publishes
        assert runner.run_execution(runtime, execution_id) == runner.RunResult("succeeded")

    again, attempts_again = state(runtime, execution_id)
    assert (again.status, again.attempts, again.outcome) == ("succeeded", 1, execution.outcome)
    assert [(a.number, a.result) for a in attempts_again] == [(1, "succeeded")]
    assert len(refunds_for(runtime, execution.idempotency_key)) == 1
    assert event_types(runtime, execution.draft_id) == before  # not even an audit event
    assert draft_of(runtime, execution.draft_id).status == "succeeded"


def test_a_failed_execution_is_final_too(runtime, demo, door):
    execution_id = approved_execution(runtime, demo, door)
    execution, _ = state(runtime, execution_id)
    with session_scope(runtime.engine) as session:  # the order left the refundable states
        session.execute(
            update(Order).where(col(Order.order_number) == ORDER).values(status="cancelled")
        )
    assert runner.run_execution(runtime, execution_id) == runner.RunResult("failed")
    with session_scope(runtime.engine) as session:  # and came back: still nothing is retried
        session.execute(
            update(Order).where(col(Order.order_number) == ORDER).values(status="delivered")
        )
    assert runner.run_execution(runtime, execution_id) == runner.RunResult("failed")
    failed, attempts = state(runtime, execution_id)
    assert failed.error is not None
    assert failed.error["code"] == "ORDER_NOT_REFUNDABLE"
    assert [(a.number, a.result) for a in attempts] == [(1, "failed")]
    assert refunds_for(runtime, execution.idempotency_key) == []


def test_an_unknown_execution_id_is_dropped(runtime, demo):
    assert runner.run_execution(runtime, "exe_" + "0" * 24) == runner.RunResult("missing")


# --- a running execution ------------------------------------------------------------------


def test_a_running_execution_under_a_live_lease_is_left_to_its_worker(runtime, demo, door):
    execution_id = approved_execution(runtime, demo, door)
    claim_and_die(runtime, execution_id, after_downstream=False)
    execution, _ = state(runtime, execution_id)
    before = event_types(runtime, execution.draft_id)

    result = runner.run_execution(runtime, execution_id)

    assert result.status == "running"
    # Come back when the lease runs out (30 s from the claim), not before and not much later.
    assert result.retry_in is not None
    assert 25 < result.retry_in <= 31
    after, attempts = state(runtime, execution_id)
    assert (after.status, after.attempts) == ("running", 1)
    assert [(a.number, a.result) for a in attempts] == [(1, "running")]
    assert refunds_for(runtime, execution.idempotency_key) == []
    assert event_types(runtime, execution.draft_id) == before


def test_an_expired_lease_is_taken_over_and_an_applied_change_recorded_once(runtime, demo, door):
    """The worker died between the downstream change and recording it."""
    execution_id = approved_execution(runtime, demo, door)
    claim_and_die(runtime, execution_id, after_downstream=True)
    execution, _ = state(runtime, execution_id)
    [made] = refunds_for(runtime, execution.idempotency_key)
    expire_lease(runtime, execution_id)

    assert runner.run_execution(runtime, execution_id) == runner.RunResult("succeeded")

    done, attempts = state(runtime, execution_id)
    assert done.status == "succeeded"
    assert [(a.number, a.result) for a in attempts] == [(1, "lost"), (2, "succeeded")]
    assert attempts[0].finished_at is not None
    assert done.outcome is not None
    assert done.outcome["refund_id"] == made.id
    assert refunds_for(runtime, execution.idempotency_key) == [made]  # no second refund
    assert len(all_refunds(runtime)) == 1
    started = events(runtime, execution.draft_id, "execution.started")
    assert [e["data"]["took_over"] for e in started] == [False, True]
    assert draft_of(runtime, execution.draft_id).status == "succeeded"
    assert chain_ok(runtime)


def test_an_expired_lease_with_nothing_applied_is_taken_over_and_run_once(runtime, demo, door):
    """The worker died after claiming, before the downstream change."""
    execution_id = approved_execution(runtime, demo, door)
    claim_and_die(runtime, execution_id, after_downstream=False)
    expire_lease(runtime, execution_id)

    assert runner.run_execution(runtime, execution_id) == runner.RunResult("succeeded")

    done, attempts = state(runtime, execution_id)
    assert [(a.number, a.result) for a in attempts] == [(1, "lost"), (2, "succeeded")]
    assert len(refunds_for(runtime, done.idempotency_key)) == 1


def test_the_stale_worker_cannot_record_over_the_one_that_took_over(runtime, demo, door):
    """A worker that was only slow, not dead, comes back after its lease was taken over."""
    execution_id = approved_execution(runtime, demo, door)
    slow = runner._claim(runtime, execution_id)
    assert isinstance(slow, runner.Claim)
    outcome = runner._apply(runtime, slow)
    expire_lease(runtime, execution_id)
    assert runner.run_execution(runtime, execution_id) == runner.RunResult("succeeded")
    execution, _ = state(runtime, execution_id)

    assert runner._record_success(runtime, slow, outcome) == runner.RunResult("superseded")

    after, attempts = state(runtime, execution_id)
    assert after.status == "succeeded"
    assert after.outcome == execution.outcome
    assert [(a.number, a.result) for a in attempts] == [(1, "lost"), (2, "succeeded")]
    assert len(refunds_for(runtime, execution.idempotency_key)) == 1


# --- retries ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings_overrides", [{"shop_transient_failures": 1, "execution_retry_base_seconds": 20}]
)
def test_an_early_delivery_of_a_scheduled_retry_waits_for_its_time(runtime, demo, door):
    execution_id = approved_execution(runtime, demo, door)
    first = runner.run_execution(runtime, execution_id)
    assert first.status == "queued"
    assert first.retry_in == 20

    early = runner.run_execution(runtime, execution_id)  # e.g. a duplicate message

    assert early.status == "queued"
    assert early.retry_in is not None
    assert 15 < early.retry_in <= 21
    execution, attempts = state(runtime, execution_id)
    assert [(a.number, a.result) for a in attempts] == [(1, "retry")]
    assert execution.error is not None
    assert execution.error["code"] == "PAYMENT_PROVIDER_UNAVAILABLE"

    with session_scope(runtime.engine) as session:  # the backoff has passed
        session.execute(
            update(Execution)
            .where(col(Execution.id) == execution_id)
            .values(next_attempt_at=utcnow() - timedelta(seconds=1))
        )
    assert runner.run_execution(runtime, execution_id) == runner.RunResult("succeeded")
    done, attempts = state(runtime, execution_id)
    assert [(a.number, a.result) for a in attempts] == [(1, "retry"), (2, "succeeded")]
    assert len(refunds_for(runtime, done.idempotency_key)) == 1


# --- races --------------------------------------------------------------------------------


def run_together(runtime: Runtime, execution_id: str, count: int) -> list[Any]:
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def work(index: int) -> None:
        barrier.wait()
        try:
            results[index] = runner.run_execution(runtime, execution_id)
        except Exception as exc:  # reported by the assertions below
            results[index] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


@pytest.mark.parametrize("count", [2, 8])
def test_racing_runs_of_one_execution_make_one_refund(runtime, demo, door, count):
    execution_id = approved_execution(runtime, demo, door)

    results = run_together(runtime, execution_id, count)

    assert all(isinstance(r, runner.RunResult) for r in results), results
    assert [r.status for r in results].count("succeeded") >= 1
    for result in results:  # the losers either saw it finished or the winner's live lease
        assert result.status == "succeeded" or (
            result.status == "running" and result.retry_in is not None
        ), results
    execution, attempts = state(runtime, execution_id)
    assert execution.status == "succeeded"
    assert [(a.number, a.result) for a in attempts] == [(1, "succeeded")]
    assert len(refunds_for(runtime, execution.idempotency_key)) == 1
    assert len(all_refunds(runtime)) == 1
    assert chain_ok(runtime)


@postgresql_only  # SQLite serialises it away
@pytest.mark.parametrize("settings_overrides", [{"execution_lease_seconds": 1}])
def test_a_takeover_racing_a_slow_worker_records_the_refund_it_made(runtime, demo, door):
    """BUG (PostgreSQL): a worker whose lease expired while it waited on the downstream is
    taken over; the second worker re-validates the refund before checking the idempotency key
    under the order lock, so once the first worker's refund commits the second fails with
    REFUND_EXCEEDS_REFUNDABLE and records the execution as FAILED, although the refund it was
    asked for was made (exactly once). The draft tells the agent it could not be carried out.
    """
    execution_id = approved_execution(runtime, demo, door, amount_minor=LARGE)
    execution, _ = state(runtime, execution_id)
    results: dict[str, Any] = {}

    def run(name: str) -> None:
        try:
            results[name] = runner.run_execution(runtime, execution_id)
        except Exception as exc:  # reported by the assertions below
            results[name] = exc

    with runtime.engine.connect() as downstream_busy:
        # The shop is slow: something holds the order row, so the first worker waits in it.
        downstream_busy.execute(
            text("SELECT id FROM shop_orders WHERE order_number = :n FOR UPDATE"), {"n": ORDER}
        )
        slow = threading.Thread(target=run, args=("slow",))
        slow.start()
        wait_for_lock_waiters(runtime, 1)
        expire_lease(runtime, execution_id)  # its lease runs out while it waits
        taker = threading.Thread(target=run, args=("taker",))
        taker.start()
        wait_for_lock_waiters(runtime, 2)
        downstream_busy.commit()  # the shop answers
    slow.join(timeout=60)
    taker.join(timeout=60)

    assert len(refunds_for(runtime, execution.idempotency_key)) == 1  # at most once: holds
    done, attempts = state(runtime, execution_id)
    assert (done.status, done.error) == ("succeeded", None), (done.error, attempts, results)
    assert draft_of(runtime, execution.draft_id).status == "succeeded"


def wait_for_lock_waiters(runtime: Runtime, count: int) -> None:
    deadline = time.monotonic() + 30
    query = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    while True:
        with runtime.engine.connect() as connection:
            if connection.execute(query).scalar_one() >= count:
                return
        assert time.monotonic() < deadline, f"fewer than {count} sessions wait on a lock"
        time.sleep(0.05)


# --- errors nobody planned for ------------------------------------------------------------


@pytest.mark.parametrize("settings_overrides", [{"execution_max_attempts": 2}])
def test_an_unexpected_error_ends_visibly_within_the_attempt_limit(runtime, demo, door):
    """BUG: an exception that is neither a DomainError nor a DBAPIError (here: the shop holds
    an order status it does not know; equally a user action's HTTP client raising) escapes
    run_execution and leaves the execution `running`. Every takeover after the lease (the
    sweeper republishes it) runs it again, counts another attempt and never fails it: the
    attempt limit is only consulted for DomainErrors, so the execution never ends.
    """
    execution_id = approved_execution(runtime, demo, door)
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Order).where(col(Order.order_number) == ORDER).values(status="on_hold")
        )

    for _ in range(4):  # the worker's deliveries, each once the previous one is due
        try:
            result = runner.run_execution(runtime, execution_id)
        except ValueError:
            result = None
        execution, attempts = state(runtime, execution_id)
        if execution.status in ("succeeded", "failed"):
            break
        assert result is None or result.retry_in is not None
        expire_lease(runtime, execution_id)
        make_due(runtime, execution_id)

    execution, attempts = state(runtime, execution_id)
    assert execution.status == "failed", [(a.number, a.result) for a in attempts]
    assert execution.attempts <= 2
    assert refunds_for(runtime, execution.idempotency_key) == []
