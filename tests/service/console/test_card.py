"""The confirmation card: the DOM contract the browser's JavaScript reads, money with its
exponent, the policy so far, and approving / executing through the console's JSON endpoints
with a real Ed25519 signature (tests/support/approvals.py); a forged one is refused."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import update
from sqlmodel import Session, col, select

from harness.approvals import signed_decision
from service.approvals.schemas import Decision
from service.audit.models import AuditEvent
from service.db import session_scope
from service.drafts.models import Draft
from tests.service.console.console import page, post_json, propose, signed_in
from tests.service.console.dom import Element
from tests.support.backends import both_backends


def draft_data(card: Element) -> dict[str, Any]:
    [script] = card.find_all("script", id="draft-data")
    assert script.attrs["type"] == "application/json"
    data: dict[str, Any] = json.loads(script.text)
    return data


def decide_body(demo, data: dict[str, Any], approver: str, **kwargs: Any) -> dict[str, Any]:
    return signed_decision(
        data,
        approver=approver,
        key_file=demo["approvers"][approver]["private_key_file"],
        **kwargs,
    )


def test_the_card_meets_the_dom_contract(browser, door, demo):
    draft = propose(door, 2_500)
    csrf = signed_in(browser, demo["tokens"]["approver_alice"])

    card = page(browser, f"/console/drafts/{draft['draft_id']}")

    data = draft_data(card)
    assert data == {
        "draft_id": draft["draft_id"],
        "tenant": "demo",
        "revision": 1,
        "action": "refund",
        "contract_version": data["contract_version"],
        "params": {
            "order_id": "ORD-1004",
            "amount": {"amount_minor": 2_500, "currency": "USD"},
            "reason": "damaged",
        },
        "params_sha256": draft["params_sha256"],
        "source_revision": data["source_revision"],
        "approver": "alice",
        "status": "proposed",
        "policy": {"required": 1, "approved": 0},
        "execution_id": None,
        "execution_status": None,
    }
    for id in ("approve", "reject", "execute"):
        assert card.by_id(id).tag == "button", id
    assert card.by_id("reject-reason").tag == "textarea"
    assert "hidden" in card.by_id("execute").attrs  # shown once the draft is approved
    assert "hidden" not in card.by_id("approve").attrs
    assert card.by_id("decision-status").text == ""
    assert card.by_id("execution-status") is not None
    [meta] = card.find_all("meta", name="csrf-token")
    assert meta.attrs["content"] == csrf
    modules = [s.attrs["src"] for s in card.find_all("script", type="module")]
    assert "/console/static/js/card.js" in modules


def test_money_policy_and_expiry_are_shown(browser, door, demo):
    draft = propose(door, 60_000)  # 600.00 USD: two approvers
    signed_in(browser, demo["tokens"]["approver_alice"])

    card = page(browser, f"/console/drafts/{draft['draft_id']}")

    assert card.by_id("amount").text.startswith("600.00 USD")
    assert "60000 minor units" in card.by_id("amount").text
    assert card.by_id("approvals-progress").text.strip() == "0 of 2"
    assert card.by_id("expires-at").attrs["datetime"].startswith(draft["expires_at"][:16])
    params = {
        row.find_all("th")[0].text: row.find_all("td")[0].text
        for row in card.by_id("params").find_all("tr")[1:]
    }
    assert params == {
        "order_id": "ORD-1004",
        "amount": "600.00 USD (60000 minor units)",
        "reason": "damaged",
    }


def test_edited_amount_columns_show_the_signed_amount_and_offer_no_signing(
    browser, door, demo, runtime
):
    """F4: someone who can write to the database edits the amount columns (and the digest of
    another draft): the card and the inbox show the params' amount, warn, offer no approval."""
    edited = propose(door, 70_000)  # 700.00 USD signed
    digest = propose(door, 1_234)
    honest = propose(door, 2_500)
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Draft)
            .where(col(Draft.id) == edited["draft_id"])
            .values(amount_minor=700, summary="Refund 7.00 USD for ORD-1004")
        )
        session.execute(
            update(Draft).where(col(Draft.id) == digest["draft_id"]).values(params_sha256="0" * 64)
        )
    signed_in(browser, demo["tokens"]["approver_alice"])

    card = page(browser, f"/console/drafts/{edited['draft_id']}")
    assert card.by_id("amount").text.startswith("700.00 USD")
    assert "7.00 USD" in card.by_id("inconsistent").text
    assert card.by_id("approve") is None
    assert card.by_id("approve-passkey") is None
    assert "does not match its params" in card.by_id("approve-blocked").text
    assert card.by_id("reject") is not None  # stopping it is still possible
    tampered = page(browser, f"/console/drafts/{digest['draft_id']}")
    assert "digest" in tampered.by_id("inconsistent").text
    assert tampered.by_id("approve") is None
    fine = page(browser, f"/console/drafts/{honest['draft_id']}")
    assert fine.by_id("inconsistent") is None
    assert fine.by_id("approve") is not None

    rows = page(browser, "/console/inbox/rows")
    amount = rows.by_id(f"draft-{edited['draft_id']}").find_all("td")[2].text
    assert amount.startswith("700.00 USD")
    assert "does not match its params" in amount
    assert "does not match" in rows.by_id(f"draft-{digest['draft_id']}").find_all("td")[2].text
    assert "does not match" not in rows.by_id(f"draft-{honest['draft_id']}").find_all("td")[2].text


@both_backends
def test_approving_through_the_console_then_executing(browser, door, demo, runtime):
    draft = propose(door, 2_500)
    csrf = signed_in(browser, demo["tokens"]["approver_alice"])
    data = draft_data(page(browser, f"/console/drafts/{draft['draft_id']}"))

    response = post_json(
        browser,
        f"/console/drafts/{draft['draft_id']}/approvals",
        decide_body(demo, data, "alice"),
        csrf,
    )

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["draft"]["status"] == "approved"
    assert [a["approver"] for a in body["draft"]["approvals"]] == ["alice"]
    card = page(browser, f"/console/drafts/{draft['draft_id']}")
    assert "hidden" not in card.by_id("execute").attrs
    assert draft_data(card)["policy"] == {"required": 1, "approved": 1}

    executed = post_json(browser, f"/console/drafts/{draft['draft_id']}/execute", None, csrf)

    assert executed.status_code == 202, executed.text
    execution_id = executed.json()["execution_id"]
    assert executed.json()["status"] == "queued"
    again = post_json(browser, f"/console/drafts/{draft['draft_id']}/execute", None, csrf)
    assert again.json()["execution_id"] == execution_id  # once, whatever is clicked twice
    status = browser.get(f"/console/executions/{execution_id}")
    assert status.status_code == 200
    assert status.json()["status"] == "queued"
    with Session(runtime.engine) as session:
        requested = session.exec(
            select(AuditEvent).where(col(AuditEvent.type) == "execution.requested")
        ).all()
    assert [e.actor for e in requested] == ["approver:alice"]  # the session's principal


def test_a_forged_signature_is_refused_and_audited(browser, door, demo, runtime):
    draft = propose(door, 2_500)
    csrf = signed_in(browser, demo["tokens"]["approver_alice"])
    data = draft_data(page(browser, f"/console/drafts/{draft['draft_id']}"))
    body = decide_body(demo, data, "alice")
    body["signature"] = ("A" if body["signature"][0] != "A" else "B") + body["signature"][1:]

    response = post_json(browser, f"/console/drafts/{draft['draft_id']}/approvals", body, csrf)

    assert response.status_code == 403
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "SIGNATURE_INVALID"
    with Session(runtime.engine) as session:
        [refused] = session.exec(
            select(AuditEvent).where(col(AuditEvent.type) == "console.approval.refused")
        ).all()
    assert refused.actor == "approver:alice"
    assert refused.data["error"]["code"] == "SIGNATURE_INVALID"
    assert draft_data(page(browser, f"/console/drafts/{draft['draft_id']}"))["status"] == (
        "proposed"
    )


def test_signing_as_someone_else_is_refused(browser, door, demo):
    """The identity is the session's credential's: alice cannot post bob's statement."""
    draft = propose(door, 2_500)
    csrf = signed_in(browser, demo["tokens"]["approver_alice"])
    data = draft_data(page(browser, f"/console/drafts/{draft['draft_id']}"))

    response = post_json(
        browser,
        f"/console/drafts/{draft['draft_id']}/approvals",
        decide_body(demo, {**data}, "bob"),
        csrf,
    )

    assert response.status_code == 403
    assert response.json()["code"] == "APPROVER_MISMATCH"


def test_rejecting_with_a_reason(browser, door, demo):
    draft = propose(door, 2_500)
    csrf = signed_in(browser, demo["tokens"]["approver_alice"])
    data = draft_data(page(browser, f"/console/drafts/{draft['draft_id']}"))
    body = decide_body(demo, data, "alice", decision=Decision.REJECT, reason="not damaged")

    response = post_json(browser, f"/console/drafts/{draft['draft_id']}/approvals", body, csrf)

    assert response.status_code == 200
    assert response.json()["draft"]["status"] == "rejected"
    assert door.call("get_draft", {"draft_id": draft["draft_id"]}, None, None)["reason"] == (
        "not damaged"
    )


def test_the_proposers_own_card_offers_no_decision(browser, runtime, demo):
    """A draft whose proposer is the signed-in approver (maker = checker) offers no approve."""
    from mcp_adapter.tools import ToolDoor
    from service.db import session_scope
    from service.principal import Role
    from service.tokens import actions as tokens

    with session_scope(runtime.engine) as session:
        issued = tokens.issue(
            session,
            tenant="demo",
            subject="alice",
            role=Role.AGENT,
            on_behalf_of="cust-ada",
            actor="operator:test",
        )
    # An agent whose subject is alice: her own proposal.
    draft = propose(ToolDoor(runtime, stdio_token=issued.token), 2_500)
    signed_in(browser, demo["tokens"]["approver_alice"])

    card = page(browser, f"/console/drafts/{draft['draft_id']}")

    assert "maker and checker" in card.by_id("approve-blocked").text
    assert "hidden" in card.by_id("approve").attrs
    assert "disabled" in card.by_id("approve").attrs


def test_an_unknown_or_malformed_draft_is_a_404_page(browser, demo):
    signed_in(browser, demo["tokens"]["approver_alice"])
    for draft_id in ("dft_" + "0" * 32, "not-a-draft", "dft_" + "0" * 500):
        response = browser.get(f"/console/drafts/{draft_id}")
        assert response.status_code == 404, draft_id
        assert "DRAFT_UNAVAILABLE" in response.text or "unavailable" in response.text.lower()


def test_admins_see_no_card(browser, door, demo):
    draft = propose(door, 2_500)
    signed_in(browser, demo["tokens"]["admin"])

    response = browser.get(f"/console/drafts/{draft['draft_id']}")

    assert response.status_code == 403
