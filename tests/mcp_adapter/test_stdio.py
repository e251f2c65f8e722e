"""`draftgate serve mcp --stdio` as a real subprocess, driven by the SDK's stdio client: one
agent, authenticated by DRAFTGATE_TOKEN on every call.

Every start costs seconds of imports, so one agent session does the reads, the proposals and the
revocation in turn on one server; each way of refusing to start needs a process of its own."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from sqlmodel import col, select

from service.audit.models import AuditEvent
from service.db import make_engine, session_scope
from service.demo import seed_demo
from service.drafts.models import Draft
from service.tokens import actions as tokens
from tests.support.mcp_client import error_of

# Each test starts the MCP server as a stdio subprocess (seconds of imports).
pytestmark = [pytest.mark.anyio, pytest.mark.full]

DRAFTGATE = Path(sys.executable).with_name("draftgate")
ROOT = Path(__file__).resolve().parents[2]
TOOLS = {
    "list_orders",
    "get_order",
    "get_logistics",
    "propose_refund",
    "propose_cancel_order",
    "propose_change_shipping_address",
    "get_draft",
}


@pytest.fixture
def demo_db(sqlite_url: str, tmp_path: Path) -> dict[str, Any]:
    """A migrated SQLite database with the demo seeded; the manifest plus where it lives."""
    state_dir = tmp_path / "state"
    engine = make_engine(sqlite_url)
    with session_scope(engine) as session:
        manifest = seed_demo(
            session,
            tenant="demo",
            state_dir=state_dir,
            api_url="http://api.invalid",
            mcp_url="http://mcp.invalid/mcp",
        )
    engine.dispose()
    return {**manifest, "database_url": sqlite_url, "state_dir": str(state_dir)}


def _env(demo_db: dict[str, Any], token: str | None) -> dict[str, str]:
    env = {
        "DRAFTGATE_DATABASE_URL": demo_db["database_url"],
        "DRAFTGATE_STATE_DIR": demo_db["state_dir"],
    }
    if token is not None:
        env["DRAFTGATE_TOKEN"] = token
    return env


@asynccontextmanager
async def _stdio_agent(
    demo_db: dict[str, Any], token: str, tmp_path: Path
) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=str(DRAFTGATE),
        args=["serve", "mcp", "--stdio"],
        env=_env(demo_db, token),
        cwd=ROOT,
    )
    with (tmp_path / "server-stderr.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=60) as client:
            yield client


def _events(database_url: str) -> list[AuditEvent]:
    engine = make_engine(database_url)
    try:
        with session_scope(engine) as session:
            return list(session.exec(select(AuditEvent).order_by(col(AuditEvent.id))).all())
    finally:
        engine.dispose()


def _draft_count(database_url: str) -> int:
    engine = make_engine(database_url)
    try:
        with session_scope(engine) as session:
            return len(session.exec(select(Draft)).all())
    finally:
        engine.dispose()


async def test_an_agents_session_over_stdio(demo_db, tmp_path):
    """One server for the whole session: reads, proposals, and a revocation mid-session."""
    database_url, orders = demo_db["database_url"], demo_db["orders"]
    token = demo_db["tokens"]["agent"]
    async with _stdio_agent(demo_db, token, tmp_path) as client:
        # An agent lists the tools and reads an order.
        listed = await client.list_tools()
        result = await client.call_tool("get_order", {"order_id": orders["delivered"]})
        assert {tool.name for tool in listed.tools} == TOOLS
        assert not result.is_error, result.content
        order = result.structured_content
        assert order["order_id"] == orders["delivered"]
        assert order["customer_phone"] == "+44******0123"
        assert "12 St James's Square" not in json.dumps(order)
        called = [event for event in _events(database_url) if event.type == "tool.called"]
        assert len(called) == 1
        assert called[0].actor == "agent:support-agent"
        assert called[0].data["tool"] == "get_order"
        assert re.fullmatch(r"[0-9a-f]{32}", called[0].trace_id or "")

        # It proposes; a malformed proposal is refused.
        arguments = {
            "order_id": orders["paid"],
            "reason": "customer_request",
            "idempotency_key": "stdio-1",
        }
        proposed = await client.call_tool("propose_cancel_order", arguments)
        bad = await client.call_tool("propose_cancel_order", {**arguments, "tenant_id": "x"})
        assert proposed.structured_content["status"] == "proposed"
        assert error_of(bad)["code"] == "INVALID_ARGUMENT"
        assert _draft_count(database_url) == 1

        # Its token is revoked while it is serving: the next call fails.
        first = await client.call_tool("get_order", {"order_id": orders["paid"]})
        assert not first.is_error
        engine = make_engine(database_url)
        try:
            with session_scope(engine) as session:
                principal = tokens.authenticate(session, token)
                tokens.revoke(
                    session, tenant="demo", token_id=principal.token_id, actor="admin:root"
                )
        finally:
            engine.dispose()
        second = await client.call_tool("get_order", {"order_id": orders["paid"]})
    error = error_of(second)
    assert error["code"] == "UNAUTHENTICATED"
    assert "revoked" in error["message"]
    refusals = [e for e in _events(database_url) if e.type == "auth.refused"]
    assert len(refusals) == 1
    assert refusals[0].data["door"] == "mcp-stdio"
    assert _draft_count(database_url) == 1


def _start_refused(demo_db: dict[str, Any], token: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DRAFTGATE), "serve", "mcp", "--stdio"],
        env={"PATH": "/usr/bin:/bin", **_env(demo_db, token)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_invalid_token_refuses_to_start_and_is_audited(demo_db):
    bogus = "dg_" + "x" * 43
    completed = _start_refused(demo_db, bogus)
    assert completed.returncode == 1
    assert "not recognised" in completed.stderr
    events = _events(demo_db["database_url"])
    assert not [event for event in events if event.type.startswith("tool.")]
    refusals = [event for event in events if event.type == "auth.refused"]
    assert len(refusals) == 1
    (event,) = refusals
    assert event.tenant == "demo"
    assert event.actor == "anonymous"
    assert event.data["door"] == "mcp-stdio"
    assert "not recognised" in event.data["reason"]
    assert event.data["token_sha256_prefix"] == tokens.digest(bogus)[:12]
    assert bogus not in json.dumps([event.model_dump(mode="json") for event in events])
    assert _draft_count(demo_db["database_url"]) == 0


def test_a_non_agent_token_refuses_to_start_over_stdio(demo_db):
    token = demo_db["tokens"]["approver_alice"]
    completed = _start_refused(demo_db, token)
    assert completed.returncode == 1
    assert "not accepted here" in completed.stderr
    refused = [e for e in _events(demo_db["database_url"]) if e.type.endswith(".refused")]
    assert [event.type for event in refused] == ["auth.refused"]
    assert "approver" in refused[0].data["reason"]
    assert _draft_count(demo_db["database_url"]) == 0


def test_stdio_mode_without_a_token_refuses_to_start(demo_db):
    completed = subprocess.run(
        [str(DRAFTGATE), "serve", "mcp", "--stdio"],
        env={"PATH": "/usr/bin:/bin", **_env(demo_db, None)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode != 0
    assert "DRAFTGATE_TOKEN" in completed.stderr
