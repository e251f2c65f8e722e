"""The agent's loop closed over real processes (issue 19): an agent calls ``propose_refund``
as a task of the 2026-07-28 tasks extension on an MCP server that is a process of its own,
listens to its draft and task, an approver signs and requests execution through the API (a
thread of the test process), a real Celery worker (a third process) runs it, and the task
completes with the refund id: pushed, never polled. On the embedded stack and on
PostgreSQL + Redis. The push's latency is measured by bench/b6_agent_loop.py, not here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from harness.approvals import approve, bearer
from harness.mcp_tasks import get_task, listen, propose_as_task, tasks_client
from harness.processes import HttpProcess
from tests.support.backends import both_backends
from tests.support.stacks import StackHost

pytestmark = [pytest.mark.anyio, pytest.mark.full, both_backends]


@pytest.fixture
def mcp_process(stack_host: StackHost, stack: Any) -> Iterator[HttpProcess]:
    """``draftgate serve mcp`` on the stack's database and broker: not the test's process."""
    process = stack_host.deployment.start_http("mcp")
    yield process
    process.terminate()
    process.stop()


async def test_a_proposal_task_completes_with_the_refund_id_pushed_across_processes(
    stack: Any, mcp_process: HttpProcess
):
    demo, agent_token = stack.demo, stack.demo["tokens"]["agent"]
    arguments = {
        "order_id": demo["orders"]["delivered"],
        "amount": {"amount_minor": 1500, "currency": "USD"},
        "reason": "damaged",
    }
    async with tasks_client(mcp_process.mcp_url, agent_token) as agent:
        created = await propose_as_task(agent, "propose_refund", arguments)
    task_id = created["taskId"]
    draft_id = task_id.split(".r")[0]
    uri = f"draftgate://drafts/{draft_id}"
    wanted = {"resourceSubscriptions": [uri], "taskIds": [task_id]}
    frames: list[dict[str, Any]] = []
    async with listen(mcp_process.mcp_url, agent_token, wanted) as stream:
        ack = await anext(stream)
        assert ack["params"]["notifications"] == {
            "resourceSubscriptions": [uri],
            "taskIds": [task_id],
        }
        assert (await anext(stream))["params"]["status"] == "working"

        async def approve_and_execute() -> None:
            approved = await anyio.to_thread.run_sync(
                approve, stack.api_url, demo, draft_id, "alice"
            )
            assert approved.status_code == 201, approved.text
            accepted = await anyio.to_thread.run_sync(
                lambda: httpx.post(
                    f"{stack.api_url}/v1/drafts/{draft_id}/execute",
                    headers=bearer(demo["tokens"]["approver_alice"]),
                    timeout=30,
                )
            )
            assert accepted.status_code == 202, accepted.text

        async with anyio.create_task_group() as group:
            group.start_soon(approve_and_execute)
            with anyio.fail_after(90):
                async for frame in stream:
                    frames.append(frame)
                    if "result" in frame:  # all it followed has ended: closed gracefully
                        break
    tasks = [f["params"] for f in frames if f.get("method") == "notifications/tasks"]
    updates = [f for f in frames if f.get("method") == "notifications/resources/updated"]
    # One resource update per change (signed, approved, queued, running, succeeded); a task
    # is pushed as it stands when its change is read, so a quick execution may skip a step.
    assert len(updates) >= 2
    assert all(task["status"] == "working" for task in tasks[:-1])
    final = tasks[-1]
    assert final["status"] == "completed", stack.worker.output()[-3000:]
    outcome = final["result"]["structuredContent"]["outcome"]
    assert outcome["refund_id"]
    assert outcome["amount_minor"] == 1500
    async with tasks_client(mcp_process.mcp_url, agent_token) as agent:
        assert (await get_task(agent, task_id))["result"] == final["result"]
