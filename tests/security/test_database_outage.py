"""A database that goes away (a restart, a failover) is a retryable refusal, never a crash.

The fault drill found it: during a PostgreSQL restart the API answered ``500 Internal
Server Error`` as text/plain. Now both doors say DATABASE_UNAVAILABLE (HTTP 503,
problem+json, retryable) and the call changed nothing.
"""

from __future__ import annotations

import pytest

from mcp_adapter.server import create_http_app
from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.api.errors import PROBLEM_JSON
from service.errors import DomainError
from service.tracing import new_trace_id
from tests.support.api_client import in_process


def test_the_api_answers_a_retryable_503_problem_when_the_database_is_away(unreachable_runtime):
    app = create_app(unreachable_runtime, publisher=lambda task, args: None)
    with in_process(app) as api:
        response = api.get("/v1/drafts", headers={"Authorization": "Bearer dg_whatever"})

    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    assert response.headers["retry-after"] == "1"
    body = response.json()
    assert body["code"] == "DATABASE_UNAVAILABLE"
    assert body["retryable"] is True
    assert "Traceback" not in response.text
    assert "psycopg" not in response.text, "the driver's message is not for the caller"


def test_the_mcp_door_refuses_with_database_unavailable_when_the_database_is_away(
    unreachable_runtime,
):
    door = ToolDoor(unreachable_runtime, stdio_token="dg_whatever")

    with pytest.raises(DomainError) as caught:
        door.call("get_order", {"order_id": "ORD-1002"}, new_trace_id(), None)

    assert caught.value.code == "DATABASE_UNAVAILABLE"
    assert caught.value.retryable is True


def test_the_mcp_http_door_answers_a_retryable_503_when_the_database_is_away(
    unreachable_runtime,
):
    # The SDK's own token check meets the outage first; the outer guard answers for it.
    app = create_http_app(unreachable_runtime)
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    with in_process(app) as client:
        response = client.post(
            "/mcp",
            json=initialize,
            headers={
                "Authorization": "Bearer dg_whatever",
                "Accept": "application/json, text/event-stream",
            },
        )

    assert response.status_code == 503, response.text
    assert response.json()["code"] == "DATABASE_UNAVAILABLE"
    assert response.json()["retryable"] is True
    assert response.headers["retry-after"] == "1"
