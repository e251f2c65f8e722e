"""The gateway end to end: an upstream MCP server (the SDK-written ticket desk, in its own
process over streamable HTTP, and as a stdio child of every draftgate process) behind
draftgate's MCP door, with a real MCP client as the agent, approvers over the HTTP API and
a real Celery worker making the upstream call. Each test runs on the embedded stack
(SQLite) and the production stack (PostgreSQL + Redis).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.approvals import approve
from service.api.publisher import celery_publisher
from service.audit import repository as audit_repository
from service.db import session_scope
from service.executions.sweeper import sweep
from service.gateway.mcp_client import pool
from service.sql import utcnow
from tests.gateway.helpers import draft_of, execute
from tests.gateway.upstreams.processes import (
    NodeCommand,
    UpstreamProcess,
    memory_server_command,
    start_mcp_http,
)
from tests.support.backends import postgresql_only
from tests.support.mcp_client import connect, error_of
from tests.workers.helpers import restart_worker, wait_for_execution, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.full]

SLOW_SECONDS = 2.0  # slow_write's wait before it applies: the window the worker is killed in
FLAKY_FAILURES = 2
# Short, so a killed attempt is taken over soon; the task's time limits (0.8 and 0.9 of it)
# must still leave the slow call time to finish, and the gateway refuses an upstream whose
# calls do not fit in them: an MCP write waits up to 2 x (timeout + 1 s) = 12 s, at most
# 90% of the soft limit (0.8 x 17 s).
LEASE_SECONDS = 17
TIMEOUT_SECONDS = 5
MEMORY_TOOLS: dict[str, Any] = {
    "read_graph": {"kind": "read", "mask": ["entities[*].observations"]},
    "search_nodes": {"kind": "read"},
    "create_entities": {
        "kind": "write",
        "summary": "Create {entities|count} entities in the knowledge graph, "
        "first {entities[0].name}",
        "risk": "low",
    },
}


def desk_tools() -> dict[str, Any]:
    return {
        "list_tickets": {"kind": "read"},
        "get_ticket": {"kind": "read", "mask": ["customer_email"]},
        "create_ticket": {"kind": "write", "summary": "Open ticket {title} ({priority})"},
        "issue_credit": {
            "kind": "write",
            "summary": "Credit {amount_cents|money:currency} to {customer_id}: {reason}",
            "risk": "high",
            "money": {"amount_minor": "amount_cents", "currency": "currency"},
            "idempotency_argument": "request_id",
        },
        "slow_write": {"kind": "write", "summary": "Record the note {note}"},
        "flaky_write": {"kind": "write", "summary": "Record the note {note}"},
        "rejecting_write": {
            "kind": "write",
            "summary": "Open a credit line of {amount_cents|money:currency} for {customer_id}",
            "money": {"amount_minor": "amount_cents", "currency": "currency"},
        },
        # The upstream says read-only; it archives. Declared as the write it is.
        "archive_ticket": {"kind": "write", "summary": "Archive ticket {ticket_id}"},
    }


@pytest.fixture(scope="module")
def upstream_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("upstreams")


@pytest.fixture(scope="module")
def desk_http(upstream_root: Path) -> Iterator[UpstreamProcess]:
    upstream = start_mcp_http(
        upstream_root / "http", slow_seconds=SLOW_SECONDS, flaky_failures=FLAKY_FAILURES
    )
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def memory(upstream_root: Path) -> NodeCommand:
    """npm's @modelcontextprotocol/server-memory, a stdio child of every draftgate process."""
    return memory_server_command(upstream_root / "memory")


@pytest.fixture(scope="module")
def gateway_file(upstream_root: Path, desk_http: UpstreamProcess, memory: NodeCommand) -> Path:
    declaration = {
        "version": 1,
        "mcp": [
            {
                "namespace": "desk",
                "transport": "http",
                "url": desk_http.mcp_url,
                "timeout_seconds": TIMEOUT_SECONDS,
                "tools": desk_tools(),
            },
            {**memory.gateway_entry("memory", MEMORY_TOOLS), "timeout_seconds": TIMEOUT_SECONDS},
        ],
    }
    path = upstream_root / "gateway.yaml"
    path.write_text(yaml.safe_dump(declaration, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module", autouse=True)
def upstream_connections(desk_http: UpstreamProcess) -> Iterator[None]:
    """This process's connections to the upstreams, closed before the upstream stops (an
    open stream would keep its server waiting)."""
    yield
    pool().close()


@pytest.fixture
def settings_overrides(gateway_file: Path) -> dict[str, Any]:
    from service.config import DEFAULT_POLICIES

    tiers = {"EUR": [{"up_to": "100.00", "approvals": 1}, {"approvals": 2}]}
    return {
        "gateway_file": gateway_file,
        "policies": {
            **DEFAULT_POLICIES,
            "desk_issue_credit": {"tiers": tiers},
        },
        "execution_lease_seconds": LEASE_SECONDS,
        "republish_after_seconds": 1,
    }


def with_key(entries: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [entry for entry in entries if entry["key"] == key]


async def propose(stack: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    async with connect(stack.mcp_url, stack.demo["tokens"]["agent"]) as agent:
        result = await agent.call_tool(tool, arguments)
    assert not result.is_error, result.content
    proposed: dict[str, Any] = result.structured_content
    return proposed


# --- what the agent sees -------------------------------------------------------------------


async def test_reads_are_tools_writes_only_proposals_and_the_shop_is_still_there(stack):
    async with connect(stack.mcp_url, stack.demo["tokens"]["agent"]) as agent:
        tools = {tool.name: tool for tool in (await agent.list_tools()).tools}
    assert tools["desk_list_tickets"].annotations.read_only_hint is True
    assert "desk_get_ticket" in tools
    for write in ("create_ticket", "issue_credit", "archive_ticket"):
        assert f"propose_desk_{write}" in tools
        assert f"desk_{write}" not in tools
    assert {"memory_read_graph", "memory_search_nodes", "propose_memory_create_entities"} <= set(
        tools
    )
    # Undeclared upstream tools are not exposed in any form.
    assert not [name for name in tools if "delete_all_tickets" in name]
    assert not [name for name in tools if "delete_entities" in name]
    for shop in ("list_orders", "get_order", "propose_refund", "get_draft"):
        assert shop in tools
    # ... and it works as before, beside the gateway's tools.
    refund = {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": 1500, "currency": "USD"},
        "reason": "damaged",
    }
    proposed = await propose(stack, "propose_refund", refund)
    assert draft_of(stack, proposed["draft_id"])["summary"].startswith("Refund 15.00 USD")
    credit = tools["propose_desk_issue_credit"].input_schema
    assert credit["additionalProperties"] is False
    assert "idempotency_key" in credit["properties"]
    # The idempotency argument is draftgate's to fill in, never the agent's.
    assert "request_id" not in credit["properties"]
    assert credit["properties"]["customer_id"]["pattern"] == "^C-[0-9]{1,10}$"
    assert "a human must approve" in tools["propose_desk_issue_credit"].description


async def test_a_read_is_proxied_with_declared_fields_masked_and_audited(stack):
    async with connect(stack.mcp_url, stack.demo["tokens"]["agent"]) as agent:
        result = await agent.call_tool("desk_get_ticket", {"ticket_id": "T-1001"})
        missing = await agent.call_tool("desk_get_ticket", {"ticket_id": "T-9999"})
        bad = await agent.call_tool("desk_get_ticket", {"ticket_id": "1001"})
    assert not result.is_error, result.content
    data = result.structured_content["data"]
    assert data["title"] == "Printer on fire"
    assert data["customer_email"] == "***"
    assert "ada@example.com" not in json.dumps(result.structured_content)
    assert error_of(missing)["code"] == "UPSTREAM_REFUSED"
    assert "T-9999 does not exist" in error_of(missing)["message"]
    assert error_of(missing)["retryable"] is False
    # The pattern is enforced by draftgate: the upstream never sees the call.
    assert error_of(bad)["code"] == "INVALID_ARGUMENT"
    with session_scope(stack.runtime.engine) as session:
        events = audit_repository.events_for(session, "demo", type_="tool.called")
    called = [e for e in events if e.data["tool"] == "desk_get_ticket"]
    assert called
    assert called[-1].data["arguments"] == {"ticket_id": "T-1001"}


# --- writes ------------------------------------------------------------------------------


async def test_an_approved_write_calls_the_upstream_once_with_the_key(stack, desk_http):
    ledger = desk_http.ledger
    reason = f"goodwill {time.monotonic_ns()}"
    arguments = {
        "customer_id": "C-100",
        "amount_cents": 1250,
        "currency": "EUR",
        "reason": reason,
        "idempotency_key": None,  # a strict-mode client sends null for what it does not use
        "draft_id": None,
    }
    proposed = await propose(stack, "propose_desk_issue_credit", arguments)
    draft_id = proposed["draft_id"]
    assert proposed["status"] == "proposed"
    draft = draft_of(stack, draft_id)
    assert draft["summary"] == f"Credit 12.50 EUR to C-100: {reason}"
    assert draft["amount"]["amount_minor"] == 1250
    assert draft["risk"] == "high"
    assert draft["action"] == "desk_issue_credit"
    key = f"{draft_id}:1"
    assert with_key(ledger.calls("issue_credit"), key) == []  # a proposal changes nothing

    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    execution_id = execute(stack, draft_id)
    execution = wait_for_execution(stack, execution_id)
    assert execution["status"] == "succeeded", stack.worker.output()[-3000:]
    [effect] = with_key(ledger.effects("issue_credit"), key)
    assert effect["request_id"] == key  # the declared argument carries the key too
    [call] = with_key(ledger.calls("issue_credit"), key)
    assert (call["outcome"], call["key_source"]) == ("applied", "meta")
    assert execution["outcome"]["result"]["credit_id"] == effect["result"]["credit_id"]
    assert execution["outcome"]["upstream"] == "desk"

    # Asking again runs nothing more.
    assert execute(stack, draft_id) == execution_id
    assert len(with_key(ledger.effects("issue_credit"), key)) == 1


async def test_the_npm_memory_server_is_gated_end_to_end(stack, memory):
    name = f"Ada-{time.monotonic_ns()}"
    entities = [{"name": name, "entityType": "person", "observations": ["likes tea"]}]
    proposed = await propose(stack, "propose_memory_create_entities", {"entities": entities})
    draft_id = proposed["draft_id"]
    assert draft_of(stack, draft_id)["summary"] == (
        f"Create 1 entities in the knowledge graph, first {name}"
    )
    assert name not in memory.data_file.read_text() if memory.data_file.exists() else True
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    execution = wait_for_execution(stack, execute(stack, draft_id))
    assert execution["status"] == "succeeded", stack.worker.output()[-3000:]
    stored = [json.loads(line) for line in memory.data_file.read_text().splitlines()]
    assert [e["name"] for e in stored if e.get("name") == name] == [name]

    async with connect(stack.mcp_url, stack.demo["tokens"]["agent"]) as agent:
        graph = await agent.call_tool("memory_read_graph", {})
    assert not graph.is_error, graph.content
    [entity] = [e for e in graph.structured_content["data"]["entities"] if e["name"] == name]
    assert entity["observations"] == ["***"]  # declared masked
    assert "likes tea" not in json.dumps(graph.structured_content)


async def test_a_business_refusal_fails_the_execution_with_the_upstreams_words(stack, desk_http):
    arguments = {"customer_id": "C-200", "amount_cents": 5000, "currency": "EUR"}
    draft_id = (await propose(stack, "propose_desk_rejecting_write", arguments))["draft_id"]
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    execution = wait_for_execution(stack, execute(stack, draft_id))
    assert execution["status"] == "failed", stack.worker.output()[-3000:]
    assert execution["error"]["code"] == "UPSTREAM_REFUSED"
    assert "over their credit limit" in execution["error"]["message"]
    assert len(execution["attempts"]) == 1  # final: not retried
    assert len(with_key(desk_http.ledger.calls("rejecting_write"), f"{draft_id}:1")) == 1


async def test_a_transient_upstream_error_is_retried_until_it_applies_once(stack, desk_http):
    note = f"flaky {time.monotonic_ns()}"
    draft_id = (await propose(stack, "propose_desk_flaky_write", {"note": note}))["draft_id"]
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    execution = wait_for_execution(stack, execute(stack, draft_id))
    assert execution["status"] == "succeeded", stack.worker.output()[-3000:]
    key = f"{draft_id}:1"
    assert [a["result"] for a in execution["attempts"]] == ["retry", "retry", "succeeded"]
    assert len(with_key(desk_http.ledger.calls("flaky_write"), key)) == FLAKY_FAILURES + 1
    assert len(with_key(desk_http.ledger.effects("flaky_write"), key)) == 1


# A kill drill costs a lease and a worker start: once, on the production stack.
@postgresql_only
async def test_a_worker_killed_mid_call_still_makes_exactly_one_change(
    stack, stack_host, desk_http
):
    namespace, ledger = "desk", desk_http.ledger
    note = f"slow {time.monotonic_ns()}"
    draft_id = (await propose(stack, f"propose_{namespace}_slow_write", {"note": note}))["draft_id"]
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    execution_id = execute(stack, draft_id)
    key = f"{draft_id}:1"
    wait_until(
        lambda: with_key(ledger.calls("slow_write"), key), 60, "the slow call to be in flight"
    )
    stack.worker.kill()  # SIGKILL, its process group too (a stdio upstream child dies with it)

    # The lease runs out; the sweeper publishes again and a new worker calls again with the
    # same key: the upstream applies it once (or replays what it applied).
    wait_until(
        lambda: utcnow() > get_execution_lease(stack, execution_id) + timedelta(seconds=0.5),
        30,
        "the lease to run out",
    )
    worker = restart_worker(stack, stack_host)
    sweep(stack.runtime, celery_publisher(stack.settings))
    execution = wait_for_execution(stack, execution_id)
    assert execution["status"] == "succeeded", worker.output()[-3000:]
    wait_until(lambda: with_key(ledger.effects("slow_write"), key), 30, "the effect")
    assert len(with_key(ledger.effects("slow_write"), key)) == 1
    calls = with_key(ledger.calls("slow_write"), key)
    assert all(c["key_source"] == "meta" for c in calls if "key_source" in c)
    assert execution["outcome"]["result"]["note"] == note


def get_execution_lease(stack: Any, execution_id: str) -> Any:
    from service.executions import repository

    with session_scope(stack.runtime.engine) as session:
        execution = repository.get(session, execution_id)
        assert execution is not None
        return execution.lease_expires_at or utcnow()


async def test_the_meta_key_reaches_the_upstream(stack, desk_http):
    title = f"Ticket {time.monotonic_ns()}"
    draft_id = (
        await propose(stack, "propose_desk_create_ticket", {"title": title, "priority": "low"})
    )["draft_id"]
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    execution = wait_for_execution(stack, execute(stack, draft_id))
    assert execution["status"] == "succeeded", stack.worker.output()[-3000:]
    [call] = with_key(desk_http.ledger.calls("create_ticket"), f"{draft_id}:1")
    assert (call["outcome"], call["key_source"]) == ("applied", "meta")
