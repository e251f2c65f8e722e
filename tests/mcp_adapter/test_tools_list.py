"""tools/list over real streamable HTTP: exactly the agent's tools, strict schemas, honest hints.

The listing does not depend on the database or on the test: it is fetched once per module by a
real MCP client from the module's server (tests/support/mcp_helpers.py, SQLite), and each test
checks one aspect of it. Real calls, checked against the output schemas, run per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import jsonschema  # type: ignore[import-untyped]
import pytest
from mcp.types import Tool

from tests.mcp_adapter.test_bad_input import ADDRESS
from tests.support.mcp_client import connect
from tests.support.mcp_helpers import ModuleHosts, module_host_fixtures

mcp_hosts, module_host, demo, runtime, mcp_url = module_host_fixtures()

READ_TOOLS = {"list_orders", "get_order", "get_logistics", "get_draft"}
PROPOSE_TOOLS = {"propose_refund", "propose_cancel_order", "propose_change_shipping_address"}


async def _tools(mcp_url: str, token: str) -> dict[str, Tool]:
    async with connect(mcp_url, token) as client:
        listed = await client.list_tools()
    return {tool.name: tool for tool in listed.tools}


@pytest.fixture(scope="module")
def tools(mcp_hosts: ModuleHosts, request: pytest.FixtureRequest) -> dict[str, Tool]:
    """tools/list as the demo agent sees it, by name."""
    host = mcp_hosts.host("sqlite", {}, request)
    token = host.fresh()["tokens"]["agent"]
    return anyio.run(_tools, host.mcp_url, token)


def _objects(schema: Any, path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every sub-schema that describes an object, with where it sits."""
    if isinstance(schema, list):
        for index, item in enumerate(schema):
            yield from _objects(item, f"{path}[{index}]")
        return
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "object" or "properties" in schema:
        yield path, schema
    for key, value in schema.items():
        if key not in {"default", "examples", "enum", "const"}:
            yield from _objects(value, f"{path}.{key}")


def test_exactly_the_agent_tools_are_listed(tools):
    assert set(tools) == READ_TOOLS | PROPOSE_TOOLS
    # The write actions themselves are never offered: only their propose_* form.
    assert not {"refund", "cancel_order", "change_shipping_address"} & set(tools)
    assert not [name for name in tools if name.startswith(("execute", "approve"))]


def test_every_tool_has_title_description_and_schemas(tools):
    for name, tool in tools.items():
        assert (tool.title or "").strip(), name
        assert len(tool.description or "") >= 40, name
        assert tool.input_schema["type"] == "object", name
        assert tool.output_schema is not None, name
        assert tool.output_schema["type"] == "object", name
        assert tool.output_schema.get("properties"), name


def test_every_input_object_forbids_additional_properties(tools):
    for name, tool in tools.items():
        objects = list(_objects(tool.input_schema))
        assert objects, name
        for where, node in objects:
            assert node.get("additionalProperties") is False, f"{name} {where}"


def _nullable(prop: dict) -> bool:
    return {"type": "null"} in prop.get("anyOf", [])


def _value(prop: dict) -> dict:
    """The non-null branch of an optional (nullable) field, or the field itself."""
    return next((b for b in prop.get("anyOf", []) if b != {"type": "null"}), prop)


def test_input_schemas_are_self_contained_and_optional_fields_are_nullable(tools):
    # Several MCP clients handle $ref badly; strict-mode clients make every field required,
    # so an optional one must accept null, which means omitted (DESIGN.md §3).
    for name, tool in tools.items():
        schema = tool.input_schema
        assert "$ref" not in repr(schema), name
        assert "$defs" not in schema, name
        required = set(schema.get("required", []))
        for field, prop in schema["properties"].items():
            assert _nullable(prop) is (field not in required), (name, field)


def test_input_schemas_carry_patterns_enums_and_bounds(tools):
    order_id_tools = {"get_order", "get_logistics"} | PROPOSE_TOOLS
    for name in order_id_tools:
        schema = tools[name].input_schema
        assert schema["properties"]["order_id"]["pattern"] == "^ORD-[0-9]{4,20}$", name
        assert "order_id" in schema["required"], name

    limit = _value(tools["list_orders"].input_schema["properties"]["limit"])
    assert (limit["type"], limit["minimum"], limit["maximum"]) == ("integer", 1, 20)
    assert "required" not in tools["list_orders"].input_schema

    refund = tools["propose_refund"].input_schema
    assert set(refund["required"]) == {"order_id", "amount", "reason"}
    amount = refund["properties"]["amount"]
    assert set(amount["required"]) == {"amount_minor", "currency"}
    amount_minor = amount["properties"]["amount_minor"]
    assert amount_minor["type"] == "integer"
    assert (amount_minor["minimum"], amount_minor["maximum"]) == (1, 2**53 - 1)
    assert amount["properties"]["currency"]["pattern"] == "^[A-Z]{3}$"
    assert set(refund["properties"]["reason"]["enum"]) == {
        "damaged",
        "not_as_described",
        "not_received",
        "wrong_item",
        "late_delivery",
        "goodwill",
    }
    assert _value(refund["properties"]["note"])["maxLength"] == 500
    assert _value(refund["properties"]["note"])["minLength"] == 1

    cancel = tools["propose_cancel_order"].input_schema
    assert set(cancel["properties"]["reason"]["enum"]) == {
        "customer_request",
        "duplicate_order",
        "payment_problem",
        "out_of_stock",
    }

    address = tools["propose_change_shipping_address"].input_schema["properties"]["address"]
    lines = address["properties"]["lines"]
    assert (lines["minItems"], lines["maxItems"]) == (1, 3)
    assert lines["items"]["maxLength"] == 100
    assert address["properties"]["country"]["pattern"] == "^[A-Z]{2}$"
    assert set(address["required"]) == {
        "recipient",
        "lines",
        "district",
        "city",
        "postal_code",
        "country",
    }

    for name in PROPOSE_TOOLS:
        properties = tools[name].input_schema["properties"]
        assert _value(properties["idempotency_key"])["pattern"] == r"^[\x20-\x7E]{1,255}$", name
        assert _value(properties["draft_id"])["pattern"] == "^dft_[0-9a-f]{32}$", name
        assert "idempotency_key" not in tools[name].input_schema["required"], name
    assert tools["get_draft"].input_schema["properties"]["draft_id"]["pattern"] == (
        "^dft_[0-9a-f]{32}$"
    )


def test_annotations_are_complete_and_honest(tools):
    for name, tool in tools.items():
        hints = tool.annotations
        assert hints is not None, name
        assert hints.title, name
        if name in PROPOSE_TOOLS:
            # Proposing records a draft and changes nothing downstream.
            assert hints.read_only_hint is False, name
            assert hints.destructive_hint is False, name
            assert hints.idempotent_hint is True, name
            assert hints.open_world_hint is False, name
        else:
            assert hints.read_only_hint is True, name
            # Only the read that asks the carrier reaches outside draftgate's database.
            assert hints.open_world_hint is (name == "get_logistics"), name
    not_read_only = {name for name, tool in tools.items() if not tool.annotations.read_only_hint}
    assert not_read_only == PROPOSE_TOOLS


def test_input_schemas_are_valid_json_schemas_accepting_valid_arguments(tools):
    for tool in tools.values():
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
    valid = jsonschema.Draft202012Validator(tools["propose_refund"].input_schema)
    arguments = {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": 1250, "currency": "USD"},
        "reason": "damaged",
    }
    assert valid.is_valid(arguments)
    assert not valid.is_valid({**arguments, "tenant_id": "shop-b"})
    assert not valid.is_valid({**arguments, "amount": {"amount_minor": "1250", "currency": "USD"}})


@pytest.mark.anyio
async def test_output_schemas_are_valid_and_real_results_conform(mcp_url, demo):
    orders = demo["orders"]
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        results = {
            "list_orders": await client.call_tool("list_orders", {"limit": 20}),
            "get_order": await client.call_tool("get_order", {"order_id": orders["delivered"]}),
            "get_logistics": await client.call_tool(
                "get_logistics", {"order_id": orders["shipped"]}
            ),
            "propose_refund": await client.call_tool(
                "propose_refund",
                {
                    "order_id": orders["delivered"],
                    "amount": {"amount_minor": 1250, "currency": "USD"},
                    "reason": "damaged",
                },
            ),
            "propose_cancel_order": await client.call_tool(
                "propose_cancel_order",
                {"order_id": orders["paid"], "reason": "customer_request"},
            ),
            "propose_change_shipping_address": await client.call_tool(
                "propose_change_shipping_address",
                {"order_id": orders["pending_payment"], "address": ADDRESS},
            ),
        }
        draft_id = results["propose_refund"].structured_content["draft_id"]
        results["get_draft"] = await client.call_tool("get_draft", {"draft_id": draft_id})
    assert set(results) == set(tools)
    for name, result in results.items():
        assert not result.is_error, (name, result.content)
        schema = tools[name].output_schema
        jsonschema.Draft202012Validator.check_schema(schema)
        validator = jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        )
        errors = [error.message for error in validator.iter_errors(result.structured_content)]
        assert errors == [], name
