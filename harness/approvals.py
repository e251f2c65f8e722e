"""Signing as an approver would: build the statement, sign JCS(statement), post it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from service.approvals.schemas import Decision, signed_request, statement_for
from service.signing import key_id_for, load_private_key, public_key_b64
from service.sql import rfc3339_seconds, utcnow


def signed_decision(
    draft: dict[str, Any],
    *,
    approver: str,
    key_file: str | Path,
    decision: Decision = Decision.APPROVE,
    reason: str | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """The approvals request body for a draft as returned by GET /v1/drafts/{id}."""
    key = load_private_key(Path(key_file))
    statement = statement_for(
        draft,
        decision=decision,
        approver=approver,
        key_id=key_id_for(public_key_b64(key)),
        issued_at=rfc3339_seconds(utcnow()),
        reason=reason,
    )
    statement.update(overrides)
    return signed_request(statement, key)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def get_draft(api_url: str, token: str, draft_id: str) -> dict[str, Any]:
    response = httpx.get(f"{api_url}/v1/drafts/{draft_id}", headers=bearer(token), timeout=30)
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def approve(api_url: str, demo: dict[str, Any], draft_id: str, approver: str) -> httpx.Response:
    """Sign and post an approval as ``alice`` or ``bob`` of the demo manifest."""
    token = demo["tokens"][f"approver_{approver}"]
    draft = get_draft(api_url, token, draft_id)
    body = signed_decision(
        draft, approver=approver, key_file=demo["approvers"][approver]["private_key_file"]
    )
    return httpx.post(
        f"{api_url}/v1/drafts/{draft_id}/approvals", json=body, headers=bearer(token), timeout=30
    )
