"""Security issue §8: a slow downstream call keeps its lease (a heartbeat renews it), and an
attempt that was taken over cannot commit its change (the attempt number is a fencing token
checked in the downstream's own transaction). PostgreSQL: on SQLite the downstream
transaction holds the one write lock, so nothing can take over in the first place."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import update
from sqlmodel import Session, col, select

from service.db import session_scope
from service.executions import runner
from service.executions.models import Execution
from service.shop import payments
from service.shop.models import Refund
from service.sql import utcnow
from tests.security.helpers import agent, propose_refund
from tests.support.core import approve_in_core, request_execution_in_core


@pytest.fixture
def db_url(postgres_url: str) -> str:
    return postgres_url


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"execution_lease_seconds": 1}


def queued(runtime, demo) -> str:
    draft_id = propose_refund(agent(runtime, demo))["draft_id"]
    approve_in_core(runtime, demo, draft_id)
    return request_execution_in_core(runtime, demo, draft_id)[0].id


def lease_of(runtime, execution_id: str):
    with Session(runtime.engine) as session:
        execution = session.get(Execution, execution_id)
        assert execution is not None
        return execution.lease_expires_at


def test_a_slow_downstream_call_keeps_its_lease_and_is_not_taken_over(runtime, demo, monkeypatch):
    execution_id = queued(runtime, demo)
    inside, release = threading.Event(), threading.Event()
    original = payments.charge_back

    def slow(*args: Any, **kwargs: Any) -> None:
        inside.set()
        assert release.wait(30)
        original(*args, **kwargs)

    monkeypatch.setattr(payments, "charge_back", slow)
    outcome: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: outcome.setdefault("run", runner.run_execution(runtime, execution_id))
    )
    worker.start()
    assert inside.wait(30)
    first = lease_of(runtime, execution_id)
    deadline = time.monotonic() + 10
    while lease_of(runtime, execution_id) == first and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the condition: the heartbeat moves the lease on
    renewed = lease_of(runtime, execution_id)
    assert renewed > first
    assert renewed > utcnow()  # still live well past the 1 s the claim granted

    second = runner.run_execution(runtime, execution_id)  # a redelivered message meanwhile

    assert second.status == "running"
    assert second.retry_in is not None  # it waits for the live lease; it does not take over
    release.set()
    worker.join(30)
    assert outcome["run"].status == "succeeded"
    with Session(runtime.engine) as session:
        assert len(session.exec(select(Refund)).all()) == 1


def test_an_attempt_taken_over_mid_call_cannot_commit_its_change(runtime, demo, monkeypatch):
    execution_id = queued(runtime, demo)
    original = payments.charge_back

    def taken_over(*args: Any, **kwargs: Any) -> None:
        original(*args, **kwargs)
        # Another delivery claims the execution while this attempt is still inside.
        with session_scope(runtime.engine) as session:
            session.execute(
                update(Execution)
                .where(col(Execution.id) == execution_id)
                .values(attempts=Execution.attempts + 1)
            )

    monkeypatch.setattr(payments, "charge_back", taken_over)

    assert runner.run_execution(runtime, execution_id).status == "superseded"

    with Session(runtime.engine) as session:
        assert session.exec(select(Refund)).all() == []  # the change rolled back
        execution = session.get(Execution, execution_id)
        assert execution is not None
        assert execution.status == "running"  # left to its new owner


def test_celery_time_limits_stay_below_the_lease(runtime):
    from service.executions.queue import celery_config

    config = celery_config(runtime.settings)
    lease = runtime.settings.execution_lease_seconds
    assert config["task_soft_time_limit"] < config["task_time_limit"] < lease
