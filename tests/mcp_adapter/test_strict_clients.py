"""Strict-mode clients (DESIGN.md §3): real client packages convert every published input
schema the way they would before handing it to a model, and a call that fills every field,
null where it has nothing, still does the job (a propose_* call creates a new draft).

- OpenAI Agents SDK: ``convert_schemas_to_strict`` on an MCP server. A schema it cannot make
  strict is served non-strict without an error, so each tool's ``strict_json_schema`` is
  checked, and calls go through the SDK's own ``FunctionTool.on_invoke_tool``.
- LangChain: its MCP adapter (``langchain.mcp``) loads the tools and
  ``convert_to_openai_tool(strict=True)`` is what ``bind_tools(strict=True)`` sends.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import Agent, FunctionTool, RunContextWrapper
from agents.mcp import MCPServerStreamableHttp
from agents.tool_context import ToolContext
from fastmcp import Client as FastMCPClient
from fastmcp.client.transports import StreamableHttpTransport
from langchain.mcp import MCPAdapter
from langchain_core.utils.function_calling import convert_to_openai_tool
from sqlmodel import Session, select

from service.drafts.models import Draft

pytestmark = pytest.mark.anyio

NULL = {"type": "null"}


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url  # what a client sends does not depend on the database


def meaningful_arguments(demo: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What a model would fill in for each tool; every other field it sends as null."""
    orders = demo["orders"]
    return {
        "list_orders": {},
        "get_order": {"order_id": orders["delivered"]},
        "get_logistics": {"order_id": orders["shipped"]},
        "propose_refund": {
            "order_id": orders["delivered"],
            "amount": {"amount_minor": 1500, "currency": "USD"},
            "reason": "damaged",
        },
        "propose_cancel_order": {"order_id": orders["paid"], "reason": "customer_request"},
        "propose_change_shipping_address": {
            "order_id": orders["pending_payment"],
            "address": {
                "recipient": "Ada Lovelace",
                "lines": ["12 St James's Square"],
                "district": "Westminster",
                "city": "London",
                "postal_code": "SW1Y 4JH",
                "country": "GB",
            },
        },
    }


def nullable(schema: dict[str, Any]) -> bool:
    types = schema.get("type")
    return NULL in schema.get("anyOf", []) or (isinstance(types, list) and "null" in types)


def fill(schema: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """Every property of a strict schema present: the given value, or null where it has none
    (which the schema must allow, or a strict client could not leave the field unused)."""
    arguments: dict[str, Any] = {}
    assert set(schema["required"]) == set(schema["properties"]), "strict: every field required"
    for name, prop in schema["properties"].items():
        if name not in given:
            assert nullable(prop), f"{name} must accept null to be left unused"
            arguments[name] = None
            continue
        value = given[name]
        branches = [prop, *prop.get("anyOf", [])]
        nested = next((b for b in branches if b.get("type") == "object"), None)
        arguments[name] = fill(nested, value) if nested and isinstance(value, dict) else value
    return arguments


def drafts(runtime: Any) -> list[Draft]:
    with Session(runtime.engine) as session:
        return list(session.exec(select(Draft)).all())


async def test_the_agents_sdk_converts_every_tool_to_strict_and_null_filled_calls_work(
    runtime, demo, mcp_url
):
    server = MCPServerStreamableHttp(
        params={"url": mcp_url, "headers": {"Authorization": f"Bearer {demo['tokens']['agent']}"}},
        client_session_timeout_seconds=30,
        failure_error_function=None,  # a tool error must fail the test, not become text
    )
    wanted = meaningful_arguments(demo)
    async with server:
        agent = Agent(
            name="t", mcp_servers=[server], mcp_config={"convert_schemas_to_strict": True}
        )
        tools = {t.name: t for t in await agent.get_mcp_tools(RunContextWrapper(context=None))}
        assert set(tools) == {*wanted, "get_draft"}
        for tool in tools.values():
            assert isinstance(tool, FunctionTool)
            assert tool.strict_json_schema is True, f"{tool.name} fell back to non-strict"
        results = {}
        for name, given in wanted.items():
            raw = json.dumps(fill(tools[name].params_json_schema, given))
            context = ToolContext(
                context=None, tool_name=name, tool_call_id=f"call-{name}", tool_arguments=raw
            )
            results[name] = _payload(await tools[name].on_invoke_tool(context, raw))
        draft_id = results["propose_refund"]["draft_id"]
        raw = json.dumps(fill(tools["get_draft"].params_json_schema, {"draft_id": draft_id}))
        context = ToolContext(
            context=None, tool_name="get_draft", tool_call_id="c", tool_arguments=raw
        )
        status = _payload(await tools["get_draft"].on_invoke_tool(context, raw))

    proposed = {name: r for name, r in results.items() if name.startswith("propose_")}
    assert all(r["status"] == "proposed" and r["replayed"] is False for r in proposed.values())
    assert len({r["draft_id"] for r in proposed.values()}) == 3
    assert {d.id for d in drafts(runtime)} == {r["draft_id"] for r in proposed.values()}
    assert "note" not in drafts_params(runtime, draft_id)  # null means omitted, not "null"
    assert results["get_order"]["order_id"] == demo["orders"]["delivered"]
    assert status["draft_id"] == draft_id


def drafts_params(runtime: Any, draft_id: str) -> dict[str, Any]:
    with Session(runtime.engine) as session:
        draft = session.get(Draft, draft_id)
        assert draft is not None
        return draft.params


async def test_langchain_strict_tools_leave_nothing_out_and_null_filled_calls_work(
    runtime, demo, mcp_url
):
    client = FastMCPClient(
        StreamableHttpTransport(
            mcp_url, headers={"Authorization": f"Bearer {demo['tokens']['agent']}"}
        )
    )
    wanted = meaningful_arguments(demo)
    async with MCPAdapter(client) as adapter:
        tools = {t.name: t for t in await adapter.list_tools()}
        assert set(tools) == {*wanted, "get_draft"}
        results = {}
        for name, given in wanted.items():
            strict = convert_to_openai_tool(tools[name], strict=True)["function"]
            assert strict["strict"] is True
            arguments = fill(strict["parameters"], given)
            results[name] = json.loads(_text(await tools[name].ainvoke(arguments)))

    proposed = {name: r for name, r in results.items() if name.startswith("propose_")}
    assert all(r["status"] == "proposed" and r["replayed"] is False for r in proposed.values())
    assert {d.id for d in drafts(runtime)} == {r["draft_id"] for r in proposed.values()}
    assert len(results["list_orders"]["orders"]) >= 1


def _payload(output: Any) -> dict[str, Any]:
    """What the Agents SDK hands the model: the call's text content block (JSON here); a
    draft's result is a list, its JSON text and the link to its resource."""
    if isinstance(output, list):
        # The SDK renders the resource link as a second text item naming the draft's URI.
        assert len(output) == 2, output
        assert "draftgate://drafts/dft_" in json.dumps(output[1]), output
        output = output[0]
    if isinstance(output, dict) and output.get("type") == "text":
        output = output["text"]
    return output if isinstance(output, dict) else json.loads(output)


def _text(content: Any) -> str:
    """LangChain's MCP tools return the call's content blocks (or their text)."""
    if isinstance(content, str):
        return content
    if isinstance(content, tuple):  # (content, artifact)
        content = content[0]
    if isinstance(content, list):
        # A draft's result also links its resource (a block without text).
        blocks = [c if isinstance(c, dict) else vars(c) for c in content]
        return "".join(b["text"] for b in blocks if b.get("type") == "text")
    raise AssertionError(f"unexpected tool output {content!r}")
