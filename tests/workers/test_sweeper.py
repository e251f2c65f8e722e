"""The sweeper (DESIGN.md §5): nothing approved is forgotten, nothing stale lives on.

There is no beat process in tests: the test plays beat and calls ``sweep`` itself, with the
API's real publisher, while a real worker consumes what it publishes.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import col, select

from harness.approvals import approve, bearer
from mcp_adapter.tools import ToolDoor
from service.api.publisher import celery_publisher
from service.audit import actions as audit_actions
from service.audit import repository as audit_repository
from service.db import session_scope
from service.drafts import repository as drafts_repository
from service.drafts.models import Draft
from service.executions.models import Execution, OutboxMessage
from service.executions.outbox import publish_pending
from service.executions.schemas import EXECUTE_TASK
from service.executions.sweeper import sweep
from service.runtime import Runtime
from service.shop.models import Refund
from service.sql import utcnow
from service.tracing import new_trace_id
from tests.support.backends import both_backends
from tests.support.core import approve_in_core, request_execution_in_core
from tests.workers.helpers import POLL_SECONDS, drain, make_quiet

# The broker and the database decide how a delivery is recovered: both backends.
pytestmark = both_backends

ORDER = "ORD-1004"
SMALL = 2_500  # 25.00 USD: one approver
FINISHED = ("succeeded", "failed")
LONG_AGO = timedelta(minutes=10)


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"republish_after_seconds": 1}


# --- helpers ------------------------------------------------------------------------------


def propose_refund(runtime: Runtime, demo: dict[str, Any], amount_minor: int = SMALL) -> str:
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    arguments = {
        "order_id": ORDER,
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
    }
    return str(door.call("propose_refund", arguments, new_trace_id(), None)["draft_id"])


def approve_core(runtime: Runtime, demo: dict[str, Any], draft_id: str) -> None:
    approve_in_core(runtime, demo, draft_id)


def request_without_publishing(runtime: Runtime, demo: dict[str, Any], draft_id: str) -> str:
    """What a request leaves behind when its process dies right after the commit."""
    execution, created = request_execution_in_core(runtime, demo, draft_id)
    assert created
    return execution.id


def set_execution(runtime: Runtime, execution_id: str, **values: Any) -> None:
    with session_scope(runtime.engine) as session:
        session.execute(update(Execution).where(col(Execution.id) == execution_id).values(**values))


def outbox(runtime: Runtime, execution_id: str) -> list[OutboxMessage]:
    with session_scope(runtime.engine) as session:
        statement = select(OutboxMessage).where(col(OutboxMessage.execution_id) == execution_id)
        return list(session.exec(statement).all())


def backdate_outbox(runtime: Runtime, execution_id: str) -> None:
    with session_scope(runtime.engine) as session:
        session.execute(
            update(OutboxMessage)
            .where(col(OutboxMessage.execution_id) == execution_id)
            .values(created_at=utcnow() - LONG_AGO)
        )


def wait_for_execution(runtime: Runtime, execution_id: str, timeout: float = 60) -> Execution:
    deadline = time.monotonic() + timeout
    while True:
        with session_scope(runtime.engine) as session:
            execution = session.get(Execution, execution_id)
        assert execution is not None
        if execution.status in FINISHED or time.monotonic() > deadline:
            return execution
        time.sleep(POLL_SECONDS)


def refunds(runtime: Runtime) -> list[Refund]:
    with session_scope(runtime.engine) as session:
        return list(session.exec(select(Refund)).all())


def events(runtime: Runtime, draft_id: str, type_: str) -> list[dict[str, Any]]:
    with session_scope(runtime.engine) as session:
        return [
            e.model_dump()
            for e in audit_repository.events_for(session, "demo", draft_id=draft_id, type_=type_)
        ]


def draft_status(runtime: Runtime, draft_id: str) -> str:
    with session_scope(runtime.engine) as session:
        draft = drafts_repository.get(session, "demo", draft_id)
        assert draft is not None
        return draft.status


def chain_verifies(runtime: Runtime) -> bool:
    with session_scope(runtime.engine) as session:
        return audit_actions.verify(session, "demo").ok


# --- lost messages, with a real worker ----------------------------------------------------


def test_an_outbox_row_never_published_is_published_by_the_sweeper(stack):
    runtime, publish = stack.runtime, celery_publisher(stack.settings)
    draft_id = propose_refund(runtime, stack.demo)
    approve_core(runtime, stack.demo, draft_id)
    execution_id = request_without_publishing(runtime, stack.demo, draft_id)
    [message] = outbox(runtime, execution_id)
    assert (message.published_at, message.publish_count) == (None, 0)
    # Nothing was published, so nothing runs: once the worker has taken everything queued
    # before a probe message of ours, the execution is still waiting.
    drain(stack.settings, stack.worker)
    assert wait_for_execution(runtime, execution_id, timeout=0).status == "queued"

    backdate_outbox(runtime, execution_id)  # older than the grace the request had
    report = sweep(runtime, publish)

    assert report.published == 1
    execution = wait_for_execution(runtime, execution_id)
    assert execution.status == "succeeded", stack.worker.output()[-3000:]
    [message] = outbox(runtime, execution_id)
    assert message.published_at is not None
    assert message.publish_count == 1
    assert [r.idempotency_key for r in refunds(runtime)] == [f"{draft_id}:1"]
    assert sweep(runtime, publish).published == 0  # published once only
    assert chain_verifies(runtime)


def test_a_queued_execution_whose_message_was_lost_is_republished(stack):
    runtime, publish = stack.runtime, celery_publisher(stack.settings)
    draft_id = propose_refund(runtime, stack.demo)
    approve_core(runtime, stack.demo, draft_id)
    execution_id = request_without_publishing(runtime, stack.demo, draft_id)
    # The publish "succeeded", but the broker lost the message (e.g. Redis restarted
    # without persistence): the outbox says published, the execution sits queued.
    with session_scope(runtime.engine) as session:
        session.execute(
            update(OutboxMessage)
            .where(col(OutboxMessage.execution_id) == execution_id)
            .values(published_at=utcnow(), publish_count=1)
        )
    quiet = utcnow() - timedelta(seconds=5)  # its publish's backoff has passed
    set_execution(runtime, execution_id, updated_at=quiet, republish_at=quiet)

    report = sweep(runtime, publish)

    assert (report.published, report.republished) == (0, 1)
    execution = wait_for_execution(runtime, execution_id)
    assert execution.status == "succeeded", stack.worker.output()[-3000:]
    assert len(refunds(runtime)) == 1
    [republished] = events(runtime, draft_id, "execution.republished")
    assert republished["execution_id"] == execution_id
    assert republished["actor"] == "system:sweeper"
    assert republished["data"]["status"] == "queued"
    make_quiet(runtime.engine, execution_id)  # however long it has been quiet since
    assert sweep(runtime, publish).republished == 0  # finished: never again
    assert chain_verifies(runtime)


# --- expiry -------------------------------------------------------------------------------


def test_drafts_past_their_expiry_are_expired_and_cannot_be_executed(stack):
    runtime, demo, publish = stack.runtime, stack.demo, celery_publisher(stack.settings)
    proposed_id = propose_refund(runtime, demo, SMALL)
    approved_id = propose_refund(runtime, demo, SMALL + 100)
    assert approve(stack.api_url, demo, approved_id, "alice").status_code == 201
    fresh_id = propose_refund(runtime, demo, SMALL + 200)
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Draft)
            .where(col(Draft.id).in_([proposed_id, approved_id]))
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )

    report = sweep(runtime, publish)

    assert report.expired == 2
    for draft_id in (proposed_id, approved_id):
        assert draft_status(runtime, draft_id) == "expired"
        [expired] = events(runtime, draft_id, "draft.expired")
        assert expired["actor"] == "system:expiry"
    assert draft_status(runtime, fresh_id) == "proposed"
    assert sweep(runtime, publish).expired == 0  # once only

    refused = httpx.post(
        f"{stack.api_url}/v1/drafts/{approved_id}/execute",
        headers=bearer(demo["tokens"]["approver_alice"]),
        timeout=30,
    )
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "DRAFT_EXPIRED"
    with session_scope(runtime.engine) as session:
        assert session.exec(select(Execution)).all() == []
    assert refunds(runtime) == []
    assert chain_verifies(runtime)


def test_a_draft_already_executing_does_not_expire(runtime, demo):
    draft_id = propose_refund(runtime, demo)
    approve_core(runtime, demo, draft_id)
    request_without_publishing(runtime, demo, draft_id)
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Draft).where(col(Draft.id) == draft_id).values(expires_at=utcnow() - LONG_AGO)
        )

    report = sweep(runtime, lambda task, args: None)

    assert report.expired == 0
    assert draft_status(runtime, draft_id) == "queued"
    assert events(runtime, draft_id, "draft.expired") == []


# --- what counts as stalled (core-level, both databases) ----------------------------------


def test_the_sweeper_republishes_only_what_is_stalled(runtime, demo):
    now = utcnow()
    quiet = now - timedelta(seconds=30)
    ids: dict[str, str] = {}
    for offset, name in enumerate(
        (
            "lost_queued",
            "dead_worker",
            "live_worker",
            "retry_not_due",
            "just_queued",
            "finished",
        )
    ):
        draft_id = propose_refund(runtime, demo, SMALL + offset)
        approve_core(runtime, demo, draft_id)
        ids[name] = request_without_publishing(runtime, demo, draft_id)
    with session_scope(runtime.engine) as session:  # every outbox row already went out
        session.execute(update(OutboxMessage).values(published_at=now, publish_count=1))
    # "quiet": updated and last published long enough ago for the backoff to have passed
    set_execution(runtime, ids["lost_queued"], updated_at=quiet, republish_at=quiet)
    set_execution(
        runtime,
        ids["dead_worker"],
        status="running",
        attempts=1,
        lease_expires_at=now - timedelta(seconds=5),
        updated_at=quiet,
        republish_at=quiet,
    )
    set_execution(
        runtime,
        ids["live_worker"],
        status="running",
        attempts=1,
        lease_expires_at=now + timedelta(seconds=60),
        updated_at=quiet,
        republish_at=quiet,
    )
    set_execution(
        runtime,
        ids["retry_not_due"],
        attempts=1,
        next_attempt_at=now + timedelta(seconds=60),
        updated_at=quiet,
        republish_at=quiet,
    )
    set_execution(
        runtime,
        ids["finished"],
        status="succeeded",
        updated_at=quiet,
        republish_at=quiet,
        finished_at=quiet,
    )
    published: list[tuple[str, list[str]]] = []

    report = sweep(runtime, lambda task, args: published.append((task, args)))

    assert report.republished == 2
    assert sorted(published) == sorted(
        [(EXECUTE_TASK, [ids["lost_queued"]]), (EXECUTE_TASK, [ids["dead_worker"]])]
    )
    # Quiet again only after another full period: an immediate sweep leaves them alone.
    published.clear()
    assert sweep(runtime, lambda task, args: published.append((task, args))).republished == 0
    assert published == []
    assert chain_verifies(runtime)


def test_a_publish_that_fails_leaves_the_row_for_the_sweeper(runtime, demo):
    """The broker is down when the request commits: the outbox keeps the message."""
    draft_id = propose_refund(runtime, demo)
    approve_core(runtime, demo, draft_id)
    execution_id = request_without_publishing(runtime, demo, draft_id)
    unreachable = runtime.settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})

    assert publish_pending(runtime.engine, celery_publisher(unreachable)) == 0

    [message] = outbox(runtime, execution_id)
    assert (message.published_at, message.publish_count) == (None, 0)
    backdate_outbox(runtime, execution_id)
    published: list[tuple[str, list[str]]] = []
    report = sweep(runtime, lambda task, args: published.append((task, args)))
    assert report.published == 1
    assert published[0] == (EXECUTE_TASK, [execution_id])
    # (If the failed publish took longer than republish_after_seconds, the same sweep also
    # counts the execution as stalled and publishes it a second time: harmless, the task is
    # idempotent, but the outbox row alone would have done.)
    assert {tuple(args) for _, args in published} == {(execution_id,)}
    [message] = outbox(runtime, execution_id)
    assert message.published_at is not None
    assert message.publish_count == 1
