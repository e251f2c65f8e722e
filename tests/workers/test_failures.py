"""Failures a real worker meets (DESIGN.md §5): transient downstream errors are retried with
backoff up to a limit; a business failure is final after one attempt. Each test runs on the
embedded and the production stack; the agent hears the outcome through MCP ``get_draft``.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import col, select

from harness.approvals import approve, bearer
from mcp_adapter.tools import ToolDoor
from service.api.publisher import celery_publisher
from service.audit import repository as audit_repository
from service.db import session_scope
from service.executions.sweeper import sweep
from service.shop.models import Cancellation, Order
from service.tracing import new_trace_id
from tests.support.backends import both_backends
from tests.support.mcp_client import connect
from tests.workers.helpers import (
    chain_verifies,
    deliver,
    get_execution,
    make_quiet,
    refunds,
    wait_for_execution,
    wait_for_task,
)

# The broker and the database decide how a delivery is recovered: both backends.
pytestmark = both_backends


ORDER = "ORD-1004"
AMOUNT = 2_500  # 25.00 USD: one approver
# Short backoffs: the retry path is the same, the test waits less for it.
RETRIES = {"execution_retry_base_seconds": 0.1, "execution_retry_max_seconds": 0.4}


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    """The module's stack: two transient failures of the payment provider, then success.
    (The tests are ordered so that those on the same settings share one stack.)"""
    return {**RETRIES, "shop_transient_failures": 2}


# --- helpers ------------------------------------------------------------------------------


def propose(stack: Any, tool: str, arguments: dict[str, Any]) -> str:
    door = ToolDoor(stack.runtime, stdio_token=stack.demo["tokens"]["agent"])
    return str(door.call(tool, arguments, new_trace_id(), None)["draft_id"])


def propose_refund(stack: Any) -> str:
    return propose(
        stack,
        "propose_refund",
        {
            "order_id": ORDER,
            "amount": {"amount_minor": AMOUNT, "currency": "USD"},
            "reason": "damaged",
        },
    )


def execute(stack: Any, draft_id: str) -> str:
    response = httpx.post(
        f"{stack.api_url}/v1/drafts/{draft_id}/execute",
        headers=bearer(stack.demo["tokens"]["approver_alice"]),
        timeout=60,
    )
    assert response.status_code == 202, response.text
    return str(response.json()["execution_id"])


def audit_events(stack: Any, draft_id: str, type_: str) -> list[dict[str, Any]]:
    with session_scope(stack.runtime.engine) as session:
        return [
            e.model_dump()
            for e in audit_repository.events_for(session, "demo", draft_id=draft_id, type_=type_)
        ]


async def agent_view(stack: Any, draft_id: str) -> dict[str, Any]:
    async with connect(stack.mcp_url, stack.demo["tokens"]["agent"]) as agent:
        result = await agent.call_tool("get_draft", {"draft_id": draft_id})
    assert not result.is_error, result.content
    view: dict[str, Any] = result.structured_content
    return view


# --- transient failures -------------------------------------------------------------------


def test_a_transient_failure_is_retried_until_it_succeeds(stack):
    draft_id = propose_refund(stack)
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    execution_id = execute(stack, draft_id)

    execution = wait_for_execution(stack, execution_id)

    assert execution["status"] == "succeeded", stack.worker.output()[-3000:]
    attempts = execution["attempts"]
    assert [(a["number"], a["result"]) for a in attempts] == [
        (1, "retry"),
        (2, "retry"),
        (3, "succeeded"),
    ]
    for attempt in attempts[:2]:
        assert attempt["detail"]["code"] == "PAYMENT_PROVIDER_UNAVAILABLE"
        assert attempt["detail"]["category"] == "transient"
    # The last error of a retried attempt does not linger once the execution succeeded.
    assert execution["error"] is None
    [refund] = refunds(stack)
    assert refund.idempotency_key == f"{draft_id}:1"
    assert refund.amount_minor == AMOUNT
    assert execution["outcome"]["refund_id"] == refund.id

    scheduled = audit_events(stack, draft_id, "execution.retry_scheduled")
    assert [e["data"]["attempt"] for e in scheduled] == [1, 2]
    # Exponential backoff from the module's base (0.1 s).
    assert [e["data"]["retry_in_seconds"] for e in scheduled] == [0.1, 0.2]
    assert all(e["data"]["error"]["code"] == "PAYMENT_PROVIDER_UNAVAILABLE" for e in scheduled)
    assert [e["data"]["attempt"] for e in audit_events(stack, draft_id, "execution.started")] == [
        1,
        2,
        3,
    ]
    assert len(audit_events(stack, draft_id, "execution.succeeded")) == 1
    assert chain_verifies(stack)


# --- a business failure -------------------------------------------------------------------
# (On the module's settings: the shop's transient failures hit only its payment provider,
# which cancelling an order never calls, so the failure below is the business one alone.)


@pytest.mark.anyio
async def test_a_business_failure_is_final_after_one_attempt(stack):
    paid = stack.demo["orders"]["paid"]
    draft_id = propose(
        stack, "propose_cancel_order", {"order_id": paid, "reason": "customer_request"}
    )
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    # The warehouse was faster than the approver: the order shipped in the meantime.
    with session_scope(stack.runtime.engine) as session:
        session.execute(
            update(Order).where(col(Order.order_number) == paid).values(status="shipped")
        )
    execution_id = execute(stack, draft_id)

    execution = wait_for_execution(stack, execution_id)

    assert execution["status"] == "failed", stack.worker.output()[-3000:]
    assert [(a["number"], a["result"]) for a in execution["attempts"]] == [(1, "failed")]
    error = execution["error"]
    assert error["code"] == "ORDER_NOT_CANCELLABLE"
    assert error["category"] == "precondition_failed"
    assert error["attempts_exhausted"] is False
    assert "shipped" in error["message"]
    assert "cancelled" in error["message"]

    view = await agent_view(stack, draft_id)
    assert view["status"] == "failed"
    assert "shipped" in view["reason"]
    assert "can be cancelled" in view["reason"]
    assert view["reason"] in view["message"]
    assert "Do not re-propose" in view["next_action"]

    with session_scope(stack.runtime.engine) as session:
        order = session.exec(select(Order).where(col(Order.order_number) == paid)).one()
        cancellations = session.exec(select(Cancellation)).all()
    assert (order.status, order.cancelled_at) == ("shipped", None)
    assert cancellations == []
    assert audit_events(stack, draft_id, "execution.retry_scheduled") == []
    assert len(audit_events(stack, draft_id, "execution.started")) == 1
    assert len(audit_events(stack, draft_id, "execution.failed")) == 1
    assert chain_verifies(stack)


# --- the attempt limit (its own settings, so last) ---------------------------------------


@pytest.mark.parametrize(
    "settings_overrides",
    [
        {
            **RETRIES,
            "shop_transient_failures": 10,
            "execution_max_attempts": 3,
            "execution_retry_max_seconds": 0.15,
        }
    ],
)
@pytest.mark.anyio
async def test_transient_failures_stop_after_the_attempt_limit(stack):
    draft_id = propose_refund(stack)
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    execution_id = execute(stack, draft_id)

    execution = wait_for_execution(stack, execution_id)

    assert execution["status"] == "failed", stack.worker.output()[-3000:]
    assert [(a["number"], a["result"]) for a in execution["attempts"]] == [
        (1, "retry"),
        (2, "retry"),
        (3, "failed"),
    ]
    error = execution["error"]
    assert error["code"] == "PAYMENT_PROVIDER_UNAVAILABLE"
    assert error["attempts_exhausted"] is True
    assert "temporarily unavailable" in error["message"]
    assert refunds(stack) == []

    view = await agent_view(stack, draft_id)
    assert view["status"] == "failed"
    assert "kept failing after 3 attempts" in view["reason"]
    assert view["reason"] in view["message"]
    assert "could not be carried out" in view["message"]
    assert view["outcome"] is None

    failed = audit_events(stack, draft_id, "execution.failed")
    assert len(failed) == 1
    assert failed[0]["data"]["attempts_exhausted"] is True
    scheduled = audit_events(stack, draft_id, "execution.retry_scheduled")
    assert len(scheduled) == 2
    # Doubling from the base, capped at the maximum (0.15 s).
    assert [e["data"]["retry_in_seconds"] for e in scheduled] == [0.1, 0.15]

    # Nothing runs it again: neither the sweeper (however long it has been quiet) nor another
    # delivery of its task.
    make_quiet(stack.runtime.engine, execution_id)
    assert sweep(stack.runtime, celery_publisher(stack.settings)).republished == 0
    ran = wait_for_task(stack.worker, deliver(stack.settings, execution_id))
    assert "s: 'failed'" in ran, ran  # the task's result, within the JSON log line
    again = get_execution(stack, execution_id)
    assert (again["status"], len(again["attempts"])) == ("failed", 3)
    assert len(audit_events(stack, draft_id, "execution.started")) == 3
    assert chain_verifies(stack)
