"""Webhooks over the real stack: an agent proposes over MCP, approvers sign and execute through
the HTTP API, a real Celery worker delivers to a real receiver on 127.0.0.1 that verifies every
signature with ``standardwebhooks``. The test plays beat: a thread runs the webhook sweep
(``publish_due``) with the API's real publisher, as the beat schedule would. Each test runs on
the embedded stack (SQLite + kombu's SQLite broker) and on the production one (PostgreSQL +
Redis).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from sqlmodel import col, select

from harness.approvals import approve, bearer
from service.api.publisher import celery_publisher
from service.audit.models import AuditEvent
from service.db import session_scope
from service.webhooks.models import DeliveryStatus, WebhookDelivery
from service.webhooks.outbox import publish_due
from service.webhooks.schemas import EVENT_TYPES
from tests.service.webhooks.receiver import receiving, refused_url
from tests.support.mcp_client import connect
from tests.workers.helpers import wait_for_execution, wait_until

pytestmark = [pytest.mark.anyio]

ORDER = "ORD-1004"
ANNOUNCED = ["draft.proposed", "draft.approved", "execution.succeeded"]


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {
        "webhook_max_attempts": 3,
        "webhook_retry_base_seconds": 0.2,
        "webhook_retry_max_seconds": 1.0,
        "webhook_timeout_seconds": 1.0,
        "republish_after_seconds": 1,
        "api_public_url": "https://draftgate.example",
        "webhook_allow_private_addresses": True,  # the receiver listens on 127.0.0.1
    }


@contextmanager
def beat(stack: Any) -> Iterator[None]:
    """Run the webhook sweep every 0.1 s, as beat would every webhook_sweep_interval_seconds."""
    publish = celery_publisher(stack.settings)
    stop = threading.Event()

    def sweep() -> None:
        while not stop.is_set():
            publish_due(stack.runtime.engine, publish, republish_after=1)
            stop.wait(0.1)

    thread = threading.Thread(target=sweep, name="test-beat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def add_endpoint(stack: Any, url: str) -> dict[str, Any]:
    response = httpx.post(
        f"{stack.api_url}/v1/webhooks",
        json={"url": url, "events": list(EVENT_TYPES)},
        headers=bearer(stack.demo["tokens"]["admin"]),
        timeout=30,
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def propose_over_mcp(stack: Any, amount_minor: int = 1_500) -> str:
    async with connect(stack.mcp_url, stack.demo["tokens"]["agent"]) as agent:
        result = await agent.call_tool(
            "propose_refund",
            {
                "order_id": ORDER,
                "amount": {"amount_minor": amount_minor, "currency": "USD"},
                "reason": "damaged",
            },
        )
    assert not result.is_error, result.content
    return str(result.structured_content["draft_id"])


def approve_and_execute(stack: Any, draft_id: str) -> dict[str, Any]:
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    accepted = httpx.post(
        f"{stack.api_url}/v1/drafts/{draft_id}/execute",
        headers=bearer(stack.demo["tokens"]["approver_alice"]),
        timeout=60,
    )
    assert accepted.status_code == 202, accepted.text
    return wait_for_execution(stack, accepted.json()["execution_id"])


def deliveries(stack: Any) -> list[WebhookDelivery]:
    with session_scope(stack.runtime.engine) as session:
        return list(session.exec(select(WebhookDelivery)).all())


def audit_types(stack: Any, prefix: str) -> list[str]:
    with session_scope(stack.runtime.engine) as session:
        statement = select(AuditEvent.type).where(col(AuditEvent.type).startswith(prefix))
        return list(session.exec(statement.order_by(col(AuditEvent.seq))).all())


def all_final(stack: Any) -> bool:
    found = deliveries(stack)
    return bool(found) and all(d.status is not DeliveryStatus.PENDING for d in found)


def worker_log(stack: Any) -> str:
    return stack.worker.output()[-3000:] if stack.worker else ""


async def test_a_full_flow_reaches_a_real_receiver_once_per_event(stack):
    # The first attempt fails: the worker retries it after its backoff.
    with receiving(["fail", "ok"]) as receiver, beat(stack):
        endpoint = add_endpoint(stack, receiver.url)
        receiver.secret = endpoint["secret"]
        draft_id = await propose_over_mcp(stack)
        execution = approve_and_execute(stack, draft_id)
        wait_until(lambda: all_final(stack) and len(deliveries(stack)) == 3, 90, worker_log(stack))

    assert execution["status"] == "succeeded"
    events = sorted(receiver.verified_events(), key=lambda e: e["data"]["audit_seq"])
    assert [e["type"] for e in events] == ANNOUNCED
    assert receiver.count() > len(events)  # retries arrived, deduplicated by webhook-id
    assert all(a.verified for a in receiver.arrivals)
    assert {d.status for d in deliveries(stack)} == {DeliveryStatus.DELIVERED}
    assert all(e["data"]["draft_id"] == draft_id for e in events)
    assert events[2]["data"]["execution_id"] == execution["execution_id"]
    assert events[0]["data"]["url"] == f"https://draftgate.example/console/drafts/{draft_id}"
    received = receiver.all_bytes()
    for private in (b"damaged", b"1500", b"USD", ORDER.encode(), b"support-agent"):
        assert private not in received
    assert audit_types(stack, "webhook.").count("webhook.delivered") == 3
    logged = stack.worker.output()
    assert "webhook delivery" in logged  # the worker did log its deliveries
    assert endpoint["secret"].removeprefix("whsec_") not in logged
    assert "/hooks/draftgate" not in logged  # nor the URL, whose path may be a credential


async def test_an_unreachable_receiver_is_retried_then_failed_and_the_flow_is_unaffected(stack):
    with beat(stack):
        add_endpoint(stack, refused_url())
        draft_id = await propose_over_mcp(stack)
        execution = approve_and_execute(stack, draft_id)
        wait_until(lambda: all_final(stack) and len(deliveries(stack)) == 3, 90, worker_log(stack))

    assert execution["status"] == "succeeded"
    found = deliveries(stack)
    assert {d.status for d in found} == {DeliveryStatus.FAILED}
    assert {d.attempts for d in found} == {3}
    types = audit_types(stack, "webhook.")
    assert types.count("webhook.retry_scheduled") == 6
    assert types.count("webhook.failed") == 3


async def test_a_slow_receiver_times_out_without_holding_up_the_flow(stack):
    with receiving("slow", delay=5) as receiver, beat(stack):
        endpoint = add_endpoint(stack, receiver.url)
        receiver.secret = endpoint["secret"]
        draft_id = await propose_over_mcp(stack)
        execution = approve_and_execute(stack, draft_id)
        wait_until(lambda: all_final(stack) and len(deliveries(stack)) == 3, 120, worker_log(stack))

    assert execution["status"] == "succeeded"
    found = deliveries(stack)
    assert {d.status for d in found} == {DeliveryStatus.FAILED}
    assert {d.last_error for d in found} == {"ReadTimeout"}


async def test_a_test_ping_goes_through_the_api_publisher_and_the_worker(stack):
    with receiving() as receiver:  # no beat: the API publishes the ping after its commit
        endpoint = add_endpoint(stack, receiver.url)
        receiver.secret = endpoint["secret"]
        queued = httpx.post(
            f"{stack.api_url}/v1/webhooks/{endpoint['endpoint_id']}/test",
            headers=bearer(stack.demo["tokens"]["admin"]),
            timeout=30,
        )
        assert queued.status_code == 202, queued.text
        wait_until(receiver.verified_events, 60, worker_log(stack))
        log = _deliveries_log(stack, endpoint["endpoint_id"])

    (ping,) = receiver.verified_events()
    assert ping["type"] == "webhook.test"
    assert receiver.arrivals[0].headers["webhook-id"] == queued.json()["delivery_id"]
    (entry,) = log["deliveries"]
    assert entry["attempts"][0]["status_code"] == 204


def _deliveries_log(stack: Any, endpoint_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        response = httpx.get(
            f"{stack.api_url}/v1/webhooks/{endpoint_id}/deliveries",
            headers=bearer(stack.demo["tokens"]["admin"]),
            timeout=30,
        )
        body: dict[str, Any] = response.json()
        if body["deliveries"] and body["deliveries"][0]["status"] == "delivered":
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.05)
