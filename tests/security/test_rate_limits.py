"""Security issue §10: rate limits per client address and per token (429 with Retry-After over
HTTP, a structured retryable RATE_LIMITED over MCP), and a flood of refusals recorded as a
count instead of one audit event each, so it cannot bloat the chain."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from limits import parse
from sqlmodel import Session, col, select

from harness.approvals import bearer
from service.api.app import create_app
from service.audit.models import AuditEvent
from tests.support.mcp_client import connect

pytestmark = pytest.mark.anyio


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {
        "rate_limit_per_address": "20/minute",
        "rate_limit_per_token": "3/minute",
        "rate_limit_recorded_refusals": "2/minute",
    }


def refusals(runtime, type_: str) -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        statement = select(AuditEvent).where(col(AuditEvent.type) == type_)
        return list(session.exec(statement.order_by(col(AuditEvent.seq))).all())


@pytest.fixture
def api(runtime, demo):
    with TestClient(create_app(runtime, publisher=lambda task, args: None)) as client:
        yield client


def test_a_token_over_its_limit_gets_429_with_retry_after(api, demo):
    headers = bearer(demo["tokens"]["approver_alice"])
    answers = [api.get("/v1/drafts", headers=headers) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    limited = answers[-1]
    assert limited.json()["code"] == "RATE_LIMITED"
    assert limited.json()["retryable"] is True
    assert 1 <= int(limited.headers["Retry-After"]) <= 60
    assert api.get("/v1/drafts", headers=bearer(demo["tokens"]["approver_bob"])).status_code == 200


def test_an_address_over_its_limit_gets_429_before_authentication(api, runtime, demo):
    statuses = [api.get("/v1/drafts", headers=bearer(f"dg_bad{i}")).status_code for i in range(25)]
    assert statuses[:20] == [401] * 20
    assert set(statuses[20:]) == {429}


def test_a_flood_of_bad_tokens_writes_a_count_not_an_event_each(api, runtime):
    for i in range(15):
        api.get("/v1/drafts", headers=bearer(f"dg_flood{i}"))
    recorded = refusals(runtime, "auth.refused")
    assert len(recorded) == 2  # the window's budget of recorded refusals
    # The next window: the first refusal recorded carries the count of the unrecorded ones.
    runtime.limiter._shared.clear(parse("2/minute"), "refusals", "auth:http:testclient")
    api.get("/v1/drafts", headers=bearer("dg_after"))
    latest = refusals(runtime, "auth.refused")[-1]
    assert latest.data["suppressed_before"] == 13


async def test_an_agent_over_its_limit_gets_a_structured_retryable_error(mcp_url, runtime, demo):
    async with connect(mcp_url, demo["tokens"]["agent"]) as agent:
        results = [await agent.call_tool("get_order", {"order_id": "ORD-1004"}) for _ in range(4)]
    assert [r.is_error for r in results] == [False, False, False, True]
    error = json.loads(results[-1].content[0].text)  # type: ignore[union-attr]
    assert (error["code"], error["retryable"]) == ("RATE_LIMITED", True)
    assert error["details"]["retry_after_seconds"] >= 1
    [refused] = refusals(runtime, "tool.refused")
    assert refused.data["error"]["code"] == "RATE_LIMITED"
