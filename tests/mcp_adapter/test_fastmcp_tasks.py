"""FastMCP 4's own task client (``fastmcp-tasks``, the 2026-07-28 tasks extension) against the
MCP door: ``call_tool_task`` makes ``propose_refund`` a task, the task ends with the
approver's rejection, and ``cancel`` withdraws another draft (issue 19).

Importing ``fastmcp_tasks`` makes every FastMCP ``Client`` of the process declare the
extension (and turn proposals into tasks it waits on), so the client runs in a process of
its own, driven line by line from here."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

from tests.support.core import reject_in_core
from tests.support.mcp_helpers import module_host_fixtures

mcp_hosts, module_host, demo, runtime, mcp_url = module_host_fixtures()

CLIENT = textwrap.dedent(
    """
    import asyncio, json, sys
    import fastmcp_tasks
    from fastmcp import Client
    from fastmcp.client.transports import StreamableHttpTransport
    from fastmcp_tasks import call_tool_task

    url, token, arguments = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])

    def say(**what):
        print(json.dumps(what), flush=True)

    async def main():
        transport = StreamableHttpTransport(url, headers={"Authorization": f"Bearer {token}"})
        async with Client(transport) as client:
            task = await call_tool_task(client, "propose_refund", arguments)
            state = await task.status()
            say(task_id=task.task_id, status=state.status, message=state.status_message)
            sys.stdin.readline()  # the approver decides meanwhile
            result = await task.result()
            say(result=result.structured_content)
            another = {**arguments, "amount": {"amount_minor": 901, "currency": "USD"}}
            other = await call_tool_task(client, "propose_refund", another)
            await other.cancel()
            state = await other.status()
            say(task_id=other.task_id, status=state.status)

    asyncio.run(main())
    """
)


def test_fastmcp_task_client_proposes_as_a_task_and_learns_the_rejection(
    mcp_url: str, demo: dict[str, Any], runtime: Any
):
    arguments = {
        "order_id": demo["orders"]["delivered"],
        "amount": {"amount_minor": 900, "currency": "USD"},
        "reason": "damaged",
    }
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, mcp_url, demo["tokens"]["agent"], json.dumps(arguments)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdout is not None
        assert client.stdin is not None
        created = json.loads(client.stdout.readline() or "{}")
        assert created.get("status") == "working", created or client.communicate()[1]
        assert created["message"] == "waiting for 1 of 1 approvals"
        reject_in_core(runtime, demo, created["task_id"].split(".r")[0], "not this time")
        client.stdin.write("go\n")
        client.stdin.flush()
        out, err = client.communicate(timeout=120)
    finally:
        client.kill()
    assert client.returncode == 0, err[-3000:]
    result, cancelled = (json.loads(line) for line in out.splitlines())
    assert result["result"]["status"] == "rejected"
    assert result["result"]["reason"] == "not this time"
    assert cancelled["status"] == "cancelled"
