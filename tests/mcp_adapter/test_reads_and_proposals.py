"""Reads and proposals over real streamable HTTP: what the agent sees (masked), the drafts it
records, trace ids, the audit trail of every call, and that no tool changes the shop.

The tests share one MCP server per module, backend and settings (tests/support/mcp_helpers.py),
with the database emptied and the demo seeded per test. Rendering, masking and trace ids run on
SQLite; ordering and dates as the database returns them, the audit chain and the untouched shop
rows run on PostgreSQL too."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from typing import Any

import pytest
import rfc8785
from sqlmodel import col, select

from service.audit import actions as audit
from service.audit.models import AuditEvent
from service.db import session_scope
from service.drafts.models import Draft, DraftRevision
from service.shop.models import AddressChange, Cancellation, Order, Refund
from tests.support.backends import both_backends
from tests.support.mcp_client import connect, error_of
from tests.support.mcp_helpers import module_host_fixtures

pytestmark = pytest.mark.anyio

mcp_hosts, module_host, demo, runtime, mcp_url = module_host_fixtures()

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
HEX32 = re.compile(r"^[0-9a-f]{32}$")
# The demo customer's real contact data, which must never reach the agent.
STREET, POSTAL_CODE, RECIPIENT, PHONE = (
    "12 St James's Square",
    "SW1Y 4JH",
    "Ada Lovelace",
    "+447700900123",
)
NEW_ADDRESS = {
    "recipient": "Charles Babbage",
    "lines": ["1 Dorset Street", "Flat 3"],
    "district": "Marylebone",
    "city": "London",
    "postal_code": "W1U 4EG",
    "country": "GB",
    "phone": "+447700900999",
}
NEW_ADDRESS_SECRETS = ("Charles Babbage", "1 Dorset Street", "Flat 3", "W1U 4EG", "+447700900999")
SLOW_CARRIER = {"shop_carrier_latency_ms": 300, "shop_carrier_timeout_ms": 100}


@pytest.fixture
def settings_overrides(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Settings for this module's server; a test may parametrize it indirectly."""
    return dict(getattr(request, "param", {}))


def _refund(order_id: str, amount_minor: int = 1250, **extra: Any) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
        **extra,
    }


def _result_text(result) -> str:
    """Everything a tool result shows the model: structured content and text blocks."""
    texts = [block.text for block in result.content if hasattr(block, "text")]
    return json.dumps(result.structured_content, ensure_ascii=False) + "\n".join(texts)


def _events(runtime, **filters: Any) -> list[AuditEvent]:
    with session_scope(runtime.engine) as session:
        statement = select(AuditEvent)
        for name, value in filters.items():
            statement = statement.where(getattr(AuditEvent, name) == value)
        return list(session.exec(statement.order_by(col(AuditEvent.id))).all())


def _drafts(runtime) -> list[Draft]:
    with session_scope(runtime.engine) as session:
        return list(session.exec(select(Draft).order_by(col(Draft.created_at))).all())


def _shop_state(runtime) -> dict[str, Any]:
    with session_scope(runtime.engine) as session:
        return {
            model.__tablename__: [row.model_dump() for row in session.exec(select(model)).all()]
            for model in (Order, Refund, Cancellation, AddressChange)
        }


# --- reads ----------------------------------------------------------------------------------


@both_backends
async def test_list_orders_shows_only_the_callers_orders_newest_first(mcp_url, demo):
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        default = await client.call_tool("list_orders", {})
        everything = await client.call_tool("list_orders", {"limit": 20})
        two = await client.call_tool("list_orders", {"limit": 2})
    listed = [order["order_id"] for order in everything.structured_content["orders"]]
    assert len(listed) == 7  # the demo customer has seven orders
    assert demo["orders"]["other_customer"] not in listed
    assert set(listed) >= {
        demo["orders"][key]
        for key in ("pending_payment", "paid", "shipped", "delivered", "delivered_long_ago")
    }
    placed = [
        datetime.fromisoformat(order["placed_at"])
        for order in everything.structured_content["orders"]
    ]
    assert placed == sorted(placed, reverse=True)
    assert [o["order_id"] for o in default.structured_content["orders"]] == listed[:5]
    assert [o["order_id"] for o in two.structured_content["orders"]] == listed[:2]
    assert "get_order" in everything.structured_content["next_action"]


async def test_list_orders_of_the_other_customer(mcp_url, demo):
    async with connect(mcp_url, demo["tokens"]["agent_other_customer"]) as client:
        result = await client.call_tool("list_orders", {"limit": 20})
    orders = result.structured_content["orders"]
    assert [order["order_id"] for order in orders] == [demo["orders"]["other_customer"]]
    assert orders[0]["total"] == {"amount_minor": 2999, "currency": "USD", "display": "29.99 USD"}
    assert orders[0]["item_count"] == 1


async def test_get_order_masks_phone_and_address(mcp_url, demo):
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        result = await client.call_tool("get_order", {"order_id": demo["orders"]["delivered"]})
    order = result.structured_content
    assert order["customer_phone"] == "+44******0123"
    address = order["shipping_address"]
    assert (address["district"], address["city"], address["country"]) == (
        "St James's",
        "London",
        "GB",
    )
    assert address["recipient"] == "***"
    assert address["lines"] == ["***"]
    assert address["postal_code"] == "***"
    assert address["phone"] == "+44******0123"
    shown = _result_text(result)
    for secret in (STREET, POSTAL_CODE, RECIPIENT, PHONE, "cust-ada@example.com"):
        assert secret not in shown
        assert json.dumps(secret)[1:-1] not in shown


@both_backends
async def test_get_order_shows_amounts_refundable_and_next_action(mcp_url, demo):
    orders = demo["orders"]
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        delivered = await client.call_tool("get_order", {"order_id": orders["delivered"]})
        long_ago = await client.call_tool("get_order", {"order_id": orders["delivered_long_ago"]})
        unpaid = await client.call_tool("get_order", {"order_id": orders["pending_payment"]})
    order = delivered.structured_content
    assert order["order_id"] == orders["delivered"]
    assert order["status"] == "delivered"
    assert order["total"] == {"amount_minor": 78500, "currency": "USD", "display": "785.00 USD"}
    assert order["refunded"]["amount_minor"] == 0
    assert order["refundable"] == order["total"]
    assert order["days_since_delivery"] == 3
    assert order["tracking_number"]
    assert sorted(item["sku"] for item in order["items"]) == ["CH-06", "LT-05"]
    assert "785.00 USD" in order["next_action"]
    assert "propose_refund" in order["next_action"]

    closed = long_ago.structured_content
    assert closed["days_since_delivery"] == 90
    assert closed["refundable"]["amount_minor"] == 0
    assert "propose_refund" not in closed["next_action"]

    pending = unpaid.structured_content
    assert pending["status"] == "pending_payment"
    assert pending["refundable"]["amount_minor"] == 0
    assert pending["tracking_number"] is None
    assert "propose_cancel_order" in pending["next_action"]


async def test_get_logistics_returns_tracking_events(mcp_url, demo):
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        result = await client.call_tool("get_logistics", {"order_id": demo["orders"]["delivered"]})
    assert not result.is_error, result.content
    logistics = result.structured_content
    assert logistics["order_id"] == demo["orders"]["delivered"]
    assert logistics["carrier"]
    assert logistics["tracking_number"]
    assert logistics["events"]
    for event in logistics["events"]:
        assert {"at", "status", "location", "description"} <= set(event)
    assert logistics["next_action"]


@pytest.mark.parametrize("settings_overrides", [SLOW_CARRIER], indirect=True)
async def test_a_slow_carrier_gives_a_retryable_upstream_timeout(mcp_url, runtime, demo):
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        result = await client.call_tool("get_logistics", {"order_id": demo["orders"]["shipped"]})
    error = error_of(result)
    assert error["code"] == "UPSTREAM_TIMEOUT"
    assert error["category"] == "transient"
    assert error["retryable"] is True
    assert "100 ms" in error["message"]
    assert error["details"] == {"timeout_ms": 100}
    assert "retry" in error["suggested_action"].lower()
    refused = _events(runtime, type="tool.refused")
    assert [event.data["error"]["code"] for event in refused] == ["UPSTREAM_TIMEOUT"]


@pytest.mark.parametrize("settings_overrides", [SLOW_CARRIER], indirect=True)
async def test_a_slow_carrier_does_not_affect_other_reads(mcp_url, demo):
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        result = await client.call_tool("get_order", {"order_id": demo["orders"]["shipped"]})
    assert not result.is_error
    assert result.structured_content["status"] == "shipped"


async def test_get_logistics_for_an_unshipped_order(mcp_url, demo):
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        result = await client.call_tool("get_logistics", {"order_id": demo["orders"]["paid"]})
    error = error_of(result)
    assert error["code"] == "ORDER_NOT_SHIPPED"
    assert error["category"] == "precondition_failed"
    assert error["retryable"] is False
    assert "paid" in error["message"]


# --- proposals ------------------------------------------------------------------------------


async def test_propose_refund_returns_a_pending_draft(mcp_url, runtime, demo):
    order_id = demo["orders"]["delivered"]
    arguments = _refund(order_id, note="Box arrived crushed", idempotency_key="ticket-4711")
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        result = await client.call_tool("propose_refund", arguments)
    assert not result.is_error, result.content
    draft = result.structured_content
    assert re.fullmatch(r"dft_[0-9a-f]{32}", draft["draft_id"])
    assert draft["action"] == "refund"
    assert draft["status"] == "proposed"
    assert draft["revision"] == 1
    assert draft["replayed"] is False
    assert draft["approvals"] == {"required": 1, "received": 0}
    assert draft["amount"] == {"amount_minor": 1250, "currency": "USD", "display": "12.50 USD"}
    assert "12.50 USD" in draft["summary"]
    assert order_id in draft["summary"]
    assert draft["draft_id"] in draft["message"]
    assert "Nothing has been executed" in draft["message"]
    assert "get_draft" in draft["next_action"]
    # params are the business arguments only (no control arguments), and no PII.
    assert draft["params"] == {
        "order_id": order_id,
        "amount": {"amount_minor": 1250, "currency": "USD"},
        "reason": "damaged",
        "note": "Box arrived crushed",
    }
    shown = _result_text(result)
    for secret in (STREET, POSTAL_CODE, RECIPIENT, PHONE):
        assert secret not in shown

    (row,) = _drafts(runtime)
    assert row.id == draft["draft_id"]
    assert row.params == draft["params"]
    assert row.idempotency_key == "ticket-4711"
    assert row.proposed_by == "support-agent"
    assert row.on_behalf_of == "cust-ada"
    # Anyone holding the params can recompute the digest an approver signs (DESIGN.md §3).
    expected = hashlib.sha256(rfc8785.dumps(draft["params"])).hexdigest()
    assert draft["params_sha256"] == row.params_sha256 == expected


async def test_a_large_refund_needs_two_approvals(mcp_url, demo):
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        result = await client.call_tool(
            "propose_refund", _refund(demo["orders"]["delivered"], 60_000)
        )
    draft = result.structured_content
    assert draft["approvals"] == {"required": 2, "received": 0}
    assert draft["risk"] == "high"
    assert "0 of 2" in draft["message"]


async def test_a_retry_with_the_same_key_returns_the_same_draft(mcp_url, runtime, demo):
    arguments = _refund(demo["orders"]["delivered"], idempotency_key="ticket-4711")
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        first = await client.call_tool("propose_refund", arguments)
        second = await client.call_tool("propose_refund", arguments)
    assert first.structured_content["replayed"] is False
    assert second.structured_content["replayed"] is True
    assert second.structured_content["draft_id"] == first.structured_content["draft_id"]
    assert len(_drafts(runtime)) == 1
    called = _events(runtime, type="tool.called")
    assert [event.data["replayed"] for event in called] == [False, True]


async def test_propose_cancel_order_returns_a_pending_draft(mcp_url, runtime, demo):
    order_id = demo["orders"]["paid"]
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        result = await client.call_tool(
            "propose_cancel_order", {"order_id": order_id, "reason": "customer_request"}
        )
    draft = result.structured_content
    assert draft["action"] == "cancel_order"
    assert draft["status"] == "proposed"
    assert draft["amount"] is None
    assert draft["params"] == {"order_id": order_id, "reason": "customer_request"}
    assert order_id in draft["summary"]
    assert [row.id for row in _drafts(runtime)] == [draft["draft_id"]]


async def test_propose_change_shipping_address_masks_the_new_address(mcp_url, runtime, demo):
    order_id = demo["orders"]["pending_payment"]
    arguments = {"order_id": order_id, "address": NEW_ADDRESS}
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        result = await client.call_tool("propose_change_shipping_address", arguments)
        status = await client.call_tool(
            "get_draft", {"draft_id": result.structured_content["draft_id"]}
        )
    draft = result.structured_content
    assert draft["status"] == "proposed"
    assert draft["params"]["order_id"] == order_id
    assert draft["params"]["address"] == {
        "recipient": "***",
        "lines": ["***"],
        "district": "Marylebone",
        "city": "London",
        "postal_code": "***",
        "country": "GB",
        "phone": "+44******0999",
    }
    assert "Marylebone" in draft["summary"]
    for shown in (_result_text(result), _result_text(status)):
        for secret in NEW_ADDRESS_SECRETS:
            assert secret not in shown, secret
    # The audit trail of the call is masked too ...
    events = _events(runtime, draft_id=draft["draft_id"])
    assert {event.type for event in events} == {"tool.called", "draft.proposed"}
    recorded = json.dumps([event.data for event in _events(runtime)], ensure_ascii=False)
    for secret in NEW_ADDRESS_SECRETS:
        assert secret not in recorded, secret
    # ... while the draft keeps the exact address for the approver to see and sign.
    (row,) = _drafts(runtime)
    assert row.params["address"] == NEW_ADDRESS


async def test_get_draft_returns_the_callers_draft(mcp_url, demo):
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        proposed = await client.call_tool("propose_refund", _refund(demo["orders"]["delivered"]))
        draft_id = proposed.structured_content["draft_id"]
        fetched = await client.call_tool("get_draft", {"draft_id": draft_id})
    assert not fetched.is_error, fetched.content
    draft = fetched.structured_content
    for field in ("draft_id", "action", "status", "revision", "params", "params_sha256"):
        assert draft[field] == proposed.structured_content[field], field
    assert draft["status"] == "proposed"
    assert draft["approvals"] == {"required": 1, "received": 0}
    assert draft["replayed"] is False
    assert draft["message"]
    assert draft["next_action"]


async def test_get_draft_of_another_customer_or_unknown_is_unavailable(mcp_url, demo):
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        proposed = await client.call_tool("propose_refund", _refund(demo["orders"]["delivered"]))
    draft_id = proposed.structured_content["draft_id"]
    async with connect(mcp_url, demo["tokens"]["agent_other_customer"]) as client:
        foreign = error_of(await client.call_tool("get_draft", {"draft_id": draft_id}))
        unknown = error_of(await client.call_tool("get_draft", {"draft_id": "dft_" + "0" * 32}))
    assert foreign == unknown
    assert foreign["code"] == "DRAFT_UNAVAILABLE"
    assert foreign["category"] == "unavailable"


# --- trace ids and the audit trail ----------------------------------------------------------


async def test_the_clients_traceparent_becomes_the_trace_id(mcp_url, runtime, demo):
    async with connect(mcp_url, demo["tokens"]["agent"], traceparent=TRACEPARENT) as client:
        read = await client.call_tool("get_order", {"order_id": demo["orders"]["delivered"]})
        proposed = await client.call_tool("propose_refund", _refund(demo["orders"]["delivered"]))
    assert not read.is_error
    draft_id = proposed.structured_content["draft_id"]
    (draft,) = _drafts(runtime)
    assert draft.trace_id == TRACE_ID
    assert proposed.structured_content["trace_id"] == TRACE_ID  # the agent can quote it
    with session_scope(runtime.engine) as session:
        revision = session.exec(select(DraftRevision)).one()
    assert revision.trace_id == TRACE_ID
    traced = _events(runtime, trace_id=TRACE_ID)
    assert [(event.type, event.draft_id) for event in traced] == [
        ("tool.called", None),
        ("draft.proposed", draft_id),
        ("tool.called", draft_id),
    ]


async def test_a_refused_call_carries_the_clients_trace_id(mcp_url, runtime, demo):
    async with connect(mcp_url, demo["tokens"]["agent"], traceparent=TRACEPARENT) as client:
        result = await client.call_tool("get_order", {"order_id": "ORD-9999999"})
    assert error_of(result)["code"] == "ORDER_UNAVAILABLE"
    assert [event.type for event in _events(runtime, trace_id=TRACE_ID)] == ["tool.refused"]


@pytest.mark.parametrize(
    "traceparent",
    [
        pytest.param(None, id="absent"),
        pytest.param("garbage", id="malformed"),
        pytest.param("00-" + "0" * 32 + "-00f067aa0ba902b7-01", id="all-zero-trace-id"),
        pytest.param("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", id="version-ff"),
    ],
)
async def test_without_a_valid_traceparent_a_trace_id_is_generated(
    mcp_url, runtime, demo, traceparent
):
    async with connect(mcp_url, demo["tokens"]["agent"], traceparent=traceparent) as client:
        await client.call_tool("get_order", {"order_id": demo["orders"]["delivered"]})
        proposed = await client.call_tool("propose_refund", _refund(demo["orders"]["delivered"]))
        draft_id = proposed.structured_content["draft_id"]
        fetched = await client.call_tool("get_draft", {"draft_id": draft_id})
    (draft,) = _drafts(runtime)
    assert draft.trace_id is not None
    assert HEX32.match(draft.trace_id)
    # The result names the proposal's trace, also when read later in another trace.
    assert proposed.structured_content["trace_id"] == draft.trace_id
    assert fetched.structured_content["trace_id"] == draft.trace_id
    assert draft.trace_id not in {TRACE_ID, "0" * 32}
    called = _events(runtime, type="tool.called")
    trace_ids = [event.trace_id for event in called]
    assert all(trace_id and HEX32.match(trace_id) for trace_id in trace_ids)
    assert len(set(trace_ids)) == 3  # each call is its own trace
    assert trace_ids[1] == draft.trace_id


@both_backends
async def test_every_tool_call_is_audited_with_latency_and_outcome(mcp_url, runtime, demo):
    orders = demo["orders"]
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        await client.call_tool("list_orders", {})
        await client.call_tool("get_order", {"order_id": orders["delivered"]})
        await client.call_tool("get_logistics", {"order_id": orders["shipped"]})
        proposed = await client.call_tool("propose_refund", _refund(orders["delivered"]))
        await client.call_tool("get_draft", {"draft_id": proposed.structured_content["draft_id"]})
        await client.call_tool(
            "propose_cancel_order", {"order_id": orders["paid"], "reason": "duplicate_order"}
        )
        await client.call_tool(
            "propose_change_shipping_address",
            {"order_id": orders["pending_payment"], "address": NEW_ADDRESS},
        )
    called = _events(runtime, type="tool.called")
    assert [event.data["tool"] for event in called] == [
        "list_orders",
        "get_order",
        "get_logistics",
        "propose_refund",
        "get_draft",
        "propose_cancel_order",
        "propose_change_shipping_address",
    ]
    for event in called:
        assert event.tenant == "demo"
        assert event.actor == "agent:support-agent"
        assert event.data["outcome"] == "ok"
        assert isinstance(event.data["latency_us"], int)
        assert event.data["latency_us"] >= 0
        assert HEX32.match(event.trace_id or "")
    assert called[1].data["arguments"] == {"order_id": orders["delivered"]}
    with session_scope(runtime.engine) as session:
        verification = audit.verify(session, "demo")
    assert verification.ok, verification.problem
    assert verification.first_bad_seq is None


@both_backends
async def test_the_audit_chain_verifies_after_reads_proposals_and_refusals(mcp_url, runtime, demo):
    orders = demo["orders"]
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        await client.call_tool("propose_refund", _refund(orders["delivered"], 10**6))
        await client.call_tool("get_order", {"order_id": "bad"})
        await client.call_tool("propose_refund", _refund(orders["delivered"]))
        await client.call_tool("get_logistics", {"order_id": orders["paid"]})
    async with connect(mcp_url, demo["tokens"]["agent_other_customer"]) as client:
        await client.call_tool("list_orders", {})
    types = [event.type for event in _events(runtime, tenant="demo")]
    assert types.count("tool.refused") == 3
    assert types.count("tool.called") == 2
    with session_scope(runtime.engine) as session:
        verification = audit.verify(session, "demo")
    assert verification.ok, verification.problem
    assert verification.events_checked == len(types)


# --- an agent can never change the shop -----------------------------------------------------


@both_backends
async def test_no_tool_call_changes_the_shop(mcp_url, runtime, demo):
    orders = demo["orders"]
    before = _shop_state(runtime)
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        calls: list[tuple[str, dict[str, Any]]] = [
            ("list_orders", {"limit": 20}),
            ("get_order", {"order_id": orders["paid"]}),
            ("get_logistics", {"order_id": orders["shipped"]}),
            ("propose_refund", _refund(orders["delivered"], 78_500, idempotency_key="all")),
            ("propose_refund", _refund(orders["delivered"], 78_500, idempotency_key="all")),
            ("propose_refund", _refund(orders["shipped"], 100)),
            ("propose_cancel_order", {"order_id": orders["paid"], "reason": "customer_request"}),
            (
                "propose_cancel_order",
                {"order_id": orders["pending_payment"], "reason": "payment_problem"},
            ),
            (
                "propose_change_shipping_address",
                {"order_id": orders["paid"], "address": NEW_ADDRESS},
            ),
        ]
        results = [await client.call_tool(name, arguments) for name, arguments in calls]
        draft_ids = {r.structured_content["draft_id"] for r in results[3:]}
        revised = await client.call_tool(
            "propose_refund",
            _refund(orders["shipped"], 200, draft_id=results[5].structured_content["draft_id"]),
        )
        results.append(revised)
        for draft_id in sorted(draft_ids):
            results.append(await client.call_tool("get_draft", {"draft_id": draft_id}))
    assert [r for r in results if r.is_error] == []
    assert revised.structured_content["revision"] == 2
    assert _shop_state(runtime) == before
    assert {draft.status for draft in _drafts(runtime)} == {"proposed"}
    assert len(_drafts(runtime)) == 5
