"""Readiness of the MCP server, what a load balancer asks before sending agents to a replica:
the database, and nothing else it does not need (no broker: the MCP door never publishes)."""

from __future__ import annotations

from harness.servers import free_port
from mcp_adapter.server import create_http_app
from service.config import Settings
from service.health import readiness
from service.runtime import build_runtime
from tests.support.api_client import in_process


def test_the_mcp_server_is_ready_when_its_database_answers(tmp_path, sqlite_url):
    # A broker nobody runs: the MCP server does not need one.
    settings = Settings(
        state_dir=tmp_path / "state",
        database_url=sqlite_url,
        broker_url=f"redis://127.0.0.1:{free_port()}/0",
    )
    runtime = build_runtime(settings)
    try:
        with in_process(create_http_app(runtime)) as client:
            response = client.get("/readyz")
    finally:
        runtime.engine.dispose()

    assert response.status_code == 200, response.text
    assert response.json() == {"status": "ready", "checks": {"database": "ok"}}


def test_the_mcp_server_is_not_ready_without_its_database_and_says_so(unreachable_runtime):
    with in_process(create_http_app(unreachable_runtime)) as client:
        response = client.get("/readyz")

    assert response.status_code == 503, response.text
    body = response.json()
    assert body["status"] == "not ready"
    assert body["checks"]["database"].startswith("unavailable"), body
    assert "psycopg" not in response.text  # the driver's message is not for the caller


def test_the_api_readiness_names_the_broker_the_mcp_readiness_does_not(tmp_path, sqlite_url):
    settings = Settings(
        state_dir=tmp_path / "state",
        database_url=sqlite_url,
        broker_url=f"redis://127.0.0.1:{free_port()}/0",
    )
    runtime = build_runtime(settings)
    try:
        api = readiness(runtime.engine, settings)
        mcp = readiness(runtime.engine, settings, "mcp")
    finally:
        runtime.engine.dispose()

    assert api["broker"].startswith("unavailable"), api
    assert mcp == {"database": "ok"}
