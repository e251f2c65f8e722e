"""The upstreams themselves: that they dedupe, journal and fail as the gateway tests assume.

A gateway test that counts ledger lines is only as good as the ledger; these tests pin it
with real clients over the real transports (the mcp SDK's stdio and streamable HTTP
clients, httpx against uvicorn, Node for the npm server).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, ToolListChangedNotification

from tests.gateway.upstreams.mcp_server import IDEMPOTENCY_META, TRANSIENT_ERROR_CODE
from tests.gateway.upstreams.processes import StdioCommand, UpstreamProcess

pytestmark = [pytest.mark.anyio]


@pytest.fixture
def upstream_mcp_options() -> dict[str, Any]:
    return {"slow_seconds": 0.2, "flaky_failures": 2}


@asynccontextmanager
async def stdio_session(command: StdioCommand, **client: Any) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=command.command, args=command.args, env=command.env)
    async with Client(stdio_client(params), **client) as session:
        yield session


@asynccontextmanager
async def http_session(upstream: UpstreamProcess, **client: Any) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30)) as http,
        Client(streamable_http_client(upstream.mcp_url, http_client=http), **client) as session,
    ):
        yield session


def keyed(key: str) -> dict[str, Any]:
    return {"meta": {IDEMPOTENCY_META: key}}


TICKET = {"title": "Refund not received", "priority": "high"}


# Starting the Python MCP server costs seconds on a loaded machine, so each test below
# checks several behaviours on one server process (each under its own keys).


async def test_writes_dedupe_on_the_key_and_replay_the_first_result(upstream_mcp_stdio_command):
    ledger = upstream_mcp_stdio_command.ledger
    credit = {"customer_id": "C-100", "amount_cents": 1250, "currency": "EUR", "reason": "late"}
    async with stdio_session(upstream_mcp_stdio_command) as session:
        first = await session.call_tool("create_ticket", TICKET, **keyed("d-1:1"))
        again = await session.call_tool("create_ticket", TICKET, **keyed("d-1:1"))
        other = await session.call_tool("create_ticket", TICKET, **keyed("d-1:2"))
        changed = await session.call_tool(
            "create_ticket", {**TICKET, "priority": "low"}, **keyed("d-1:1")
        )
        listed = await session.call_tool("list_tickets", {"status": "open"})
        # The key may come in an argument instead; a call without any key always applies.
        by_argument = await session.call_tool("issue_credit", {**credit, "request_id": "k-7"})
        by_argument_again = await session.call_tool("issue_credit", {**credit, "request_id": "k-7"})
        await session.call_tool("issue_credit", credit)
        await session.call_tool("issue_credit", credit)

    assert not first.is_error
    assert first.structured_content == again.structured_content
    assert first.structured_content["ticket_id"] == "T-2001"
    assert other.structured_content["ticket_id"] == "T-2002"
    assert changed.is_error
    assert "already used with other arguments" in text_of(changed)
    assert [(e["key"], e["key_source"]) for e in ledger.effects("create_ticket")] == [
        ("d-1:1", "meta"),
        ("d-1:2", "meta"),
    ]
    outcomes = [c["outcome"] for c in ledger.calls("create_ticket")]
    assert outcomes == ["applied", "replayed", "applied", "conflict"]
    # The desk's reads see its writes (its state is the ledger).
    assert {"T-2001", "T-2002"} <= {t["id"] for t in listed.structured_content["tickets"]}

    assert by_argument.structured_content == by_argument_again.structured_content
    assert by_argument.structured_content["amount_cents"] == 1250
    assert [(e["key"], e["key_source"]) for e in ledger.effects("issue_credit")] == [
        ("k-7", "argument"),
        (None, None),
        (None, None),
    ]


async def test_failures_transient_business_and_slow_and_the_traps(upstream_mcp_stdio_command):
    ledger = upstream_mcp_stdio_command.ledger
    async with stdio_session(upstream_mcp_stdio_command) as session:
        for _ in range(2):
            with pytest.raises(MCPError) as failure:
                await session.call_tool("flaky_write", {"note": "n"}, **keyed("f-1"))
            assert failure.value.code == TRANSIENT_ERROR_CODE
            assert ledger.effects() == []
        flaky = await session.call_tool("flaky_write", {"note": "n"}, **keyed("f-1"))
        flaky_replay = await session.call_tool("flaky_write", {"note": "n"}, **keyed("f-1"))
        with pytest.raises(MCPError):  # another key starts its own count
            await session.call_tool("flaky_write", {"note": "n"}, **keyed("f-2"))

        refused = await session.call_tool(
            "rejecting_write",
            {"customer_id": "C-100", "amount_cents": 500, "currency": "EUR"},
            **keyed("r-1"),
        )
        slow = await session.call_tool("slow_write", {"note": "slow"}, **keyed("s-1"))
        slow_replay = await session.call_tool("slow_write", {"note": "slow"}, **keyed("s-1"))
        slow_reused = await session.call_tool("slow_write", {"note": "other"}, **keyed("s-1"))
        missing = await session.call_tool("get_ticket", {"ticket_id": "T-9"})

        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        await session.call_tool("archive_ticket", {"ticket_id": "T-1001"}, **keyed("a-1"))
        ticket = await session.call_tool("get_ticket", {"ticket_id": "T-1001"})

    assert not flaky.is_error
    assert flaky_replay.structured_content == flaky.structured_content
    flaky_outcomes = [c["outcome"] for c in ledger.calls("flaky_write") if c["key"] == "f-1"]
    assert flaky_outcomes == ["transient", "transient", "applied", "replayed"]

    assert refused.is_error
    assert "over their credit limit" in text_of(refused)
    assert [(c["key"], c["outcome"]) for c in ledger.calls("rejecting_write")] == [
        ("r-1", "rejected")
    ]

    assert slow.structured_content == slow_replay.structured_content
    assert slow_reused.is_error
    slow_outcomes = [c["outcome"] for c in ledger.calls("slow_write")]
    assert slow_outcomes == ["started", "applied", "replayed", "conflict"]

    assert missing.is_error
    assert text_of(missing) == "Ticket T-9 does not exist."

    # The traps: a read-only hint on a write, and a destroyer no gateway file declares.
    archive, destroyer = (
        tools["archive_ticket"].annotations,
        tools["delete_all_tickets"].annotations,
    )
    assert archive is not None
    assert archive.read_only_hint is True
    assert destroyer is not None
    assert destroyer.destructive_hint is True
    # The hint lied: the ticket is archived and the ledger shows the effect.
    assert ticket.structured_content["status"] == "archived"
    # Reads carry what a gateway must mask.
    assert ticket.structured_content["customer_email"] == "ada@example.com"

    assert [e["scope"] for e in ledger.effects()] == ["flaky_write", "slow_write", "archive_ticket"]


async def test_two_processes_on_one_ledger_apply_a_key_once(upstream_mcp_stdio_command):
    # What a stdio upstream meets: every draftgate process (MCP door, each worker) starts
    # its own child, and a retried call may reach another one.
    ledger = upstream_mcp_stdio_command.ledger
    results: list[CallToolResult] = []

    async def call(session: Client) -> None:
        results.append(await session.call_tool("create_ticket", TICKET, **keyed("d-3:1")))

    async with AsyncExitStack() as stack:
        sessions = [
            await stack.enter_async_context(stdio_session(upstream_mcp_stdio_command))
            for _ in range(2)
        ]
        async with anyio.create_task_group() as group:
            for session in sessions:
                group.start_soon(call, session)

    assert len(ledger.effects()) == 1
    assert results[0].structured_content == results[1].structured_content
    assert len({c["pid"] for c in ledger.calls()}) == 2


async def test_over_http_a_legacy_client_dedupes_and_hears_tools_list_changed(upstream_mcp_http):
    announced = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            announced.set()

    async with http_session(upstream_mcp_http, mode="legacy", message_handler=on_message) as s:
        first = await s.call_tool("create_ticket", TICKET, **keyed("h-legacy"))
        again = await s.call_tool("create_ticket", TICKET, **keyed("h-legacy"))
        before = {tool.name for tool in (await s.list_tools()).tools}
        await s.call_tool("toggle_extra_tool", {})
        with anyio.fail_after(10):
            await announced.wait()
        after = {tool.name: tool for tool in (await s.list_tools()).tools}
        announced = anyio.Event()
        await s.call_tool("set_schema_version", {"version": 2})
        with anyio.fail_after(10):
            await announced.wait()
        evolved = {tool.name: tool for tool in (await s.list_tools()).tools}

    assert first.structured_content == again.structured_content
    assert [e["key"] for e in upstream_mcp_http.ledger.effects()] == ["h-legacy"]
    assert "extra_lookup" not in before
    assert "extra_lookup" in after
    assert "team" not in after["create_ticket"].input_schema["properties"]
    assert "team" in evolved["create_ticket"].input_schema["required"]


async def test_over_http_a_2026_client_dedupes_and_hears_the_change_on_its_listen_stream(
    upstream_mcp_http,
):
    async with http_session(upstream_mcp_http, mode="auto") as session:
        first = await session.call_tool("create_ticket", TICKET, **keyed("h-auto"))
        again = await session.call_tool("create_ticket", TICKET, **keyed("h-auto"))
        async with session.listen(tools_list_changed=True) as subscription:
            await session.call_tool("toggle_extra_tool", {})
            with anyio.fail_after(10):
                event = await subscription.__anext__()
        tools = {tool.name for tool in (await session.list_tools(cache_mode="refresh")).tools}

    assert first.structured_content == again.structured_content
    assert [e["key"] for e in upstream_mcp_http.ledger.effects()] == ["h-auto"]
    assert type(event).__name__ == "ToolsListChanged"
    assert "extra_lookup" in tools


def text_of(result: CallToolResult) -> str:
    return str(result.content[0].text)  # type: ignore[union-attr]


# --- the billing HTTP service ----------------------------------------------------------------

REFUND = {"amount": 2500, "currency": "EUR", "reason": "Damaged in transit"}


def refund(service, body: dict[str, Any], key: str | None, invoice: str = "INV-1001"):
    headers = service.headers() | ({"Idempotency-Key": key} if key else {})
    return httpx.post(
        f"{service.base_url}/invoices/{invoice}/refunds", json=body, headers=headers, timeout=10
    )


def test_http_a_refund_under_one_key_applies_once_and_answers_the_same(upstream_http):
    first = refund(upstream_http, REFUND, "d-9:1")
    again = refund(upstream_http, REFUND, "d-9:1")
    reused = refund(upstream_http, {**REFUND, "amount": 100}, "d-9:1")
    unkeyed = [refund(upstream_http, REFUND, None) for _ in range(2)]
    invoice = httpx.get(f"{upstream_http.base_url}/invoices/INV-1001", timeout=10).json()

    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    assert first.json()["refund_id"] == "RF-1"
    assert reused.status_code == 409
    assert "already used" in reused.json()["message"]
    assert [r.json()["refund_id"] for r in unkeyed] == ["RF-2", "RF-3"]
    assert [e["key"] for e in upstream_http.ledger.effects("create_refund")] == [
        "d-9:1",
        None,
        None,
    ]
    assert invoice["refunded_cents"] == 3 * 2500


def test_http_business_rules_answer_4xx_with_a_message_and_apply_nothing(upstream_http):
    too_much = refund(upstream_http, {**REFUND, "amount": 12001}, "k-1")
    wrong_currency = refund(upstream_http, {**REFUND, "currency": "USD"}, "k-2")
    not_paid = refund(upstream_http, {**REFUND, "currency": "USD"}, "k-3", invoice="INV-1003")
    missing = refund(upstream_http, REFUND, "k-4", invoice="INV-9")
    a_string = refund(upstream_http, {**REFUND, "amount": "2500"}, "k-5")
    unknown_field = refund(upstream_http, {**REFUND, "tenant": "other"}, "k-6")
    write_off = httpx.post(
        f"{upstream_http.base_url}/invoices/INV-1001/write-offs",
        json={"amount_cents": 100, "currency": "EUR", "reason": "bad debt"},
        headers={"Idempotency-Key": "w-1"},
        timeout=10,
    )

    statuses = [
        r.status_code
        for r in (too_much, wrong_currency, not_paid, missing, a_string, unknown_field, write_off)
    ]
    assert statuses == [422, 400, 409, 404, 422, 422, 422]
    assert too_much.json()["message"] == "Refund exceeds the refundable 12000 EUR."
    assert "finance team" in write_off.json()["message"]
    assert upstream_http.ledger.effects() == []


def test_http_reminders_answer_503_n_times_per_key_then_apply_once(upstream_http):
    url = f"{upstream_http.base_url}/invoices/INV-1003/reminders"

    def remind(key: str) -> httpx.Response:
        return httpx.post(
            url, json={"channel": "email"}, headers={"Idempotency-Key": key}, timeout=10
        )

    answers = [remind("m-1") for _ in range(4)]
    other = remind("m-2")

    assert [a.status_code for a in answers] == [503, 503, 201, 201]
    assert answers[0].headers["Retry-After"] == "1"
    assert answers[2].json() == answers[3].json()
    assert other.status_code == 503
    assert [e["key"] for e in upstream_http.ledger.effects()] == ["m-1"]


def test_http_reads_carry_extra_fields_and_the_openapi_document_names_every_operation(
    upstream_http,
):
    invoice = httpx.get(f"{upstream_http.base_url}/invoices/INV-1001", timeout=10)
    listed = httpx.get(f"{upstream_http.base_url}/invoices?status=open", timeout=10)
    document = httpx.get(upstream_http.openapi_url, timeout=10).json()

    assert invoice.json()["customer_email"] == "ada@example.com"
    assert invoice.json()["internal_notes"]
    assert [i["id"] for i in listed.json()["invoices"]] == ["INV-1003"]
    operations = {
        operation["operationId"]: (method.upper(), path)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }
    assert operations == {
        "list_invoices": ("GET", "/invoices"),
        "get_invoice": ("GET", "/invoices/{invoice_id}"),
        "create_refund": ("POST", "/invoices/{invoice_id}/refunds"),
        "send_reminder": ("POST", "/invoices/{invoice_id}/reminders"),
        "write_off_invoice": ("POST", "/invoices/{invoice_id}/write-offs"),
    }
    assert [c["scope"] for c in upstream_http.ledger.calls()] == ["get_invoice", "list_invoices"]


@pytest.mark.parametrize("upstream_http_options", [{"token": "billing-secret"}])
def test_http_with_a_token_every_route_wants_the_bearer(upstream_http):
    url = f"{upstream_http.base_url}/invoices/INV-1001"
    assert httpx.get(url, timeout=10).status_code == 401
    wrong = httpx.get(url, headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code == 401
    assert wrong.json() == {"message": "Missing or wrong bearer token."}
    assert httpx.get(url, headers=upstream_http.headers(), timeout=10).status_code == 200


# --- the third-party server from npm -------------------------------------------------------


@pytest.mark.full  # an npm upstream
async def test_the_npm_memory_server_runs_from_its_pinned_install(memory_server_command):
    params = StdioServerParameters(
        command=memory_server_command.command,
        args=memory_server_command.args,
        env=memory_server_command.env,
    )
    entity = {"name": "Ada", "entityType": "person", "observations": ["prefers email"]}
    async with Client(stdio_client(params)) as session:
        tools = {tool.name for tool in (await session.list_tools()).tools}
        await session.call_tool("create_entities", {"entities": [entity]}, **keyed("m-1"))
        graph = await session.call_tool("read_graph", {})

    assert {"read_graph", "search_nodes", "open_nodes", "create_entities"} <= tools
    assert {"add_observations", "delete_entities", "delete_observations"} <= tools
    assert graph.structured_content["entities"] == [entity]
    assert "prefers email" in memory_server_command.data_file.read_text()
    # The tap in front of it saw each call as sent, _meta included.
    [create] = memory_server_command.tool_calls("create_entities")
    assert create["message"]["params"]["arguments"] == {"entities": [entity]}
    assert create["message"]["params"]["_meta"][IDEMPOTENCY_META] == "m-1"
    assert [c["message"]["params"]["name"] for c in memory_server_command.tool_calls()] == [
        "create_entities",
        "read_graph",
    ]
