"""The MCP server over streamable HTTP on both backends: the production wiring in two calls."""

from __future__ import annotations

import pytest

from tests.support.backends import both_backends
from tests.support.mcp_client import connect, error_of
from tests.support.mcp_helpers import module_host_fixtures

pytestmark = [pytest.mark.anyio, both_backends]

mcp_hosts, module_host, demo, runtime, mcp_url = module_host_fixtures()


async def test_agent_reads_an_order_over_streamable_http(mcp_url, demo):
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        result = await client.call_tool("get_order", {"order_id": demo["orders"]["paid"]})
    assert not result.is_error
    assert result.structured_content["order_id"] == demo["orders"]["paid"]


async def test_another_customers_order_is_unavailable(mcp_url, demo):
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        result = await client.call_tool("get_order", {"order_id": demo["orders"]["other_customer"]})
    assert error_of(result)["code"] == "ORDER_UNAVAILABLE"
