"""A gateway write bound to its source (issue 20.1): the declared read that answers the record
it changes is read at proposal and again right before the upstream call; a record changed
upstream in between refuses the execution SOURCE_CHANGED with what changed, and the draft,
re-approved against the new state, is executed once.

The ticket desk is a real MCP server in its own process (streamable HTTP); the agent is a
real MCP client, the approvers use the HTTP API, a Celery worker process executes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from harness.approvals import approve
from service.gateway.build import build_gateway
from service.gateway.mcp_client import pool
from tests.gateway.helpers import draft_of, execute
from tests.gateway.upstreams.processes import UpstreamProcess, start_mcp_http
from tests.support.mcp_client import connect
from tests.workers.helpers import wait_for_execution

pytestmark = pytest.mark.full

TICKET = "T-1002"
SOURCE = {
    "read": "get_ticket",
    "arguments": {"ticket_id": "ticket_id"},
    "select": ["data.status", "data.title"],
}


def desk_entry(url: str, **archive: Any) -> dict[str, Any]:
    return {
        "namespace": "desk",
        "transport": "http",
        "url": url,
        "timeout_seconds": 3,
        "tools": {
            "get_ticket": {"kind": "read", "mask": ["customer_email"]},
            "archive_ticket": {
                "kind": "write",
                "summary": "Archive ticket {ticket_id}",
                "source": SOURCE,
                **archive,
            },
        },
    }


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamProcess]:
    upstream = start_mcp_http(tmp_path_factory.mktemp("desk"))
    yield upstream
    pool().close()
    upstream.stop()


@pytest.fixture(scope="module")
def gateway_file(tmp_path_factory: pytest.TempPathFactory, desk: UpstreamProcess) -> Path:
    path = tmp_path_factory.mktemp("gateway") / "gateway.yaml"
    declaration = {"version": 1, "mcp": [desk_entry(desk.mcp_url)]}
    path.write_text(yaml.safe_dump(declaration, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture
def settings_overrides(gateway_file: Path) -> dict[str, Any]:
    return {"gateway_file": gateway_file, "execution_lease_seconds": 20}


def run_execution(stack: Any, draft_id: str) -> dict[str, Any]:
    return wait_for_execution(stack, execute(stack, draft_id))


async def call(url: str, tool: str, arguments: dict[str, Any], token: str | None = None) -> Any:
    async with connect(url, token) as client:
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content


def test_a_ticket_changed_upstream_refuses_the_approved_archive_until_approved_again(stack, desk):
    agent = stack.demo["tokens"]["agent"]
    proposed = anyio.run(
        call, stack.mcp_url, "propose_desk_archive_ticket", {"ticket_id": TICKET}, agent
    )
    draft_id = proposed["draft_id"]
    shown = draft_of(stack, draft_id)
    source = shown["source"]
    assert source["ref"] == f"desk_get_ticket:ticket_id={TICKET}"
    facts = {fact["label"]: fact["value"] for fact in source["facts"]}
    assert facts == {"data.status": "closed", "data.title": "Invoice in the wrong currency"}
    assert shown["statement_to_sign"]["source_revision"] == shown["source_revision"]
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201

    # Someone archives the ticket at the desk itself, behind draftgate's back.
    anyio.run(call, desk.mcp_url, "archive_ticket", {"ticket_id": TICKET})
    assert draft_of(stack, draft_id)["source"]["moved"] is True

    refused = run_execution(stack, draft_id)

    assert refused["status"] == "failed", refused
    assert refused["error"]["code"] == "SOURCE_CHANGED"
    assert {"label": "data.status", "then": "closed", "now": "archived"} in refused["error"][
        "source_changed"
    ]["changes"]
    rebased = draft_of(stack, draft_id)
    assert (rebased["status"], rebased["revision"]) == ("proposed", 2)
    assert desk.ledger.calls("archive_ticket")[-1]["key"] is None  # only the desk's own call

    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    done = run_execution(stack, draft_id)

    assert done["status"] == "succeeded", done
    made = [c for c in desk.ledger.calls("archive_ticket") if c["key"] is not None]
    assert [(c["key"], c["outcome"]) for c in made] == [(f"{draft_id}:2", "applied")]


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ({**SOURCE, "read": "list_tickets"}, "'list_tickets' is not a read declared"),
        ({**SOURCE, "arguments": {"id": "ticket_id"}}, "the read takes no argument 'id'"),
        ({**SOURCE, "arguments": {"ticket_id": "ticket"}}, "the write has no argument 'ticket'"),
    ],
)
def test_a_source_that_cannot_be_read_is_refused_at_start(desk, tmp_path, source, problem):
    path = tmp_path / "gateway.yaml"
    declaration = {"version": 1, "mcp": [desk_entry(desk.mcp_url, source=source)]}
    path.write_text(yaml.safe_dump(declaration, sort_keys=False), encoding="utf-8")

    report = build_gateway(path)

    assert any(problem in p and "archive_ticket" in p for p in report.problems), report.problems
