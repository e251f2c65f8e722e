"""An execution's task is published in the trace of the request that asked for it, by the
after-commit publish and by the sweeper's re-publishing alike (tracing off: the trace id
travels in the task's headers, for the worker's logs)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlmodel import Session, col

from service.db import session_scope
from service.executions import sweeper
from service.executions.models import Execution
from service.executions.outbox import publish_pending
from service.sql import utcnow
from service.telemetry import publishing
from service.tracing import parse_traceparent
from tests.security.helpers import agent, propose_refund
from tests.support.core import approve_in_core, request_execution_in_core


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


class TracedBroker:
    """Records the trace each task would travel in, as the real publishers build it."""

    def __init__(self) -> None:
        self.traces: list[str | None] = []

    def __call__(self, task: str, args: list[str]) -> None:
        with publishing(task) as headers:
            parsed = parse_traceparent(headers.get("traceparent"))
            self.traces.append(parsed[0] if parsed else None)


def test_published_and_republished_tasks_travel_in_the_executions_trace(runtime, demo):
    draft_id = propose_refund(agent(runtime, demo))["draft_id"]
    approve_in_core(runtime, demo, draft_id)
    execution, _ = request_execution_in_core(runtime, demo, draft_id)
    assert execution.trace_id is not None
    assert execution.traceparent is None  # tracing off: no span to remember
    broker = TracedBroker()

    assert publish_pending(runtime.engine, broker, execution_id=execution.id) == 1
    with session_scope(runtime.engine) as session:  # the sweeper finds it due again
        session.execute(
            update(Execution)
            .where(col(Execution.id) == execution.id)
            .values(republish_at=utcnow() - timedelta(seconds=1))
        )
    assert sweeper.sweep(runtime, broker).republished == 1

    assert broker.traces == [execution.trace_id, execution.trace_id]
    with Session(runtime.engine) as session:
        assert session.get(Execution, execution.id).publishes == 2  # type: ignore[union-attr]
