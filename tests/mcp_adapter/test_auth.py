"""Authentication at the MCP door over real streamable HTTP: only live agent tokens get in, and
every refused credential is audited in the default tenant without its secret.

The tests share one MCP server per module and backend (tests/support/mcp_helpers.py), with the
database emptied and the demo seeded per test. The refusal matrices run on SQLite; what depends
on the database (a revocation committed elsewhere and seen by the running server, the audit
chain as stored) runs on PostgreSQL too."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from sqlmodel import col, select

from service.audit import actions as audit
from service.audit.models import AuditEvent
from service.db import session_scope
from service.tokens import actions as tokens
from tests.support.backends import both_backends
from tests.support.mcp_client import connect
from tests.support.mcp_helpers import module_host_fixtures

pytestmark = pytest.mark.anyio

mcp_hosts, module_host, demo, runtime, mcp_url = module_host_fixtures()

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _last_event_id(runtime) -> int:
    with session_scope(runtime.engine) as session:
        ids = session.exec(select(AuditEvent.id).order_by(col(AuditEvent.id).desc())).first()
    return ids or 0


def _events_after(runtime, event_id: int) -> list[AuditEvent]:
    with session_scope(runtime.engine) as session:
        statement = select(AuditEvent).where(col(AuditEvent.id) > event_id)
        return list(session.exec(statement.order_by(col(AuditEvent.id))).all())


def _all_audit_rows_as_text(runtime) -> str:
    with session_scope(runtime.engine) as session:
        rows = session.exec(select(AuditEvent)).all()
        return json.dumps([row.model_dump(mode="json") for row in rows])


def _revoke(runtime, raw_token: str) -> None:
    with session_scope(runtime.engine) as session:
        principal = tokens.authenticate(session, raw_token)
        tokens.revoke(
            session, tenant=principal.tenant, token_id=principal.token_id, actor="admin:root"
        )


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


async def _raw_post(url: str, headers: dict[str, str], body: Any = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(url, json=body or LIST_TOOLS, headers={**MCP_HEADERS, **headers})


def _token(demo: dict[str, Any], kind: str) -> str | None:
    return None if kind == "none" else str(demo["tokens"].get(kind, "dg_" + "A" * 43))


REFUSED = [
    pytest.param("none", "no bearer token", id="no-token"),
    pytest.param("unknown", "not recognised", id="unknown-token"),
    pytest.param("revoked", "revoked", id="revoked-token"),
    pytest.param("approver_alice", "not accepted here", id="approver-token"),
]
# Every role but agent is refused at this door.
REFUSED_ROLES = [
    *REFUSED,
    pytest.param("auditor", "not accepted here", id="auditor-token"),
    pytest.param("admin", "not accepted here", id="admin-token"),
]


def _prepare(runtime, demo, kind: str) -> str | None:
    if kind == "revoked":
        token = str(demo["tokens"]["agent"])
        _revoke(runtime, token)
        return token
    return _token(demo, kind)


def _check_refusal_events(events: list[AuditEvent], token: str | None, reason: str) -> None:
    assert events, "the refusal was not audited"
    for event in events:
        assert event.type == "auth.refused"
        assert event.tenant == "demo"
        assert event.actor == "anonymous"
        assert event.draft_id is None
        assert event.data["door"] == "mcp"
        assert reason in event.data["reason"].lower(), event.data
        if token is None:
            assert "token_sha256_prefix" not in event.data
        else:
            assert event.data["token_sha256_prefix"] == tokens.digest(token)[:12]


@pytest.mark.parametrize(("kind", "reason"), REFUSED)
async def test_the_sdk_client_is_refused_and_the_refusal_audited(
    mcp_url, runtime, demo, kind, reason
):
    token = _prepare(runtime, demo, kind)
    last_id = _last_event_id(runtime)
    with pytest.raises(BaseException) as raised:  # noqa: PT011 - the SDK raises a group
        async with connect(mcp_url, token) as client:
            await client.list_tools()
    assert any(isinstance(leaf, MCPError) for leaf in _leaves(raised.value)), raised.value
    events = _events_after(runtime, last_id)
    _check_refusal_events(events, token, reason)
    stored = _all_audit_rows_as_text(runtime)
    for secret in demo["tokens"].values():
        assert secret not in stored
        assert secret[3:] not in stored  # not even without its prefix
        assert tokens.digest(secret) not in stored  # nor its full digest


@pytest.mark.parametrize(("kind", "reason"), REFUSED_ROLES)
async def test_a_raw_request_gets_401_and_exactly_one_audit_event(
    mcp_url, runtime, demo, kind, reason
):
    token = _prepare(runtime, demo, kind)
    last_id = _last_event_id(runtime)
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    response = await _raw_post(mcp_url, headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].lower().startswith("bearer")
    if token is not None:
        assert token not in response.text
    events = _events_after(runtime, last_id)
    assert len(events) == 1, [(e.type, e.data) for e in events]
    _check_refusal_events(events, token, reason)
    if token is not None:
        assert token not in _all_audit_rows_as_text(runtime)


@pytest.mark.parametrize(("kind", "reason"), REFUSED)
async def test_a_refused_tool_call_runs_nothing(mcp_url, runtime, demo, kind, reason):
    token = _prepare(runtime, demo, kind)
    last_id = _last_event_id(runtime)
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "get_order", "arguments": {"order_id": demo["orders"]["delivered"]}},
    }
    response = await _raw_post(mcp_url, headers, call)
    assert response.status_code == 401
    assert "ORD-" not in response.text
    events = _events_after(runtime, last_id)
    assert len(events) == 1  # the refusal, and no tool.called / tool.refused
    _check_refusal_events(events, token, reason)


async def test_a_non_bearer_scheme_is_refused_and_audited(mcp_url, runtime, demo):
    last_id = _last_event_id(runtime)
    response = await _raw_post(mcp_url, {"Authorization": f"Basic {demo['tokens']['agent']}"})
    assert response.status_code == 401
    events = _events_after(runtime, last_id)
    _check_refusal_events(events, None, "no bearer token")
    assert demo["tokens"]["agent"] not in _all_audit_rows_as_text(runtime)


@both_backends
async def test_a_revoked_token_stops_working_on_a_running_server(mcp_url, runtime, demo):
    token = demo["tokens"]["agent"]
    async with connect(mcp_url, token) as client:
        before = await client.call_tool("list_orders", {})
    assert not before.is_error
    _revoke(runtime, token)
    with pytest.raises(BaseException) as raised:  # noqa: PT011 - the SDK raises a group
        async with connect(mcp_url, token) as client:
            await client.call_tool("list_orders", {})
    assert any(isinstance(leaf, MCPError) for leaf in _leaves(raised.value))


@both_backends
async def test_another_agent_token_still_works_after_one_is_revoked(mcp_url, runtime, demo):
    _revoke(runtime, demo["tokens"]["agent"])
    async with connect(mcp_url, demo["tokens"]["agent_other_customer"]) as client:
        result = await client.call_tool("list_orders", {})
    assert not result.is_error
    assert [order["order_id"] for order in result.structured_content["orders"]] == [
        demo["orders"]["other_customer"]
    ]


@pytest.mark.parametrize(
    "kind", [pytest.param("none", id="no-token"), pytest.param("unknown", id="unknown-token")]
)
async def test_a_refused_credential_is_audited_under_the_callers_trace_id(
    mcp_url, runtime, demo, kind
):
    # DESIGN.md §8: each MCP call has a trace id, from the client's traceparent when sent.
    token = _token(demo, kind)
    last_id = _last_event_id(runtime)
    headers = {"traceparent": TRACEPARENT}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    assert (await _raw_post(mcp_url, headers)).status_code == 401
    events = _events_after(runtime, last_id)
    assert [(event.type, event.trace_id) for event in events] == [("auth.refused", TRACE_ID)]


@both_backends
async def test_the_audit_chain_verifies_after_refusals(mcp_url, runtime, demo):
    for kind, _ in [("none", ""), ("unknown", ""), ("approver_bob", "")]:
        token = _token(demo, kind)
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        assert (await _raw_post(mcp_url, headers)).status_code == 401
    with session_scope(runtime.engine) as session:
        result = audit.verify(session, "demo")
    assert result.ok, result.problem
    assert result.events_checked > 3
