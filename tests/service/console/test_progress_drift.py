"""Every display shows the approval count the execute gate acts on (DESIGN.md §12).

BUG (progress-drift): "how far is this draft from approved" was computed in about nine
places. The queue (``GET /v1/drafts``), the inbox and the agent's ``get_draft`` counted the
approval *rows* recorded, and the draft view, the card and the CLI showed the number
required as the draft stored it at proposal; only the execute gate and the worker counted
verified approvals under the policy configured now. So a stored approval whose signature no
longer verifies, or whose key was revoked since, was shown as counting ("2 of 2" where the
gate counts 1), and a policy tightened since the proposal was shown as still met. Each test
here fails on that code and passes now that every view reads ``service.approvals.progress``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import col

from mcp_adapter.tools import ToolDoor
from service.approvals.models import Approval
from service.db import session_scope
from service.errors import DomainError
from service.keys import actions as keys
from service.policies.schemas import PolicyConfig
from service.signing import load_private_key, sign
from service.tracing import new_trace_id
from tests.service.console.console import page, signed_in
from tests.support.api_client import bearer, in_process
from tests.support.core import approve_in_core, request_execution_in_core

LARGE = 60_000  # 600.00 USD: two approvers
SMALL = 10_000  # 100.00 USD: one approver


@pytest.fixture
def api(app) -> Iterator[httpx.Client]:
    with in_process(app) as client:
        yield client


def propose(door: ToolDoor, amount_minor: int) -> str:
    arguments = {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
    }
    return str(door.call("propose_refund", arguments, new_trace_id(), None)["draft_id"])


def x_of_y(text: str) -> tuple[int, int]:
    received, _, required = text.split(":", maxsplit=1)[0].strip().partition(" of ")
    return int(received), int(required)


def shown(
    api: httpx.Client, browser: httpx.Client, door: ToolDoor, demo: dict[str, Any], draft_id: str
) -> dict[str, tuple[int, int]]:
    """(received, required) as each display shows the draft: the queue, the draft view (what
    ``draftgate approve`` prints), the agent's get_draft, the inbox row and the card."""
    auditor = demo["tokens"]["auditor"]
    [line] = [
        d
        for d in api.get("/v1/drafts", headers=bearer(auditor)).json()["drafts"]
        if d["draft_id"] == draft_id
    ]
    detail = api.get(f"/v1/drafts/{draft_id}", headers=bearer(auditor)).json()
    agent = door.call("get_draft", {"draft_id": draft_id}, new_trace_id(), None)
    signed_in(browser, auditor)
    row = page(browser, "/console/?status=open").by_id(f"draft-{draft_id}").find_all("td")
    card = page(browser, f"/console/drafts/{draft_id}").by_id("approvals-progress")
    return {
        "list": (line["approvals"]["received"], line["approvals"]["required"]),
        "detail": (sum(a["counts"] for a in detail["approvals"]), detail["approvals_required"]),
        "agent": (agent["approvals"]["received"], agent["approvals"]["required"]),
        "inbox": x_of_y(row[4].text),
        "card": x_of_y(card.text),
    }


def everywhere(received: int, required: int) -> dict[str, tuple[int, int]]:
    return dict.fromkeys(("list", "detail", "agent", "inbox", "card"), (received, required))


def test_an_approval_whose_stored_signature_does_not_verify_counts_nowhere(
    runtime, api, browser, door, demo
):
    draft_id = propose(door, LARGE)
    approve_in_core(runtime, demo, draft_id, "alice")
    # Someone with database write access replaces alice's signature (with a real signature
    # of hers, over other bytes).
    alices = load_private_key(Path(demo["approvers"]["alice"]["private_key_file"]))
    forged = sign(alices, b"other bytes")
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Approval).where(col(Approval.draft_id) == draft_id).values(signature=forged)
        )
    approve_in_core(runtime, demo, draft_id, "bob")

    # The approve path counted bob alone: the draft is still proposed. Before, the queue,
    # the inbox and the agent said "2 of 2".
    assert shown(api, browser, door, demo, draft_id) == everywhere(1, 2)
    detail = api.get(f"/v1/drafts/{draft_id}", headers=bearer(demo["tokens"]["auditor"])).json()
    assert detail["status"] == "proposed"
    alice = next(a for a in detail["approvals"] if a["approver"] == "alice")
    assert (alice["counts"], alice["problem"]) == (False, "the signature does not verify")
    assert detail["progress"]["approvers"] == ["bob"]
    agent = door.call("get_draft", {"draft_id": draft_id}, new_trace_id(), None)
    assert "(1 of 2 approvals)" in agent["message"]


def test_an_approval_by_a_key_revoked_since_counts_nowhere(runtime, api, browser, door, demo):
    draft_id = propose(door, LARGE)
    approve_in_core(runtime, demo, draft_id, "alice")
    with session_scope(runtime.engine) as session:
        keys.revoke(
            session, tenant="demo", key_id=demo["approvers"]["alice"]["key_id"], actor="admin:root"
        )

    # Before, the queue, the inbox and the agent still said "1 of 2".
    assert shown(api, browser, door, demo, draft_id) == everywhere(0, 2)


def test_a_policy_tightened_since_the_proposal_is_what_every_display_requires(
    runtime, api, browser, door, demo
):
    draft_id = propose(door, SMALL)
    approve_in_core(runtime, demo, draft_id, "alice")  # one approver was enough: approved
    # The operator now requires two approvers for every refund (a new configuration).
    runtime.policies["refund"] = PolicyConfig.model_validate({"tiers": {"USD": [{"approvals": 2}]}})

    with pytest.raises(DomainError):
        request_execution_in_core(runtime, demo, draft_id)  # the gate wants two
    # Before, every display but the gate showed "1 of 1".
    assert shown(api, browser, door, demo, draft_id) == everywhere(1, 2)
    detail = api.get(f"/v1/drafts/{draft_id}", headers=bearer(demo["tokens"]["auditor"])).json()
    assert (detail["status"], detail["progress"]["met"]) == ("approved", False)
    agent = door.call("get_draft", {"draft_id": draft_id}, new_trace_id(), None)
    assert agent["status"] == "approved"
    assert "will not be executed" in agent["message"]
