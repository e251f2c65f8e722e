"""The MCP server's ``/metrics`` over real HTTP: tool calls counted by tool and outcome.

The server runs in this test process (plain mode), so counts are compared as differences.
"""

from __future__ import annotations

import httpx
import pytest

from harness.servers import serve
from mcp_adapter.server import create_http_app
from service.runtime import build_runtime
from tests.support.mcp_client import connect, error_of
from tests.support.prometheus import Samples, samples_of

pytestmark = pytest.mark.anyio


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


def metrics_url(mcp_url: str) -> str:
    return mcp_url.removesuffix("/mcp") + "/metrics"


def scrape(url: str, headers: dict[str, str] | None = None) -> tuple[str, Samples]:
    response = httpx.get(url, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return response.text, samples_of(response.text)


def calls(samples: Samples, tool: str, outcome: str) -> float:
    key = ("draftgate_tool_calls_total", (("outcome", outcome), ("tool", tool)))
    return samples.get(key, 0.0)


TOKEN = "mcp-scrape-012345"
SCRAPER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def scraped_mcp_url(settings, demo):
    """An MCP server that serves /metrics (only with a metrics token: it faces agents)."""
    runtime = build_runtime(settings.model_copy(update={"metrics_token": TOKEN}))
    try:
        with serve(create_http_app(runtime)) as base:
            yield base + "/mcp"
    finally:
        runtime.engine.dispose()


async def test_without_a_metrics_token_the_mcp_server_serves_no_metrics(mcp_url):
    response = httpx.get(metrics_url(mcp_url), timeout=30)
    assert response.status_code == 404
    assert "DRAFTGATE_METRICS_TOKEN" in response.json()["message"]
    assert "draftgate_tool_calls_total" not in response.text


async def test_tool_calls_are_counted_by_tool_and_outcome(scraped_mcp_url, demo):
    mcp_url = scraped_mcp_url
    url = metrics_url(mcp_url)
    _, before = scrape(url, SCRAPER)
    async with connect(mcp_url, demo["tokens"]["agent"]) as agent:
        for _ in range(2):
            ok = await agent.call_tool("get_order", {"order_id": demo["orders"]["paid"]})
            assert not ok.is_error
        other = await agent.call_tool("get_order", {"order_id": demo["orders"]["other_customer"]})
        assert error_of(other)["code"] == "ORDER_UNAVAILABLE"
        bad = await agent.call_tool("get_order", {"order_id": "ORD-1", "tenant": "shop-b"})
        assert error_of(bad)["code"] == "INVALID_ARGUMENT"
        # The tool name is the agent's: it must not become a label value.
        unknown = await agent.call_tool("refund_ORD-1004_now", {})
        assert error_of(unknown)["code"] == "UNKNOWN_TOOL"
    text, after = scrape(url, SCRAPER)

    def grew(tool: str, outcome: str) -> float:
        return calls(after, tool, outcome) - calls(before, tool, outcome)

    assert grew("get_order", "ok") == 2
    assert grew("get_order", "ORDER_UNAVAILABLE") == 1
    assert grew("get_order", "INVALID_ARGUMENT") == 1
    assert grew("<unknown>", "UNKNOWN_TOOL") == 1
    assert "refund_ORD-1004_now" not in text
    histogram = (
        "draftgate_tool_call_duration_seconds_count",
        (("outcome", "ok"), ("tool", "get_order")),
    )
    assert after[histogram] - before.get(histogram, 0.0) == 2
    # Refused calls are audited, so they are refusals too, by the same codes.
    refusals = ("draftgate_refusals_total", (("reason", "INVALID_ARGUMENT"),))
    assert after[refusals] - before.get(refusals, 0.0) == 1
    # The MCP server reports no database state (the API does).
    assert not any(name == "draftgate_drafts" for name, _ in after)


async def test_with_a_metrics_token_the_mcp_scrape_needs_it(scraped_mcp_url):
    url = metrics_url(scraped_mcp_url)
    refused = httpx.get(url, timeout=30)
    assert refused.status_code == 401
    assert refused.json()["code"] == "UNAUTHENTICATED"
    wrong = httpx.get(url, headers={"Authorization": "Bearer x"}, timeout=30)
    assert wrong.status_code == 401
    _, samples = scrape(url, SCRAPER)
    assert samples
