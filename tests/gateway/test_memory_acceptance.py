"""Acceptance (issue 11): draftgate in front of an MCP server nobody here wrote.

npm's ``@modelcontextprotocol/server-memory`` (pinned by tests/gateway/upstreams/
package-lock.json, run with Node over stdio) is named in a gateway file. An agent, a real
MCP client over streamable HTTP to draftgate's MCP door, sees its declared reads under
``memory_*`` and its declared writes only as ``propose_memory_*``; a signed approval and
the execute endpoint make a real Celery worker call the upstream, and the write happens
exactly once (a recording tap in front of the server counts the ``tools/call`` requests and
reads their idempotency key); only the approved revision runs, a rejected draft never does;
the audit log verifies and the trace shows the whole chain; the reference shop works
unchanged beside it. Runs on the embedded stack (SQLite + kombu's SQLite broker)
and on the production stack (PostgreSQL + Redis).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.approvals import approve, bearer, get_draft, signed_decision
from service.approvals.schemas import Decision
from tests.gateway.upstreams.mcp_server import IDEMPOTENCY_META
from tests.gateway.upstreams.processes import NodeCommand, memory_server_command
from tests.support.mcp_client import connect, error_of
from tests.support.stacks import Stack
from tests.workers.helpers import wait_for_execution

pytestmark = [pytest.mark.anyio, pytest.mark.full]

READS = {"read_graph", "search_nodes", "open_nodes"}
WRITES = {"create_entities", "add_observations", "delete_entities", "delete_observations"}
UNDECLARED = {"create_relations", "delete_relations"}  # left out of the file on purpose

ADA = {"name": "Ada_Lovelace", "entityType": "person", "observations": ["prefers email"]}


def memory_tools() -> dict[str, Any]:
    return {
        "read_graph": {"kind": "read"},
        "search_nodes": {"kind": "read", "mask": ["entities[*].observations"]},
        "open_nodes": {"kind": "read"},
        "create_entities": {
            "kind": "write",
            "summary": "Create {entities|count} entities in the knowledge graph",
            "risk": "low",
        },
        "add_observations": {
            "kind": "write",
            "summary": "Add observations to {observations[0].entityName}",
        },
        "delete_entities": {
            "kind": "write",
            "summary": "Delete {entityNames|count} entities from the knowledge graph",
            "risk": "high",
        },
        "delete_observations": {
            "kind": "write",
            "summary": "Delete observations of {deletions[0].entityName}",
        },
    }


@pytest.fixture(scope="module")
def memory_server(tmp_path_factory: pytest.TempPathFactory) -> NodeCommand:
    return memory_server_command(tmp_path_factory.mktemp("memory-server"))


@pytest.fixture(scope="module")
def gateway_file(tmp_path_factory: pytest.TempPathFactory, memory_server: NodeCommand) -> Path:
    path = tmp_path_factory.mktemp("gateway") / "gateway.yaml"
    return memory_server.gateway_file(path, "memory", memory_tools())


@pytest.fixture
def settings_overrides(gateway_file: Path) -> dict[str, Any]:
    return {"gateway_file": gateway_file}


@pytest.fixture
def graph(stack: Stack, memory_server: NodeCommand) -> NodeCommand:
    """The memory server's graph emptied for this test (it rereads its file on every call,
    so every stdio child of every draftgate process sees the empty graph), and its tap's log."""
    memory_server.data_file.write_text("")
    memory_server.tap_log.write_text("")
    return memory_server


def traceparent() -> tuple[str, str]:
    trace_id = secrets.token_hex(16)
    return trace_id, f"00-{trace_id}-{secrets.token_hex(8)}-01"


def entities_in(data_file: Path) -> list[dict[str, Any]]:
    """The entities as the memory server stored them in its own file (one JSON a line)."""
    lines = [json.loads(line) for line in data_file.read_text().splitlines() if line.strip()]
    return [
        {key: value for key, value in line.items() if key != "type"}
        for line in lines
        if line.get("type") == "entity"
    ]


def data_of(result: Any) -> dict[str, Any]:
    """What the upstream answered, as the gateway hands a read's result to the agent."""
    assert not result.is_error, result.content
    answer: dict[str, Any] = result.structured_content
    assert answer["upstream"] == "memory"
    data: dict[str, Any] = answer["data"]
    return data


def execute(stack: Stack, draft_id: str) -> httpx.Response:
    headers = bearer(stack.demo["tokens"]["approver_alice"])
    return httpx.post(f"{stack.api_url}/v1/drafts/{draft_id}/execute", headers=headers, timeout=60)


def auditor_get(stack: Stack, path: str) -> dict[str, Any]:
    response = httpx.get(
        stack.api_url + path, headers=bearer(stack.demo["tokens"]["auditor"]), timeout=30
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_the_agent_sees_reads_and_only_proposals_for_writes(stack, graph):
    async with connect(stack.mcp_url, stack.demo["tokens"]["agent"]) as agent:
        tools = {tool.name: tool for tool in (await agent.list_tools()).tools}

    for read in READS:
        assert f"memory_{read}" in tools
        annotations = tools[f"memory_{read}"].annotations
        assert annotations is not None
        assert annotations.read_only_hint is True
    for write in WRITES:
        assert f"propose_memory_{write}" in tools
        assert f"memory_{write}" not in tools
        schema = tools[f"propose_memory_{write}"].input_schema
        assert schema["additionalProperties"] is False
        assert "idempotency_key" in schema["properties"]
    # What the file does not declare is not there at all, under any name.
    assert not [name for name in tools if any(tool in name for tool in UNDECLARED)]
    # The reference shop is still there beside the gateway.
    assert {"list_orders", "get_order", "propose_refund", "get_draft"} <= set(tools)


async def test_an_approved_write_happens_exactly_once_with_the_chain_in_audit_and_trace(
    stack, graph
):
    demo = stack.demo
    trace_id, header = traceparent()
    async with connect(stack.mcp_url, demo["tokens"]["agent"], traceparent=header) as agent:
        before = await agent.call_tool("memory_read_graph", {})
        assert not before.is_error, before.content
        assert data_of(before)["entities"] == []

        proposed = await agent.call_tool(
            "propose_memory_create_entities", {"entities": [ADA], "idempotency_key": "ada-1"}
        )
        assert not proposed.is_error, proposed.content
        draft_id = proposed.structured_content["draft_id"]
        # A proposal changes nothing upstream.
        assert entities_in(graph.data_file) == []
        unchanged = await agent.call_tool("memory_read_graph", {})
        assert data_of(unchanged)["entities"] == []

        draft = get_draft(stack.api_url, demo["tokens"]["approver_alice"], draft_id)
        assert draft["action"] == "memory_create_entities"
        assert draft["summary"] == "Create 1 entities in the knowledge graph"
        assert draft["params"] == {"entities": [ADA]}

        assert approve(stack.api_url, demo, draft_id, "alice").status_code == 201
        accepted = execute(stack, draft_id)
        assert accepted.status_code == 202, accepted.text
        execution_id = accepted.json()["execution_id"]
        done = wait_for_execution(stack, execution_id)
        assert done["status"] == "succeeded", (done, stack.worker and stack.worker.output())
        assert len(done["attempts"]) == 1
        assert ADA in done["outcome"]["result"]["entities"]
        # Executing again returns the same execution and calls nothing.
        assert execute(stack, draft_id).json()["execution_id"] == execution_id

        after = await agent.call_tool("memory_read_graph", {})
        found = await agent.call_tool("memory_search_nodes", {"query": "Ada"})
        seen = await agent.call_tool("get_draft", {"draft_id": draft_id})

    assert data_of(after)["entities"] == [ADA]
    assert entities_in(graph.data_file) == [ADA]
    # Exactly one tools/call reached the server (the memory server would answer a repeat as
    # if nothing happened, so the tap in front of it counts), carrying the draft's key.
    [call] = graph.tool_calls("create_entities")
    assert call["message"]["params"]["arguments"] == {"entities": [ADA]}
    assert call["message"]["params"]["_meta"][IDEMPOTENCY_META] == f"{draft_id}:1"
    # The declared mask applies to what the agent reads back.
    [hit] = data_of(found)["entities"]
    assert hit["name"] == ADA["name"]
    assert hit["observations"] == ["***"]
    assert seen.structured_content["status"] == "succeeded"

    assert auditor_get(stack, "/v1/audit/verify")["ok"] is True
    chain = auditor_get(stack, f"/v1/traces/{trace_id}")
    assert [d["draft_id"] for d in chain["drafts"]] == [draft_id]
    types = [step["type"] for step in chain["steps"]]
    for expected in ("draft.proposed", "approval.approved", "execution.succeeded"):
        assert expected in types, types
    assert types.count("execution.started") == 1
    tools_called = [step["data"].get("tool") for step in chain["steps"]]
    assert "memory_read_graph" in tools_called
    assert "propose_memory_create_entities" in tools_called
    assert types.index("draft.proposed") < types.index("approval.approved")
    assert types.index("approval.approved") < types.index("execution.succeeded")
    assert chain["diagnosis"] == "succeeded: the change was executed"


async def test_the_shop_keeps_working_beside_the_gateway(stack, graph):
    demo = stack.demo
    refund = {
        "order_id": "ORD-1004",  # delivered, 785.00 USD
        "amount": {"amount_minor": 1_500, "currency": "USD"},
        "reason": "damaged",
    }
    async with connect(stack.mcp_url, demo["tokens"]["agent"]) as agent:
        orders = await agent.call_tool("list_orders", {})
        direct = await agent.call_tool("memory_create_entities", {"entities": [ADA]})
        proposed = await agent.call_tool("propose_refund", refund)
    assert not orders.is_error, orders.content
    assert orders.structured_content["orders"]
    # A gated write is not callable under its own name, whatever the agent tries.
    assert error_of(direct)["code"]
    assert entities_in(graph.data_file) == []
    assert graph.tool_calls("create_entities") == []

    assert not proposed.is_error, proposed.content
    draft_id = proposed.structured_content["draft_id"]
    assert approve(stack.api_url, demo, draft_id, "alice").status_code == 201
    accepted = execute(stack, draft_id)
    assert accepted.status_code == 202, accepted.text
    done = wait_for_execution(stack, accepted.json()["execution_id"])
    assert done["status"] == "succeeded", done


async def test_a_revised_draft_runs_its_last_revision_and_a_rejected_one_runs_nothing(stack, graph):
    demo = stack.demo
    # Ada is already in the graph (the server reads its file on every call).
    stored = {"type": "entity", **ADA}
    graph.data_file.write_text(json.dumps(stored) + "\n")
    first = {"observations": [{"entityName": ADA["name"], "contents": ["wrote the first program"]}]}
    second = {"observations": [{"entityName": ADA["name"], "contents": ["worked with Babbage"]}]}
    async with connect(stack.mcp_url, demo["tokens"]["agent"]) as agent:
        proposed = await agent.call_tool("propose_memory_add_observations", first)
        assert not proposed.is_error, proposed.content
        draft_id = proposed.structured_content["draft_id"]
        revised = await agent.call_tool(
            "propose_memory_add_observations", {**second, "draft_id": draft_id}
        )
        assert not revised.is_error, revised.content
        assert revised.structured_content["revision"] == 2

        doomed = await agent.call_tool(
            "propose_memory_delete_entities", {"entityNames": [ADA["name"]]}
        )
        assert not doomed.is_error, doomed.content
        doomed_id = doomed.structured_content["draft_id"]

    token = demo["tokens"]["approver_bob"]
    rejection = signed_decision(
        get_draft(stack.api_url, token, doomed_id),
        approver="bob",
        key_file=demo["approvers"]["bob"]["private_key_file"],
        decision=Decision.REJECT,
        reason="Ada stays in the graph",
    )
    posted = httpx.post(
        f"{stack.api_url}/v1/drafts/{doomed_id}/approvals",
        json=rejection,
        headers=bearer(token),
        timeout=30,
    )
    assert posted.status_code == 201, posted.text
    assert execute(stack, doomed_id).json()["code"] == "DRAFT_REJECTED"

    assert approve(stack.api_url, demo, draft_id, "alice").status_code == 201
    accepted = execute(stack, draft_id)
    assert accepted.status_code == 202, accepted.text
    done = wait_for_execution(stack, accepted.json()["execution_id"])
    assert done["status"] == "succeeded", done

    # Only the approved revision ran, once, under its own key; the rejected draft never ran.
    [call] = graph.tool_calls("add_observations")
    assert call["message"]["params"]["arguments"] == second
    assert call["message"]["params"]["_meta"][IDEMPOTENCY_META] == f"{draft_id}:2"
    assert graph.tool_calls("delete_entities") == []
    [ada] = entities_in(graph.data_file)
    assert ada["observations"] == [*ADA["observations"], "worked with Babbage"]
