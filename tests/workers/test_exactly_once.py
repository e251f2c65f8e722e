"""Exactly once under crashes and duplicate deliveries (DESIGN.md §5), with real processes.

The crash drill: the worker makes the refund, then pauses before recording it
(``fault_pause_after_downstream_ms``); the test SIGKILLs it in that window. Whatever brings
the task back (Redis redelivering the unacknowledged message, the worker's main process
giving back the task of a dead pool child, or the sweeper republishing an execution whose
lease expired), the refund exists exactly once and the execution ends ``succeeded`` with the
lost first attempt on record.
"""

from __future__ import annotations

import subprocess
import time
from datetime import timedelta
from typing import Any

import httpx
import pytest

from harness.approvals import approve, bearer
from mcp_adapter.tools import ToolDoor
from service.api.publisher import celery_publisher
from service.audit import actions as audit_actions
from service.audit import repository as audit_repository
from service.db import session_scope
from service.executions import repository as executions_repository
from service.executions.models import Execution, ExecutionAttempt
from service.executions.schemas import EXECUTE_TASK
from service.executions.sweeper import sweep
from service.shop.models import Refund
from service.sql import utcnow
from service.tracing import new_trace_id
from tests.support.backends import both_backends, postgresql_only
from tests.workers.helpers import (
    POLL_SECONDS,
    extra_worker,
    make_quiet,
    refunds,
    restart_worker,
    wait_until,
)

ORDER = "ORD-1004"
AMOUNT = 2_500  # 25.00 USD: one approver
PAUSE_MS = 2_000  # between the refund and recording it: the window the test kills in
# Taken over once it runs out; the task time limits (0.8 and 0.9 of it) leave a recovering
# attempt, which pauses too, time to finish.
LEASE_SECONDS = 6
VISIBILITY_SECONDS = 5


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {
        "fault_pause_after_downstream_ms": PAUSE_MS,
        "execution_lease_seconds": LEASE_SECONDS,
        "republish_after_seconds": 1,
        "broker_visibility_timeout_seconds": VISIBILITY_SECONDS,
    }


# --- helpers ------------------------------------------------------------------------------


def approved_and_executing(stack: Any) -> tuple[str, str]:
    """Propose, approve and execute a refund; returns (draft id, execution id)."""
    door = ToolDoor(stack.runtime, stdio_token=stack.demo["tokens"]["agent"])
    arguments = {
        "order_id": ORDER,
        "amount": {"amount_minor": AMOUNT, "currency": "USD"},
        "reason": "damaged",
    }
    draft_id = door.call("propose_refund", arguments, new_trace_id(), None)["draft_id"]
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    response = httpx.post(
        f"{stack.api_url}/v1/drafts/{draft_id}/execute",
        headers=bearer(stack.demo["tokens"]["approver_alice"]),
        timeout=60,
    )
    assert response.status_code == 202, response.text
    return draft_id, response.json()["execution_id"]


def agent_view(stack: Any, draft_id: str) -> dict[str, Any]:
    door = ToolDoor(stack.runtime, stdio_token=stack.demo["tokens"]["agent"])
    view: dict[str, Any] = door.call("get_draft", {"draft_id": draft_id}, new_trace_id(), None)
    return view


def state(stack: Any, execution_id: str) -> tuple[Execution, list[ExecutionAttempt]]:
    with session_scope(stack.runtime.engine) as session:
        execution = executions_repository.get(session, execution_id)
        assert execution is not None
        return execution, executions_repository.attempts(session, execution_id)


def wait_for_finish(stack: Any, execution_id: str, timeout: float = 90) -> Execution:
    deadline = time.monotonic() + timeout
    while True:
        execution, _ = state(stack, execution_id)
        if execution.status in ("succeeded", "failed") or time.monotonic() > deadline:
            return execution
        time.sleep(POLL_SECONDS)


def refund_made_then_kill(stack: Any, draft_id: str, execution_id: str) -> Refund:
    """Wait for the refund to commit, check the world in the window, SIGKILL the worker."""
    key = f"{draft_id}:1"
    wait_until(lambda: refunds(stack, key), 60, "the worker never made the refund")
    execution, attempts = state(stack, execution_id)
    view = agent_view(stack, draft_id)
    stack.worker.kill()
    # Killed in the window: the refund is made, the outcome is not recorded.
    assert execution.status == "running", (execution.status, stack.worker.output()[-3000:])
    assert [(a.number, a.result) for a in attempts] == [(1, "running")]
    assert view["status"] == "running"
    assert "being executed" in view["message"]
    [refund] = refunds(stack, key)
    return refund


def without_pause(stack: Any) -> Any:
    return stack.settings.model_copy(update={"fault_pause_after_downstream_ms": 0})


def assert_recovered_once(stack: Any, draft_id: str, execution_id: str, refund: Refund) -> None:
    execution, attempts = state(stack, execution_id)
    assert execution.status == "succeeded", (execution.error, attempts)
    assert refunds(stack) == [refund]  # exactly one refund, the one made before the crash
    assert execution.outcome is not None
    assert execution.outcome["refund_id"] == refund.id
    results = [(a.number, a.result) for a in attempts]
    assert results[0] == (1, "lost"), results
    assert results[-1][1] == "succeeded", results
    assert all(result in ("lost", "succeeded") for _, result in results), results
    assert agent_view(stack, draft_id)["outcome"]["refund_id"] == refund.id
    with session_scope(stack.runtime.engine) as session:
        assert audit_actions.verify(session, "demo").ok
        types = [e.type for e in audit_repository.events_for(session, "demo", draft_id=draft_id)]
    assert types.count("execution.succeeded") == 1
    assert types.count("execution.started") == len(attempts)


# --- the crash drills ---------------------------------------------------------------------
#
# In the order the module runs them on one stack: first the drill the stack's worker
# survives, then the ones that SIGKILL it. The redelivery drill starts the stack's worker
# again itself (the next drill finds it running); the sweeper drill, last on these settings,
# leaves it dead.


@postgresql_only  # kombu's SQLite broker never redelivers; its worker is solo
def test_a_killed_pool_process_is_given_back_by_the_worker_and_recovered(stack):
    """Only the process running the task dies; the worker's main process survives and, with
    acks_late + task_reject_on_worker_lost, puts the message back for another try."""
    draft_id, execution_id = approved_and_executing(stack)
    key = f"{draft_id}:1"
    wait_until(lambda: refunds(stack, key), 60, "the worker never made the refund")
    children = subprocess.run(
        ["pgrep", "-P", str(stack.worker.pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    assert len(children) == 1, children  # --concurrency 1: one pool process
    subprocess.run(["kill", "-KILL", children[0]], check=True)
    [refund] = refunds(stack, key)

    execution = wait_for_finish(stack, execution_id, timeout=120)

    assert execution.status == "succeeded", stack.worker.output()[-4000:]
    assert_recovered_once(stack, draft_id, execution_id, refund)
    assert stack.worker.alive  # the main process lived through it


@postgresql_only  # kombu's SQLite broker never redelivers; its worker is solo
def test_a_killed_worker_is_recovered_by_redis_redelivery(stack, stack_host):
    draft_id, execution_id = approved_and_executing(stack)
    refund = refund_made_then_kill(stack, draft_id, execution_id)
    _, [first] = state(stack, execution_id)
    # Redis hands an unacknowledged message out again once the visibility timeout has
    # passed since its delivery, when a consumer scans (kombu scans as a worker starts).
    delivered_by = first.started_at + timedelta(seconds=VISIBILITY_SECONDS + 1)
    wait_until(lambda: utcnow() > delivered_by, 30, "clock")

    # The stack's worker comes back (and stays, for the next drill); finding the refund made,
    # it pauses once more before recording it.
    worker = restart_worker(stack, stack_host)
    execution = wait_for_finish(stack, execution_id)
    assert execution.status == "succeeded", worker.output()[-3000:]
    assert_recovered_once(stack, draft_id, execution_id, refund)
    with session_scope(stack.runtime.engine) as session:  # the broker did it, not the sweeper
        republished = audit_repository.events_for(
            session, "demo", draft_id=draft_id, type_="execution.republished"
        )
    assert republished == []


@both_backends
def test_a_killed_worker_is_recovered_by_the_sweeper(stack, tmp_path):
    draft_id, execution_id = approved_and_executing(stack)
    refund = refund_made_then_kill(stack, draft_id, execution_id)
    publish = celery_publisher(stack.settings)

    with extra_worker(without_pause(stack), tmp_path / "logs" / "worker-2.log") as worker:
        execution, _ = state(stack, execution_id)
        assert execution.lease_expires_at is not None
        wait_until(
            lambda: utcnow() > execution.lease_expires_at + timedelta(seconds=0.5),
            30,
            "clock",
        )
        report = sweep(stack.runtime, publish)
        assert report.republished == 1 or state(stack, execution_id)[0].status == "succeeded"
        execution = wait_for_finish(stack, execution_id)
        log = worker.output()
    assert execution.status == "succeeded", log[-3000:]
    assert_recovered_once(stack, draft_id, execution_id, refund)
    # Once finished, nothing is republished any more, however long it has been quiet.
    make_quiet(stack.runtime.engine, execution_id)
    assert sweep(stack.runtime, publish).republished == 0


@both_backends
@pytest.mark.parametrize(
    "settings_overrides",
    [{"fault_pause_after_downstream_ms": 1_500, "execution_lease_seconds": 30}],
)
def test_duplicate_deliveries_to_two_workers_make_one_refund(stack, tmp_path):
    publish = celery_publisher(stack.settings)
    with extra_worker(stack.settings, tmp_path / "logs" / "worker-2.log", concurrency=2):
        draft_id, execution_id = approved_and_executing(stack)
        for _ in range(5):  # the same task, delivered again and again, to either worker
            publish(EXECUTE_TASK, [execution_id])
        execution = wait_for_finish(stack, execution_id)
    assert execution.status == "succeeded", stack.worker.output()[-3000:]
    _, attempts = state(stack, execution_id)
    assert [(a.number, a.result) for a in attempts] == [(1, "succeeded")]
    [refund] = refunds(stack)
    assert refund.idempotency_key == f"{draft_id}:1"
    assert execution.outcome is not None
    assert execution.outcome["refund_id"] == refund.id
