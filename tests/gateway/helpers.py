"""Acting as an approver on a gateway draft over the HTTP API (alice of the demo)."""

from __future__ import annotations

from typing import Any

import httpx

from harness.approvals import bearer


def execute(stack: Any, draft_id: str) -> str:
    response = httpx.post(
        f"{stack.api_url}/v1/drafts/{draft_id}/execute",
        headers=bearer(stack.demo["tokens"]["approver_alice"]),
        timeout=60,
    )
    assert response.status_code == 202, response.text
    execution_id: str = response.json()["execution_id"]
    return execution_id


def draft_of(stack: Any, draft_id: str) -> dict[str, Any]:
    response = httpx.get(
        f"{stack.api_url}/v1/drafts/{draft_id}",
        headers=bearer(stack.demo["tokens"]["approver_alice"]),
        timeout=30,
    )
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body
