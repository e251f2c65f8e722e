"""Acceptance (issue 17): draftgate in front of npm's ``@modelcontextprotocol/server-everything``,
whose tools are named the way MCP allows and action names do not (``get-sum``).

The server (pinned by tests/gateway/upstreams/package-lock.json, run with Node over stdio
behind a recording tap) is named in a gateway file with ``get-sum`` declared a read and
``echo`` a write. The stack starts with it; a real MCP client over streamable HTTP reads
``everything_get_sum`` and proposes ``propose_everything_echo``; one signed approval and the
execute endpoint make a real Celery worker call ``echo`` exactly once, carrying the draft's
idempotency key (the tap counts the ``tools/call`` requests that reached the server, from
every draftgate process). Before the naming rule, this stack could not start: ``RegistryError:
cannot start: action name 'everything_get-sum' is not allowed``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.approvals import approve, bearer, get_draft
from service.config import Settings
from tests.gateway.upstreams.mcp_server import IDEMPOTENCY_META
from tests.gateway.upstreams.processes import NodeCommand, everything_server_command
from tests.support.mcp_client import connect
from tests.support.stacks import Stack
from tests.workers.helpers import wait_for_execution

pytestmark = [pytest.mark.anyio, pytest.mark.full]

TOOLS = {
    "get-sum": {"kind": "read"},
    "echo": {"kind": "write", "summary": "Echo {message}", "risk": "low"},
}
MESSAGE = "hello from behind the gateway"


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> NodeCommand:
    return everything_server_command(tmp_path_factory.mktemp("everything-server"))


@pytest.fixture(scope="module")
def gateway_file(everything: NodeCommand) -> Path:
    return everything.gateway_file(
        everything.tap_log.with_name("gateway.yaml"), "everything", TOOLS
    )


@pytest.fixture
def settings_overrides(gateway_file: Path) -> dict[str, Any]:
    return {"gateway_file": gateway_file}


@pytest.fixture
def stack_settings(
    request: pytest.FixtureRequest, settings_overrides: dict[str, Any], stack_hosts: Any
) -> Settings:
    # The naming rule does not depend on the backend: the embedded stack (SQLite and kombu's
    # SQLite broker, a real Celery worker process) is enough.
    settings: Settings = stack_hosts.settings("sqlite", settings_overrides, request)
    return settings


def execute(stack: Stack, draft_id: str) -> httpx.Response:
    headers = bearer(stack.demo["tokens"]["approver_alice"])
    return httpx.post(f"{stack.api_url}/v1/drafts/{draft_id}/execute", headers=headers, timeout=60)


async def test_get_sum_answers_and_an_approved_echo_runs_exactly_once(stack, everything):
    everything.tap_log.write_text("")
    async with connect(stack.mcp_url, stack.demo["tokens"]["agent"]) as agent:
        listed = {tool.name for tool in (await agent.list_tools()).tools}
        total = await agent.call_tool("everything_get_sum", {"a": 2, "b": 3})
        proposed = await agent.call_tool("propose_everything_echo", {"message": MESSAGE})

    # The agent sees the read under its mapped name and the write only as a proposal.
    assert {"everything_get_sum", "propose_everything_echo"} <= listed
    assert sorted(n for n in listed if "everything" in n) == [
        "everything_get_sum",
        "propose_everything_echo",
    ]
    assert not total.is_error, total.content
    assert total.structured_content["tool"] == "get-sum"
    assert total.structured_content["text"] == "The sum of 2 and 3 is 5."
    [summed] = everything.tool_calls("get-sum")  # the upstream is called by its own name
    assert summed["message"]["params"]["arguments"] == {"a": 2, "b": 3}

    assert not proposed.is_error, proposed.content
    draft_id = proposed.structured_content["draft_id"]
    assert everything.tool_calls("echo") == []  # a proposal calls nothing upstream
    draft = get_draft(stack.api_url, stack.demo["tokens"]["approver_alice"], draft_id)
    assert (draft["action"], draft["summary"]) == ("everything_echo", f"Echo {MESSAGE}")

    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    accepted = execute(stack, draft_id)
    assert accepted.status_code == 202, accepted.text
    execution_id = accepted.json()["execution_id"]
    done = wait_for_execution(stack, execution_id)
    assert done["status"] == "succeeded", (done, stack.worker and stack.worker.output()[-3000:])
    assert len(done["attempts"]) == 1
    assert done["outcome"]["summary"] == f"Echo: {MESSAGE}"
    assert execute(stack, draft_id).json()["execution_id"] == execution_id  # calls nothing

    # Exactly one tools/call of echo reached the server, from the worker, with the draft's key.
    [call] = everything.tool_calls("echo")
    assert call["message"]["params"]["arguments"] == {"message": MESSAGE}
    assert call["message"]["params"]["_meta"][IDEMPOTENCY_META] == f"{draft_id}:1"
    assert call["pid"] != summed["pid"]  # another process's stdio child: the worker's
    verified = httpx.get(
        f"{stack.api_url}/v1/audit/verify",
        headers=bearer(stack.demo["tokens"]["auditor"]),
        timeout=30,
    )
    assert verified.json()["ok"] is True
