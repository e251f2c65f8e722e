"""Refusals over real streamable HTTP: hostile or malformed arguments (DESIGN.md §3, input
hardening) and business rules (§2). Each refusal is a structured error and writes nothing but
its own `tool.refused` audit event.

Refusals do not depend on the database: every test runs on SQLite, on one MCP server for the
module (tests/support/mcp_helpers.py), with the database emptied and the demo seeded per test.
The core's transaction and idempotency semantics are tested on both backends in
tests/service/drafts/."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlmodel import col, func, select

from service.audit.models import AuditEvent
from service.db import session_scope
from service.drafts.models import Draft, DraftRevision, IdempotencyKey
from service.shop.models import AddressChange, Cancellation, Order, Refund
from tests.support.mcp_client import connect, error_of
from tests.support.mcp_helpers import module_host_fixtures

pytestmark = pytest.mark.anyio

mcp_hosts, module_host, demo, runtime, mcp_url = module_host_fixtures()

ORDER_ID_PATTERN = "^ORD-[0-9]{4,20}$"
DELIVERED = "ORD-1004"  # the demo's delivered USD order, total 785.00 USD
PAID = "ORD-1002"
WRITTEN_TABLES = (Draft, DraftRevision, IdempotencyKey, Refund, Cancellation, AddressChange)
REFUND = {
    "order_id": DELIVERED,
    "amount": {"amount_minor": 1250, "currency": "USD"},
    "reason": "damaged",
}
ADDRESS = {
    "recipient": "Charles Babbage",
    "lines": ["1 Dorset Street"],
    "district": "Marylebone",
    "city": "London",
    "postal_code": "W1U 4EG",
    "country": "GB",
}


def _refund(**changes: Any) -> dict[str, Any]:
    return {**REFUND, **changes}


def _amount(amount_minor: Any, currency: str = "USD") -> dict[str, Any]:
    return _refund(amount={"amount_minor": amount_minor, "currency": currency})


def _nested(levels: int) -> Any:
    value: Any = "deep"
    for _ in range(levels):
        value = {"a": value}
    return value


def row_counts(runtime) -> dict[str, int]:
    with session_scope(runtime.engine) as session:
        return {
            model.__tablename__: session.exec(select(func.count()).select_from(model)).one()
            for model in WRITTEN_TABLES
        }


def last_event_id(runtime) -> int:
    with session_scope(runtime.engine) as session:
        return session.exec(select(func.max(AuditEvent.id))).one() or 0


def events_after(runtime, event_id: int) -> list[AuditEvent]:
    with session_scope(runtime.engine) as session:
        statement = select(AuditEvent).where(col(AuditEvent.id) > event_id)
        return list(session.exec(statement.order_by(col(AuditEvent.id))).all())


async def refused_call(
    mcp_url: str, runtime, token: str, tool: str, arguments: dict[str, Any]
) -> tuple[dict[str, Any], AuditEvent]:
    """Call a tool that must be refused on a client of its own (see ``refused_on``)."""
    async with connect(mcp_url, token) as client:
        return await refused_on(client, runtime, tool, arguments)


async def refused_on(
    client, runtime, tool: str, arguments: dict[str, Any]
) -> tuple[dict[str, Any], AuditEvent]:
    """Call a tool that must be refused; check nothing but one `tool.refused` event was written."""
    counts, last_id = row_counts(runtime), last_event_id(runtime)
    result = await client.call_tool(tool, arguments)
    error = error_of(result)
    assert result.structured_content is None
    assert row_counts(runtime) == counts
    events = events_after(runtime, last_id)
    assert [event.type for event in events] == ["tool.refused"], [e.type for e in events]
    event = events[0]
    assert event.tenant == "demo"
    assert event.actor == "agent:support-agent"
    assert event.data["tool"] == tool
    assert event.data["outcome"] == "refused"
    assert event.data["error"]["code"] == error["code"]
    assert event.data["error"]["message"] == error["message"]
    assert event.data["argument_names"] == sorted(arguments)
    assert isinstance(event.data["latency_us"], int)
    return error, event


def assert_invalid(error: dict[str, Any], *fragments: str) -> None:
    assert error["code"] == "INVALID_ARGUMENT"
    assert error["category"] == "invalid_argument"
    assert error["retryable"] is False
    assert error["suggested_action"]
    for fragment in fragments:
        assert fragment in error["message"], (fragment, error["message"])


# --- input hardening ------------------------------------------------------------------------


async def test_the_base_arguments_of_these_cases_are_accepted(mcp_url, demo):
    # Control: each case below breaks exactly one thing in otherwise valid arguments.
    assert demo["orders"]["delivered"] == DELIVERED
    assert demo["orders"]["paid"] == PAID
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        refund = await client.call_tool("propose_refund", _refund(note="ok", idempotency_key="k"))
        readdress = await client.call_tool(
            "propose_change_shipping_address", {"order_id": PAID, "address": ADDRESS}
        )
        listed = await client.call_tool("list_orders", {"limit": 20})
    assert not refund.is_error, refund.content
    assert not readdress.is_error, readdress.content
    assert not listed.is_error, listed.content


BAD_INPUT = [
    pytest.param(
        "get_order", {"order_id": "1004"}, [ORDER_ID_PATTERN, "order_id"], id="order-id-no-prefix"
    ),
    pytest.param(
        "get_order", {"order_id": "ord-1004"}, [ORDER_ID_PATTERN], id="order-id-lower-case"
    ),
    pytest.param(
        "get_order", {"order_id": "ORD-1004\n"}, [ORDER_ID_PATTERN], id="order-id-trailing-newline"
    ),
    pytest.param(
        "propose_refund", _refund(order_id="ORD-12"), [ORDER_ID_PATTERN], id="order-id-too-short"
    ),
    pytest.param(
        "get_order",
        {"order_id": "ORD-1004", "tenant_id": "shop-b"},
        ["tenant_id", "unknown field"],
        id="unknown-top-level-field-read",
    ),
    pytest.param(
        "propose_refund",
        _refund(tenant_id="shop-b"),
        ["tenant_id", "unknown field"],
        id="unknown-top-level-field-propose",
    ),
    pytest.param(
        "propose_refund",
        _refund(amount={"amount_minor": 1250, "currency": "USD", "fx_rate": 1}),
        ["amount.fx_rate", "unknown field"],
        id="unknown-field-in-amount",
    ),
    pytest.param(
        "propose_change_shipping_address",
        {"order_id": PAID, "address": {**ADDRESS, "floor": "3"}},
        ["address.floor", "unknown field"],
        id="unknown-field-in-address",
    ),
    pytest.param("propose_refund", _amount(True), ["amount.amount_minor", "integer"], id="bool"),
    pytest.param("propose_refund", _amount(12.5), ["amount.amount_minor", "integer"], id="float"),
    pytest.param(
        "propose_refund", _amount(12.0), ["amount.amount_minor", "integer"], id="integral-float"
    ),
    pytest.param(
        "propose_refund", _amount("1250"), ["amount.amount_minor", "integer"], id="string"
    ),
    pytest.param(
        "propose_refund",
        _amount(10.5),
        ["amount.amount_minor", "integer"],
        id="fractional-minor-units",
    ),
    pytest.param("propose_refund", _amount(0), ["amount.amount_minor", "1"], id="zero"),
    pytest.param("propose_refund", _amount(-1250), ["amount.amount_minor", "1"], id="negative"),
    pytest.param(
        "propose_refund", _amount(2**53), ["amount.amount_minor", str(2**53 - 1)], id="2^53"
    ),
    pytest.param(
        "propose_refund", _amount(10**30), ["amount.amount_minor", str(2**53 - 1)], id="10^30"
    ),
    pytest.param(
        "propose_refund", _refund(amount="12.50 USD"), ["amount"], id="amount-not-an-object"
    ),
    pytest.param(
        "propose_refund",
        _refund(amount={"amount_minor": 1250}),
        ["amount.currency", "required"],
        id="currency-missing",
    ),
    pytest.param("propose_refund", _amount(1250, "ZZZ"), ["ZZZ", "ISO 4217"], id="currency-ZZZ"),
    pytest.param("propose_refund", _amount(1250, "XXX"), ["XXX", "currency"], id="currency-XXX"),
    pytest.param(
        "propose_refund", _amount(1250, "usd"), ["amount.currency", "^[A-Z]{3}$"], id="lower-case"
    ),
    pytest.param("propose_refund", _refund(note="n" * 501), ["note", "500"], id="note-501-chars"),
    pytest.param("propose_refund", _refund(note=""), ["note", "at least 1"], id="note-empty"),
    pytest.param(
        "propose_refund",
        _refund(idempotency_key="k" * 256),
        ["idempotency_key", r"^[\x20-\x7E]{1,255}$"],
        id="key-256-chars",
    ),
    pytest.param(
        "propose_refund",
        _refund(idempotency_key="ticket\x07-4711"),
        ["idempotency_key", r"[\x20-\x7E]"],
        id="key-non-printable",
    ),
    pytest.param(
        "propose_refund",
        _refund(idempotency_key="ticket-4711\n"),
        ["idempotency_key"],
        id="key-trailing-newline",
    ),
    pytest.param(
        "propose_refund",
        _refund(idempotency_key="tïcket-4711"),
        ["idempotency_key"],
        id="key-non-ascii",
    ),
    pytest.param(
        "propose_refund", _refund(draft_id="dft_nope"), ["draft_id"], id="draft-id-malformed"
    ),
    pytest.param(
        "propose_change_shipping_address",
        {"order_id": PAID, "address": {**ADDRESS, "lines": ["a", "b", "c", "d"]}},
        ["address.lines", "3"],
        id="four-address-lines",
    ),
    pytest.param(
        "propose_change_shipping_address",
        {"order_id": PAID, "address": {**ADDRESS, "lines": []}},
        ["address.lines"],
        id="no-address-lines",
    ),
    pytest.param(
        "propose_change_shipping_address",
        {"order_id": PAID, "address": {**ADDRESS, "country": "gb"}},
        ["address.country"],
        id="country-lower-case",
    ),
    pytest.param(
        "propose_refund", _refund(amount=_nested(50)), ["nested too deeply"], id="nested-50-levels"
    ),
    pytest.param(
        # Deeper than the body guard used to allow (64): still a tool error, not -32603.
        "propose_refund",
        _refund(amount=_nested(110)),
        ["nested too deeply"],
        id="nested-110-levels",
    ),
    pytest.param(
        "propose_change_shipping_address",
        {"order_id": PAID, "address": {**ADDRESS, "lines": [[[[[["x"]]]]]]}},
        ["nested too deeply"],
        id="nested-lists",
    ),
    pytest.param(
        "propose_refund", _refund(note="n" * 20_000), ["too large", "16384"], id="oversized"
    ),
    pytest.param("get_order", {"order_id": None}, ["null", "order_id"], id="null-required-field"),
    pytest.param("get_order", {}, ["order_id", "required"], id="missing-required-field"),
    pytest.param(
        "propose_refund", _refund(reason="because"), ["reason", "damaged"], id="refund-reason"
    ),
    pytest.param(
        "propose_cancel_order",
        {"order_id": PAID, "reason": "CUSTOMER_REQUEST"},
        ["reason", "customer_request"],
        id="cancel-reason",
    ),
    pytest.param("list_orders", {"limit": 0}, ["limit", "1"], id="limit-0"),
    pytest.param("list_orders", {"limit": 21}, ["limit", "20"], id="limit-21"),
    pytest.param("list_orders", {"limit": "5"}, ["limit", "integer"], id="limit-string"),
    pytest.param("get_draft", {"draft_id": "1"}, ["draft_id"], id="get-draft-malformed-id"),
]


NULL_MEANS_OMITTED = [
    pytest.param("propose_refund", _refund(note=None), id="null-optional-field"),
    pytest.param("propose_refund", _refund(idempotency_key=None, draft_id=None), id="null-control"),
    pytest.param(
        "propose_change_shipping_address",
        {"order_id": PAID, "address": {**ADDRESS, "phone": None}},
        id="null-nested-optional-field",
    ),
    pytest.param("list_orders", {"limit": None}, id="null-limit"),
]


@pytest.mark.parametrize(("tool", "arguments"), NULL_MEANS_OMITTED)
async def test_null_for_an_optional_field_is_the_same_call_as_omitting_it(
    mcp_url, demo, tool, arguments
):
    """DESIGN.md §3 (strict-mode clients send every field): null means exactly omitted."""
    omitted = {k: v for k, v in arguments.items() if v is not None}
    if isinstance(omitted.get("address"), dict):
        omitted["address"] = {k: v for k, v in omitted["address"].items() if v is not None}
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        with_nulls = await client.call_tool(tool, arguments)
        without = await client.call_tool(tool, omitted)
    assert not with_nulls.is_error, with_nulls.content
    assert not without.is_error, without.content
    if tool.startswith("propose_"):
        # the identical open proposal: one draft, the same params digest
        first, second = with_nulls.structured_content, without.structured_content
        assert (second["draft_id"], second["replayed"]) == (first["draft_id"], True)
        assert second["params_sha256"] == first["params_sha256"]
    else:
        assert with_nulls.structured_content == without.structured_content


@pytest.mark.parametrize(("tool", "arguments", "fragments"), BAD_INPUT)
async def test_bad_input_is_refused_with_a_structured_error(
    mcp_url, runtime, demo, tool, arguments, fragments
):
    error, event = await refused_call(mcp_url, runtime, demo["tokens"]["agent"], tool, arguments)
    assert_invalid(error, *fragments)
    # The refusal records field names only: the values may be hostile or carry PII.
    recorded = json.dumps(event.data)
    for value in arguments.values():
        if isinstance(value, str) and len(value) > 4:
            assert json.dumps(value)[1:-1] not in recorded


async def test_bad_input_message_lists_every_problem(mcp_url, runtime, demo):
    arguments = _refund(order_id="ORD-1", reason="because", tenant_id="x")
    error, _ = await refused_call(
        mcp_url, runtime, demo["tokens"]["agent"], "propose_refund", arguments
    )
    assert_invalid(error, ORDER_ID_PATTERN, "reason", "tenant_id")
    assert len(error["details"]["problems"]) == 3


async def test_a_write_action_called_directly_gets_a_structured_error(mcp_url, runtime, demo):
    # DESIGN.md §6: every tool error is a structured object, also for a tool that does not exist.
    counts = row_counts(runtime)
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        result = await client.call_tool("refund", REFUND)
    assert result.is_error
    assert row_counts(runtime) == counts
    text = getattr(result.content[0], "text", "")
    assert text.startswith("{"), f"unstructured error text: {text!r}"
    error = json.loads(text)
    assert error["code"] == "UNKNOWN_TOOL"
    assert error["category"] == "invalid_argument"
    assert error["retryable"] is False


async def test_a_write_action_called_directly_is_audited(mcp_url, runtime, demo):
    # DESIGN.md §8: every refused attempt is audited; an agent trying the write itself is
    # exactly the attempt an auditor wants to see.
    last_id = last_event_id(runtime)
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        result = await client.call_tool("cancel_order", {"order_id": PAID, "reason": "x"})
    assert result.is_error
    events = events_after(runtime, last_id)
    assert [(event.type, event.data.get("tool")) for event in events] == [
        ("tool.refused", "cancel_order")
    ]


# --- business refusals ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "extra"),
    [
        pytest.param("get_order", {}, id="get_order"),
        pytest.param("get_logistics", {}, id="get_logistics"),
        pytest.param(
            "propose_refund",
            {"amount": {"amount_minor": 100, "currency": "USD"}, "reason": "damaged"},
            id="propose_refund",
        ),
        pytest.param("propose_cancel_order", {"reason": "customer_request"}, id="cancel"),
        pytest.param("propose_change_shipping_address", {"address": ADDRESS}, id="readdress"),
    ],
)
async def test_another_customers_order_and_a_missing_one_give_the_same_error(
    mcp_url, runtime, demo, tool, extra
):
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        other, _ = await refused_on(
            client, runtime, tool, {"order_id": demo["orders"]["other_customer"], **extra}
        )
        missing, _ = await refused_on(client, runtime, tool, {"order_id": "ORD-9999999", **extra})
    assert other == missing
    assert other["code"] == "ORDER_UNAVAILABLE"
    assert other["category"] == "unavailable"
    assert other["retryable"] is False
    assert demo["orders"]["other_customer"] not in json.dumps(other)


async def test_the_other_customer_sees_the_first_customers_order_as_unavailable(
    mcp_url, runtime, demo
):
    token = demo["tokens"]["agent_other_customer"]
    mine, _ = await refused_call(
        mcp_url, runtime, token, "get_order", {"order_id": demo["orders"]["delivered"]}
    )
    assert mine["code"] == "ORDER_UNAVAILABLE"


async def test_refund_above_the_refundable_amount(mcp_url, runtime, demo):
    arguments = _amount(78_501)
    arguments["order_id"] = demo["orders"]["delivered"]
    error, _ = await refused_call(
        mcp_url, runtime, demo["tokens"]["agent"], "propose_refund", arguments
    )
    assert error["code"] == "REFUND_EXCEEDS_REFUNDABLE"
    assert error["category"] == "precondition_failed"
    assert error["retryable"] is False
    assert "785.00 USD" in error["message"]
    assert "78500" in error["message"]
    assert error["details"]["max_amount_minor"] == 78_500
    assert error["details"]["currency"] == "USD"
    assert "785.00 USD" in error["suggested_action"]


async def test_refund_in_the_wrong_currency(mcp_url, runtime, demo):
    arguments = _amount(1250, "EUR")
    arguments["order_id"] = demo["orders"]["delivered"]
    error, _ = await refused_call(
        mcp_url, runtime, demo["tokens"]["agent"], "propose_refund", arguments
    )
    assert error["code"] == "CURRENCY_MISMATCH"
    assert error["category"] == "precondition_failed"
    assert error["retryable"] is False
    assert "USD" in error["message"]
    assert error["details"]["order_currency"] == "USD"


async def test_refund_after_the_window_closed(mcp_url, runtime, demo):
    arguments = _amount(100)
    arguments["order_id"] = demo["orders"]["delivered_long_ago"]
    error, _ = await refused_call(
        mcp_url, runtime, demo["tokens"]["agent"], "propose_refund", arguments
    )
    assert error["code"] == "REFUND_WINDOW_CLOSED"
    assert error["category"] == "precondition_failed"
    assert error["retryable"] is False
    assert error["details"] == {"days_since_delivery": 90, "window_days": 30}


async def test_refund_of_an_unpaid_order(mcp_url, runtime, demo):
    arguments = _amount(100)
    arguments["order_id"] = demo["orders"]["pending_payment"]
    error, _ = await refused_call(
        mcp_url, runtime, demo["tokens"]["agent"], "propose_refund", arguments
    )
    assert error["code"] == "ORDER_NOT_REFUNDABLE"
    assert error["category"] == "precondition_failed"


async def test_cancelling_a_shipped_order(mcp_url, runtime, demo):
    error, _ = await refused_call(
        mcp_url,
        runtime,
        demo["tokens"]["agent"],
        "propose_cancel_order",
        {"order_id": demo["orders"]["shipped"], "reason": "customer_request"},
    )
    assert error["code"] == "ORDER_NOT_CANCELLABLE"
    assert error["category"] == "precondition_failed"
    assert error["retryable"] is False
    assert "shipped" in error["message"]


async def test_changing_the_address_of_a_shipped_order(mcp_url, runtime, demo):
    error, event = await refused_call(
        mcp_url,
        runtime,
        demo["tokens"]["agent"],
        "propose_change_shipping_address",
        {"order_id": demo["orders"]["shipped"], "address": ADDRESS},
    )
    assert error["code"] == "ADDRESS_CHANGE_NOT_ALLOWED"
    assert error["category"] == "precondition_failed"
    assert error["retryable"] is False
    assert "Dorset Street" not in json.dumps(event.data)


async def test_an_idempotency_key_reused_with_other_arguments(mcp_url, runtime, demo):
    first = _refund(order_id=demo["orders"]["delivered"], idempotency_key="ticket-4711")
    second = {**first, "amount": {"amount_minor": 1300, "currency": "USD"}}
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        created = await client.call_tool("propose_refund", first)
        assert not created.is_error, created.content
        error, _ = await refused_on(client, runtime, "propose_refund", second)
    assert error["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert error["category"] == "conflict"
    assert error["retryable"] is False
    with session_scope(runtime.engine) as session:
        draft = session.exec(select(Draft)).one()
    assert draft.id == created.structured_content["draft_id"]
    assert draft.params["amount"]["amount_minor"] == 1250


async def test_revising_someone_elses_draft_or_an_unknown_one_gives_the_same_error(
    mcp_url, runtime, demo
):
    async with connect(mcp_url, demo["tokens"]["agent_other_customer"]) as client:
        theirs = await client.call_tool(
            "propose_refund", _refund(order_id=demo["orders"]["other_customer"])
        )
    assert not theirs.is_error, theirs.content
    revise = _refund(order_id=demo["orders"]["delivered"])
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        foreign, _ = await refused_on(
            client,
            runtime,
            "propose_refund",
            {**revise, "draft_id": theirs.structured_content["draft_id"]},
        )
        unknown, _ = await refused_on(
            client, runtime, "propose_refund", {**revise, "draft_id": "dft_" + "0" * 32}
        )
    assert foreign == unknown
    assert foreign["code"] == "DRAFT_UNAVAILABLE"
    assert foreign["category"] == "unavailable"


async def test_a_refused_proposal_leaves_its_idempotency_key_free(mcp_url, runtime, demo):
    # The key claim rolls back with the refusal, so a corrected retry may use the same key.
    key = "ticket-0815"
    too_much = _amount(999_999)
    too_much.update(order_id=demo["orders"]["delivered"], idempotency_key=key)
    corrected = {**too_much, "amount": {"amount_minor": 500, "currency": "USD"}}
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        error, _ = await refused_on(client, runtime, "propose_refund", too_much)
        assert error["code"] == "REFUND_EXCEEDS_REFUNDABLE"
        result = await client.call_tool("propose_refund", corrected)
    assert not result.is_error, result.content
    assert result.structured_content["replayed"] is False


async def test_the_shop_order_rows_are_untouched_by_refusals(mcp_url, runtime, demo):
    with session_scope(runtime.engine) as session:
        before = [o.model_dump() for o in session.exec(select(Order).order_by(col(Order.id))).all()]
    await refused_call(
        mcp_url,
        runtime,
        demo["tokens"]["agent"],
        "propose_cancel_order",
        {"order_id": demo["orders"]["delivered"], "reason": "customer_request"},
    )
    with session_scope(runtime.engine) as session:
        after = [o.model_dump() for o in session.exec(select(Order).order_by(col(Order.id))).all()]
    assert after == before
