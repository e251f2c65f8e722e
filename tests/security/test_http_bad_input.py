"""Security issue §3: bad input is a clear, audited 4xx, never a 5xx. Path ids longer than
their columns, a body nested 500 deep, a cursor that decodes to an out-of-range time, and a
body over the size limit, on the API and on the MCP door."""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, col, select

from harness.approvals import bearer
from service.api.app import create_app
from service.audit.models import AuditEvent
from tests.support.backends import both_backends
from tests.support.mcp_client import connect

# PostgreSQL enforces column lengths SQLite does not: both backends.
pytestmark = [pytest.mark.anyio, both_backends]


@pytest.fixture
def api(runtime, demo):
    with TestClient(create_app(runtime, publisher=lambda task, args: None)) as client:
        yield client


def last_refusal(runtime, type_: str) -> AuditEvent:
    with Session(runtime.engine) as session:
        return session.exec(
            select(AuditEvent).where(col(AuditEvent.type) == type_).order_by(col(AuditEvent.seq))
        ).all()[-1]


@pytest.mark.parametrize(
    ("method", "path", "route"),
    [
        ("get", "/v1/drafts/" + "d" * 100, "drafts.read"),
        ("post", "/v1/drafts/dft_" + "0" * 100 + "/execute", "execution"),
        ("post", "/v1/drafts/" + "x" * 300 + "/approvals", "approval"),
        ("get", "/v1/executions/" + "e" * 100, "execution.read"),
    ],
)
def test_an_overlong_path_id_is_400_and_audited_on_every_backend(
    api, runtime, demo, method, path, route
):
    token = demo["tokens"]["approver_alice"]
    response = api.request(method, path, headers=bearer(token), json={})
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "INVALID_ARGUMENT"
    event = last_refusal(runtime, f"{route}.refused")
    assert event.data["error"]["code"] == "INVALID_ARGUMENT"
    assert event.draft_id is None or len(event.draft_id) <= 64


def test_a_deeply_nested_approval_body_is_400_and_audited(api, runtime, demo):
    body = "[" * 500 + "]" * 500
    response = api.post(
        "/v1/drafts/dft_" + "0" * 32 + "/approvals",
        content=body,
        headers={**bearer(demo["tokens"]["approver_alice"]), "content-type": "application/json"},
    )
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "INVALID_ARGUMENT"
    assert "nested too deeply" in response.json()["message"]
    assert last_refusal(runtime, "approval.refused").data["error"]["code"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize(
    "cursor",
    [
        # the shape the old cursors had, holding a time that overflows when made UTC
        base64.urlsafe_b64encode(json.dumps(["0001-01-01T00:00:00+14:00", "d"]).encode())
        .rstrip(b"=")
        .decode(),
        "not-a-cursor",
        "eyJ4IjoxfQ.AAAAAAAAAAAAAAAAAAAAAA",
    ],
)
def test_a_forged_cursor_is_400_and_audited(api, runtime, demo, cursor):
    response = api.get(
        "/v1/drafts", params={"cursor": cursor}, headers=bearer(demo["tokens"]["approver_alice"])
    )
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "INVALID_ARGUMENT"
    assert last_refusal(runtime, "drafts.list.refused").data["error"]["code"] == (
        "INVALID_ARGUMENT"
    )


def test_an_audit_cursor_is_not_accepted_for_drafts(api, runtime, demo):
    auditor = bearer(demo["tokens"]["auditor"])
    for _ in range(3):  # enough events for a second page
        api.get("/v1/drafts", headers=bearer(demo["tokens"]["approver_alice"]))
    page = api.get("/v1/audit/events", params={"limit": 1}, headers=auditor).json()
    assert page["next_cursor"]
    response = api.get(
        "/v1/drafts",
        params={"cursor": page["next_cursor"]},
        headers=bearer(demo["tokens"]["approver_alice"]),
    )
    assert response.status_code == 400


def test_a_body_over_the_limit_is_413_before_parsing_and_audited(api, runtime, demo):
    huge = b'{"statement": "' + b"x" * 70_000 + b'"}'
    response = api.post(
        "/v1/drafts/dft_" + "0" * 32 + "/approvals",
        content=huge,
        headers={**bearer(demo["tokens"]["approver_alice"]), "content-type": "application/json"},
    )
    assert response.status_code == 413
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "REQUEST_TOO_LARGE"
    event = last_refusal(runtime, "request.refused")
    assert (event.actor, event.data["error"]["code"]) == ("approver:alice", "REQUEST_TOO_LARGE")


def test_a_body_over_the_limit_with_a_bad_token_is_still_401(api, runtime, demo):
    response = api.post(
        "/v1/drafts/dft_" + "0" * 32 + "/approvals",
        content=b"x" * 70_000,
        headers={**bearer("dg_nope"), "content-type": "application/json"},
    )
    assert response.status_code == 401
    assert last_refusal(runtime, "auth.refused").data["door"] == "http"


async def test_an_mcp_body_over_the_limit_is_413_and_audited(mcp_url, runtime, demo):
    payload = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "get_order", "arguments": {"order_id": "ORD-1004", "x": "y" * 70_000}},
    }
    async with httpx.AsyncClient() as http:
        response = await http.post(
            mcp_url,
            json=payload,
            headers={
                **bearer(demo["tokens"]["agent"]),
                "accept": "application/json, text/event-stream",
            },
        )
    assert response.status_code == 413
    assert response.json()["code"] == "REQUEST_TOO_LARGE"
    event = last_refusal(runtime, "request.refused")
    assert event.actor == "agent:support-agent"


async def test_an_mcp_call_nested_500_deep_is_refused_before_the_sdk_and_audited(
    mcp_url, runtime, demo
):
    # Written by hand: the SDK's own client refuses to serialise this, an attacker does not.
    deep = "[" * 500 + "]" * 500
    body = (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_order",'
        '"arguments":{"order_id":"ORD-1004","x":' + deep + "}}}"
    )
    async with connect(mcp_url, demo["tokens"]["agent"]) as client:
        assert (await client.call_tool("get_order", {"order_id": "ORD-1004"})).is_error is False
    async with httpx.AsyncClient() as http:
        response = await http.post(
            mcp_url,
            content=body,
            headers={
                **bearer(demo["tokens"]["agent"]),
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
                "mcp-protocol-version": "2025-06-18",
            },
        )
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "INVALID_ARGUMENT"
    assert "nested too deeply" in response.json()["message"]
    assert last_refusal(runtime, "request.refused").actor == "agent:support-agent"
