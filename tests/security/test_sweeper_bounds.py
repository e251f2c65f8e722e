"""Security issue §12 and §14: the sweeper re-publishes a stalled execution with a backoff
(a backlog is not multiplied), an execution that never started within its deadline ends
expired instead of running late, and idempotency keys past their retention are forgotten."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlmodel import Session, col, select

from service.db import session_scope
from service.drafts.models import Draft, IdempotencyKey
from service.executions import runner, sweeper
from service.executions.models import Execution
from service.shop.models import Refund
from service.sql import utcnow
from tests.security.helpers import agent, events, propose_refund
from tests.support.core import approve_in_core, request_execution_in_core


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


class Broker:
    def __init__(self) -> None:
        self.sent: list[tuple[str, list[str]]] = []

    def __call__(self, task: str, args: list[str]) -> None:
        self.sent.append((task, args))


def queued_execution(runtime, demo) -> str:
    draft_id = propose_refund(agent(runtime, demo))["draft_id"]
    approve_in_core(runtime, demo, draft_id)
    return request_execution_in_core(runtime, demo, draft_id)[0].id


def execution(runtime, execution_id: str) -> Execution:
    with Session(runtime.engine) as session:
        found = session.get(Execution, execution_id)
        assert found is not None
        return found


def make_due(runtime, execution_id: str) -> None:
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Execution)
            .where(col(Execution.id) == execution_id)
            .values(republish_at=utcnow() - timedelta(seconds=1))
        )


def test_a_fresh_execution_is_not_republished_while_its_own_publish_is_pending(runtime, demo):
    queued_execution(runtime, demo)
    broker = Broker()
    assert sweeper.sweep(runtime, broker).republished == 0
    assert broker.sent == []


def test_republishing_backs_off_so_a_backlog_is_not_multiplied(runtime, demo):
    execution_id = queued_execution(runtime, demo)
    broker = Broker()
    backoffs = []
    for _ in range(3):
        make_due(runtime, execution_id)
        first = sweeper.sweep(runtime, broker)
        again = sweeper.sweep(runtime, broker)  # at once: nothing new to do
        assert (first.republished, again.republished) == (1, 0)
        stored = execution(runtime, execution_id)
        assert stored.republish_at is not None
        backoffs.append(round((stored.republish_at - utcnow()).total_seconds() / 60))
    assert backoffs == [1, 2, 4]  # minutes: republish_after, doubled after each publish
    assert execution(runtime, execution_id).publishes == 3
    assert len(broker.sent) == 3
    assert len(events(runtime, "execution.republished")) == 3


def age(runtime, execution_id: str, seconds: int) -> None:
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Execution)
            .where(col(Execution.id) == execution_id)
            .values(created_at=utcnow() - timedelta(seconds=seconds))
        )


def test_an_execution_that_never_started_in_time_is_expired_by_the_sweeper(runtime, demo):
    execution_id = queued_execution(runtime, demo)
    age(runtime, execution_id, runtime.settings.execution_start_deadline_seconds + 5)

    report = sweeper.sweep(runtime, Broker())

    assert report.expired == 1
    stored = execution(runtime, execution_id)
    assert stored.status == "expired"
    assert stored.error is not None
    assert stored.error["code"] == "EXECUTION_EXPIRED"
    with Session(runtime.engine) as session:
        draft = session.get(Draft, stored.draft_id)
        assert draft is not None
        assert draft.status == "expired"
    assert [e.type for e in events(runtime, "execution.expired", stored.draft_id)] == [
        "execution.expired"
    ]
    # and a message that arrives afterwards does nothing
    assert runner.run_execution(runtime, execution_id).status == "expired"
    with Session(runtime.engine) as session:
        assert session.exec(select(Refund)).all() == []


def test_a_late_message_expires_the_execution_instead_of_running_it(runtime, demo):
    execution_id = queued_execution(runtime, demo)
    age(runtime, execution_id, runtime.settings.execution_start_deadline_seconds + 5)

    assert runner.run_execution(runtime, execution_id).status == "expired"

    assert execution(runtime, execution_id).status == "expired"
    assert events(runtime, "execution.started") == []
    with Session(runtime.engine) as session:
        assert session.exec(select(Refund)).all() == []


def test_a_retried_execution_is_not_expired_by_the_start_deadline(runtime, demo):
    execution_id = queued_execution(runtime, demo)
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Execution).where(col(Execution.id) == execution_id).values(attempts=1)
        )
    age(runtime, execution_id, runtime.settings.execution_start_deadline_seconds + 5)
    assert sweeper.sweep(runtime, Broker()).expired == 0
    assert execution(runtime, execution_id).status == "queued"


def test_idempotency_keys_past_their_retention_are_forgotten(runtime, demo):
    door = agent(runtime, demo)
    propose_refund(door, idempotency_key="kept")
    propose_refund(door, 2_600, idempotency_key="old")
    with session_scope(runtime.engine) as session:
        session.execute(
            update(IdempotencyKey)
            .where(col(IdempotencyKey.key) == "old")
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )

    assert sweeper.sweep(runtime, Broker()).idempotency_keys_removed == 1

    with Session(runtime.engine) as session:
        assert [k.key for k in session.exec(select(IdempotencyKey)).all()] == ["kept"]
