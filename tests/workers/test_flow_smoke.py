from __future__ import annotations

import time

import httpx
import pytest

from tests.support.approvals import approve, bearer
from tests.support.mcp_client import connect

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_propose_approve_execute_succeeds_once(stack):
    demo = stack.demo
    async with connect(stack.mcp_url, demo["tokens"]["agent"]) as agent:
        proposed = await agent.call_tool(
            "propose_refund",
            {
                "order_id": demo["orders"]["delivered"],
                "amount": {"amount_minor": 1500, "currency": "USD"},
                "reason": "damaged",
            },
        )
        draft_id = proposed.structured_content["draft_id"]
        assert approve(stack.api_url, demo, draft_id, "alice").status_code == 201
        accepted = httpx.post(
            f"{stack.api_url}/v1/drafts/{draft_id}/execute",
            headers=bearer(demo["tokens"]["approver_alice"]),
            timeout=30,
        )
        assert accepted.status_code == 202
        deadline = time.monotonic() + 60
        while True:
            state = (await agent.call_tool("get_draft", {"draft_id": draft_id})).structured_content
            if state["status"] in ("succeeded", "failed") or time.monotonic() > deadline:
                break
            time.sleep(0.3)
    assert state["status"] == "succeeded", stack.worker.output()[-3000:]
    assert state["outcome"]["amount_minor"] == 1500
