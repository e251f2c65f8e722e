"""Looking at a running stack from a worker test: executions, refunds, the audit chain; and
driving its worker: deliveries the test can wait for, workers started and killed by tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from celery import Celery
from sqlalchemy import update
from sqlmodel import col, select

from harness.approvals import bearer
from harness.processes import WorkerProcess, start_worker
from service.audit import actions as audit_actions
from service.config import Settings
from service.db import session_scope
from service.executions.models import Execution
from service.executions.queue import celery_config
from service.executions.schemas import EXECUTE_TASK
from service.shop.models import Refund
from service.sql import utcnow
from tests.support.stacks import Stack, StackHost

FINISHED = {"succeeded", "failed"}
POLL_SECONDS = 0.05
NO_SUCH_EXECUTION = "exe_" + "0" * 24


def wait_until(condition: Callable[[], Any], timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, message
        time.sleep(POLL_SECONDS)


def get_execution(stack: Any, execution_id: str) -> dict[str, Any]:
    response = httpx.get(
        f"{stack.api_url}/v1/executions/{execution_id}",
        headers=bearer(stack.demo["tokens"]["auditor"]),
        timeout=30,
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_for_execution(stack: Any, execution_id: str, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = get_execution(stack, execution_id)
        if body["status"] in FINISHED or time.monotonic() > deadline:
            return body
        time.sleep(POLL_SECONDS)


def refunds(stack: Any, idempotency_key: str | None = None) -> list[Refund]:
    with session_scope(stack.runtime.engine) as session:
        statement = select(Refund)
        if idempotency_key is not None:
            statement = statement.where(col(Refund.idempotency_key) == idempotency_key)
        return list(session.exec(statement).all())


def chain_verifies(stack: Any) -> bool:
    with session_scope(stack.runtime.engine) as session:
        return audit_actions.verify(session, "demo").ok


def make_quiet(engine: Any, execution_id: str, seconds: float = 600) -> None:
    """Nothing happened to the execution for ``seconds``, as if the test had waited that long
    (the sweeper republishes only once the backoff since its last publish has passed)."""
    quiet = utcnow() - timedelta(seconds=seconds)
    with session_scope(engine) as session:
        session.execute(
            update(Execution)
            .where(col(Execution.id) == execution_id)
            .values(updated_at=quiet, republish_at=quiet)
        )


# --- deliveries the test can wait for -------------------------------------------------------


def deliver(settings: Settings, execution_id: str) -> str:
    """Publish the execute task once more, as the API's publisher does; returns the task id."""
    client = Celery("draftgate-test", set_as_current=False)
    client.conf.update(celery_config(settings))
    try:
        return str(client.send_task(EXECUTE_TASK, args=[execution_id]).id)
    finally:
        client.close()


def wait_for_task(worker: WorkerProcess, task_id: str, timeout: float = 60) -> str:
    """Wait until the worker has run this task; returns the worker's log line about it."""
    marker = f"[{task_id}] succeeded"
    deadline = time.monotonic() + timeout
    while True:
        lines = [line for line in worker.output().splitlines() if marker in line]
        if lines:
            return lines[0]
        assert worker.alive, worker.output()[-3000:]
        assert time.monotonic() < deadline, f"task {task_id} never ran:\n{worker.output()[-3000:]}"
        time.sleep(POLL_SECONDS)


def drain(settings: Settings, worker: WorkerProcess) -> None:
    """Deliver a task for an execution that does not exist and wait until the worker has run
    it: every message published before it was taken first (one queue, first in first out)."""
    line = wait_for_task(worker, deliver(settings, NO_SUCH_EXECUTION))
    assert "s: 'missing'" in line, line  # the task's result, within the JSON log line


# --- workers started and killed by tests ----------------------------------------------------


def restart_worker(stack: Stack, host: StackHost) -> WorkerProcess:
    """Start the stack's worker again after the test stopped or killed it. The new worker
    becomes the stack's own, so the module's next test finds it running instead of starting
    one more (which costs seconds)."""
    worker = host.start_worker()
    stack.worker = worker
    return worker


@contextmanager
def extra_worker(settings: Settings, log: Path, *, concurrency: int = 1) -> Iterator[WorkerProcess]:
    """One more real worker for this test, SIGKILLed at the end: these tests are not about how
    a worker shuts down, and a warm shutdown costs seconds."""
    worker = start_worker(settings, log, concurrency=concurrency)
    try:
        yield worker
    finally:
        worker.kill()
