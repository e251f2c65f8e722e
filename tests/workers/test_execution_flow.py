"""The whole execution phase over real transports (DESIGN.md §5, §6, §8).

An agent proposes over MCP, approvers sign through the HTTP API (and the approver CLI), the
execute endpoint queues the task, a real Celery worker process runs it, and the agent learns
the outcome through ``get_draft``. Each test runs on the embedded stack (SQLite + kombu's
SQLite broker) and on the production stack (PostgreSQL + Redis).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import func, update
from sqlmodel import col, select

from harness.approvals import approve, bearer, get_draft, signed_decision
from service.approvals.schemas import Decision
from service.audit import repository as audit_repository
from service.db import session_scope
from service.drafts.models import Draft
from service.executions.models import Execution, OutboxMessage
from service.sql import utcnow
from tests.support.backends import both_backends
from tests.support.mcp_client import connect
from tests.workers.helpers import (
    FINISHED,
    chain_verifies,
    get_execution,
    refunds,
    restart_worker,
    wait_for_execution,
)

pytestmark = [pytest.mark.anyio, both_backends]

ORDER = "ORD-1004"  # delivered 3 days ago, total 785.00 USD
SMALL = 1_500  # 15.00 USD: one approver
LARGE = 60_000  # 600.00 USD: alice AND bob
AGENT_POLL_SECONDS = 0.1  # each look is a get_draft over MCP


# --- helpers ------------------------------------------------------------------------------


def refund_arguments(amount_minor: int) -> dict[str, Any]:
    return {
        "order_id": ORDER,
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
    }


async def agent_draft(agent: Any, draft_id: str) -> dict[str, Any]:
    result = await agent.call_tool("get_draft", {"draft_id": draft_id})
    assert not result.is_error, result.content
    view: dict[str, Any] = result.structured_content
    return view


async def wait_for_agent_draft(
    agent: Any, draft_id: str, statuses: tuple[str, ...], timeout: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view = await agent_draft(agent, draft_id)
        if view["status"] in statuses or time.monotonic() > deadline:
            return view
        await anyio.sleep(AGENT_POLL_SECONDS)


def execute(
    stack: Any, draft_id: str, approver: str = "alice", traceparent: str | None = None
) -> httpx.Response:
    headers = bearer(stack.demo["tokens"][f"approver_{approver}"])
    if traceparent is not None:
        headers["traceparent"] = traceparent
    return httpx.post(f"{stack.api_url}/v1/drafts/{draft_id}/execute", headers=headers, timeout=60)


def audit_events(stack: Any, draft_id: str) -> list[dict[str, Any]]:
    with session_scope(stack.runtime.engine) as session:
        return [
            e.model_dump() for e in audit_repository.events_for(session, "demo", draft_id=draft_id)
        ]


def traceparent() -> tuple[str, str]:
    trace_id = secrets.token_hex(16)
    return trace_id, f"00-{trace_id}-{secrets.token_hex(8)}-01"


def worker_log(stack: Any) -> str:
    return stack.worker.output()[-3000:] if stack.worker else ""


# --- the full flow ------------------------------------------------------------------------


async def test_a_two_approver_refund_runs_once_and_the_agent_hears_each_stage(stack, stack_host):
    demo = stack.demo
    trace_id, header = traceparent()
    approver_trace_id, approver_header = traceparent()
    async with connect(stack.mcp_url, demo["tokens"]["agent"], traceparent=header) as agent:
        proposed = await agent.call_tool("propose_refund", refund_arguments(LARGE))
        assert not proposed.is_error, proposed.content
        draft_id = proposed.structured_content["draft_id"]

        view = await agent_draft(agent, draft_id)
        assert view["status"] == "proposed"
        assert view["approvals"] == {"required": 2, "received": 0}
        assert "0 of 2 approvals" in view["message"]
        assert "Nothing has been executed" in view["message"]

        assert approve(stack.api_url, demo, draft_id, "alice").status_code == 201
        view = await agent_draft(agent, draft_id)
        assert (view["status"], view["approvals"]["received"]) == ("proposed", 1)
        assert "1 of 2 approvals" in view["message"]
        # One approval of two does not open the door.
        refused = execute(stack, draft_id)
        assert refused.status_code == 409
        assert refused.json()["code"] == "NOT_APPROVED"

        assert approve(stack.api_url, demo, draft_id, "bob").status_code == 201
        view = await agent_draft(agent, draft_id)
        assert view["status"] == "approved"
        assert "approved" in view["message"]
        assert "Nothing has run yet" in view["message"]

        # With no worker running, the request waits in the queue; the agent is told so.
        stack.worker.kill()
        accepted = execute(stack, draft_id, approver="bob", traceparent=approver_header)
        assert accepted.status_code == 202, accepted.text
        body = accepted.json()
        assert set(body) == {"execution_id", "status"}
        assert body["status"] == "queued"
        execution_id = body["execution_id"]
        view = await agent_draft(agent, draft_id)
        assert view["status"] == "queued"
        assert "being executed" in view["message"]
        assert view["outcome"] is None

        worker = restart_worker(stack, stack_host)
        view = await wait_for_agent_draft(agent, draft_id, FINISHED)
        log = worker.output()[-3000:]
    assert view["status"] == "succeeded", log

    key = f"{draft_id}:1"
    [refund] = refunds(stack, key)
    assert len(refunds(stack)) == 1
    assert (refund.amount_minor, refund.currency) == (LARGE, "USD")
    assert view["outcome"]["refund_id"] == refund.id
    assert (view["outcome"]["amount_minor"], view["outcome"]["currency"]) == (LARGE, "USD")
    assert view["message"].startswith("Done: ")
    assert refund.id in view["message"]
    assert "600.00" in view["message"]
    assert "completed" in view["next_action"]

    execution = get_execution(stack, execution_id)
    assert execution["status"] == "succeeded"
    assert execution["error"] is None
    assert (execution["draft_id"], execution["revision"], execution["action"]) == (
        draft_id,
        1,
        "refund",
    )
    assert execution["requested_by"].endswith("bob")
    [attempt] = execution["attempts"]
    assert (attempt["number"], attempt["result"]) == (1, "succeeded")
    assert attempt["finished_at"] is not None
    assert execution["outcome"]["refund_id"] == refund.id
    assert execution["finished_at"] is not None

    # Asking again returns the same, finished execution and runs nothing.
    again = execute(stack, draft_id)
    assert again.status_code == 202
    assert again.json() == {"execution_id": execution_id, "status": "succeeded"}
    assert len(refunds(stack)) == 1

    assert chain_verifies(stack)
    events = audit_events(stack, draft_id)
    types = [e["type"] for e in events]
    for expected in ("execution.requested", "execution.started", "execution.succeeded"):
        assert types.count(expected) == 1, types
    assert types.index("execution.requested") < types.index("execution.started")
    assert types.index("execution.started") < types.index("execution.succeeded")
    succeeded = next(e for e in events if e["type"] == "execution.succeeded")
    assert succeeded["execution_id"] == execution_id
    assert succeeded["data"]["outcome"]["refund_id"] == refund.id
    requested = next(e for e in events if e["type"] == "execution.requested")
    assert requested["data"]["idempotency_key"] == key
    assert requested["data"]["approvers"] == ["alice", "bob"]

    # Trace ids (§8): the agent's is carried into the draft, the execution and the worker's
    # events; the execute request is an approver's, recorded under the approver's own trace
    # id. The agent's trace still shows the whole story, pulled in through the draft id.
    assert get_draft(stack.api_url, demo["tokens"]["auditor"], draft_id)["trace_id"] == trace_id
    lifecycle = ("execution.requested", "execution.started", "execution.succeeded")
    traced = {e["type"]: e["trace_id"] for e in events if e["type"] in lifecycle}
    assert traced == {
        "execution.requested": approver_trace_id,
        "execution.started": trace_id,
        "execution.succeeded": trace_id,
    }
    response = httpx.get(
        f"{stack.api_url}/v1/traces/{trace_id}",
        headers=bearer(demo["tokens"]["auditor"]),
        timeout=30,
    )
    assert response.status_code == 200, response.text
    steps = [step["type"] for step in response.json()["steps"]]
    story = [t for t in steps if t.startswith(("draft.", "approval.")) or t in lifecycle]
    # Every change of the draft's status is an event of its own, next to the execution's.
    assert story == [
        "draft.proposed",
        "approval.approved",
        "approval.approved",
        "draft.approved",
        "execution.requested",
        "draft.queued",
        "execution.started",
        "draft.running",
        "execution.succeeded",
        "draft.succeeded",
    ], steps


async def test_the_approver_cli_approves_and_executes(stack):
    demo = stack.demo
    async with connect(stack.mcp_url, demo["tokens"]["agent"]) as agent:
        proposed = await agent.call_tool("propose_refund", refund_arguments(SMALL))
        draft_id = proposed.structured_content["draft_id"]

        env = {k: v for k, v in os.environ.items() if not k.startswith("DRAFTGATE_")}
        env |= {
            "DRAFTGATE_API_URL": stack.api_url,
            "DRAFTGATE_TOKEN": demo["tokens"]["approver_alice"],
        }
        draftgate = str(Path(sys.executable).parent / "draftgate")
        key_file = demo["approvers"]["alice"]["private_key_file"]
        completed = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [draftgate, "approve", draft_id, "--key", key_file, "--yes", "--execute", "--wait"],
                env=env,
                check=False,
                capture_output=True,
                text=True,
                timeout=120,
            )
        )
        assert completed.returncode == 0, completed.stdout + completed.stderr
        assert "approved revision 1" in completed.stdout
        lines = [x for x in completed.stdout.splitlines() if x.startswith("execution exe_")]
        execution_id = lines[0].split()[1].rstrip(":")
        # --wait followed it to its end: the last status line, then the outcome.
        assert lines[-1] == f"execution {execution_id}: succeeded", completed.stdout
        assert "outcome: refunded " in completed.stdout, completed.stdout

        view = await wait_for_agent_draft(agent, draft_id, FINISHED)
    assert view["status"] == "succeeded", worker_log(stack)
    execution = get_execution(stack, execution_id)
    assert execution["draft_id"] == draft_id
    assert execution["status"] == "succeeded"
    assert [refund.amount_minor for refund in refunds(stack, f"{draft_id}:1")] == [SMALL]


# --- many execute calls at once -----------------------------------------------------------


def test_twenty_concurrent_execute_calls_make_one_execution_and_one_refund(stack):
    demo = stack.demo
    from mcp_adapter.tools import ToolDoor
    from service.tracing import new_trace_id

    door = ToolDoor(stack.runtime, stdio_token=demo["tokens"]["agent"])
    draft_id = door.call("propose_refund", refund_arguments(SMALL), new_trace_id(), None)[
        "draft_id"
    ]
    assert approve(stack.api_url, demo, draft_id, "alice").status_code == 201

    count = 20
    barrier = threading.Barrier(count)
    responses: list[Any] = [None] * count

    def call(index: int) -> None:
        barrier.wait()
        try:
            responses[index] = execute(stack, draft_id, approver=("alice", "bob")[index % 2])
        except Exception as exc:  # reported below
            responses[index] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert all(isinstance(r, httpx.Response) for r in responses), responses
    assert [r.status_code for r in responses] == [202] * count, [r.text for r in responses]
    ids = {r.json()["execution_id"] for r in responses}
    assert len(ids) == 1, ids
    [execution_id] = ids
    assert {r.json()["status"] for r in responses} <= {"queued", "running", "succeeded"}

    with session_scope(stack.runtime.engine) as session:
        executions = session.exec(
            select(func.count()).select_from(Execution).where(col(Execution.draft_id) == draft_id)
        ).one()
        outbox = session.exec(
            select(OutboxMessage).where(col(OutboxMessage.execution_id) == execution_id)
        ).all()
    assert executions == 1
    assert len(outbox) == 1

    # The publish runs after the response is sent, so it is read once the worker finished.
    assert wait_for_execution(stack, execution_id)["status"] == "succeeded", worker_log(stack)
    with session_scope(stack.runtime.engine) as session:
        [message] = session.exec(
            select(OutboxMessage).where(col(OutboxMessage.execution_id) == execution_id)
        ).all()
    assert message.published_at is not None
    assert message.publish_count == 1
    assert len(refunds(stack)) == 1
    types = [e["type"] for e in audit_events(stack, draft_id)]
    assert types.count("execution.requested") == 1
    assert types.count("execution.started") == 1
    assert chain_verifies(stack)


# --- how get_draft tells the endings nobody executed ----------------------------------------


async def test_get_draft_tells_the_agent_about_a_rejection_and_an_expiry(stack):
    demo = stack.demo
    async with connect(stack.mcp_url, demo["tokens"]["agent"]) as agent:
        rejected_id = (
            await agent.call_tool("propose_refund", refund_arguments(SMALL))
        ).structured_content["draft_id"]
        expiring_id = (
            await agent.call_tool("propose_refund", refund_arguments(SMALL + 100))
        ).structured_content["draft_id"]

        # Rejected: one signed rejection ends the draft.
        token = demo["tokens"]["approver_bob"]
        body = signed_decision(
            get_draft(stack.api_url, token, rejected_id),
            approver="bob",
            key_file=demo["approvers"]["bob"]["private_key_file"],
            decision=Decision.REJECT,
            reason="the customer already got a replacement",
        )
        response = httpx.post(
            f"{stack.api_url}/v1/drafts/{rejected_id}/approvals",
            json=body,
            headers=bearer(token),
            timeout=30,
        )
        assert response.status_code == 201, response.text
        view = await agent_draft(agent, rejected_id)
        assert view["status"] == "rejected"
        assert view["reason"] == "the customer already got a replacement"
        message = view["message"]
        assert "the customer already got a replacement" in message
        assert "declined" in message
        assert "Nothing was executed" in message
        assert "not a system failure" in message
        assert "not a permission problem" in message
        assert "Do not propose the same change again unchanged" in view["next_action"]
        assert view["outcome"] is None
        refused = execute(stack, rejected_id)
        assert refused.status_code == 409
        assert refused.json()["code"] == "DRAFT_REJECTED"

        # Expired after approval, before anyone executed it.
        assert approve(stack.api_url, demo, expiring_id, "alice").status_code == 201
        with session_scope(stack.runtime.engine) as session:
            session.execute(
                update(Draft).where(col(Draft.id) == expiring_id).values(expires_at=utcnow())
            )
        view = await agent_draft(agent, expiring_id)
        assert view["status"] == "expired"
        assert "expired" in view["message"]
        assert "nothing was executed" in view["message"]
        assert "propose it again" in view["next_action"]
        refused = execute(stack, expiring_id)
        assert refused.status_code == 409
        assert refused.json()["code"] == "DRAFT_EXPIRED"

    assert refunds(stack) == []
    with session_scope(stack.runtime.engine) as session:
        assert session.exec(select(func.count()).select_from(Execution)).one() == 0
    assert chain_verifies(stack)


# --- the smallest whole round trip (formerly its own module, which cost two more stacks) ----


async def test_propose_approve_execute_succeeds_once(stack):
    demo = stack.demo
    async with connect(stack.mcp_url, demo["tokens"]["agent"]) as agent:
        proposed = await agent.call_tool(
            "propose_refund",
            {
                "order_id": demo["orders"]["delivered"],
                "amount": {"amount_minor": 1500, "currency": "USD"},
                "reason": "damaged",
            },
        )
        draft_id = proposed.structured_content["draft_id"]
        assert approve(stack.api_url, demo, draft_id, "alice").status_code == 201
        accepted = httpx.post(
            f"{stack.api_url}/v1/drafts/{draft_id}/execute",
            headers=bearer(demo["tokens"]["approver_alice"]),
            timeout=30,
        )
        assert accepted.status_code == 202
        state = await wait_for_agent_draft(agent, draft_id, FINISHED)
    assert state["status"] == "succeeded", stack.worker.output()[-3000:]
    assert state["outcome"]["amount_minor"] == 1500
