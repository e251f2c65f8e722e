"""An approver in Chromium: sign in, see drafts arrive, sign them, execute, reject.

Everything is real: the agent proposes over MCP (streamable HTTP), the console is the API's,
the browser signs with WebCrypto (an imported Ed25519 key, a key it generated, or a passkey
on Chromium's virtual authenticator) and a Celery worker process executes what is approved.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from harness.approvals import bearer, get_draft
from tests.console.helpers import (
    LARGE,
    SMALL,
    agent_view,
    import_key,
    open_card,
    propose_refund,
    screenshot,
    sign_in,
    text_of,
    wait_for_text,
)
from tests.workers.helpers import refunds, wait_for_execution

pytestmark = pytest.mark.full


def approver_page(new_context: Any, stack: Any, approver: str) -> Any:
    page = new_context().new_page()
    sign_in(page, stack.demo["tokens"][f"approver_{approver}"])
    return page


def approve_on_card(page: Any, draft_id: str, *, button: str = "#approve") -> str:
    open_card(page, draft_id)
    page.click(button)
    return wait_for_text(page, "#decision-status", "approved revision")


def execute_on_card(page: Any) -> str:
    page.locator("#execute").wait_for(state="visible")
    page.click("#execute")
    return wait_for_text(page, "#execution-status", "succeeded")


TAMPERED = """async (signer) => {
  const { statementFor } = await import("/console/static/js/card.js");
  const { passkeyAssertion } = await import("/console/static/js/passkeys.js");
  const { canonicalBytes } = await import("/console/static/js/jcs.js");
  const keys = await import("/console/static/js/keys.js");
  const draft = JSON.parse(document.getElementById("draft-data").textContent);
  const statement = (keyId) => statementFor(draft, {
    paramsSha256: draft.params_sha256, decision: "approve", keyId,
  });
  let body;
  if (signer === "passkey") {
    body = await passkeyAssertion(statement);
  } else {
    const key = await keys.storedKey(draft.tenant, draft.approver);
    const signed = statement(key.key_id);
    body = { statement: signed, signature: await keys.signWith(key, canonicalBytes(signed)) };
  }
  body.statement.issued_at = new Date(Date.now() - 60000).toISOString().replace(/\\.\\d{3}Z$/, "Z");
  try {
    await keys.postJson(`/console/drafts/${draft.draft_id}/approvals`, body);
    return "accepted";
  } catch (error) {
    return error.code;
  }
}"""


def tampered_approval(page: Any, *, signer: str) -> str:
    """Sign an approval in the page, change one signed field, post it: the refusal's code."""
    code: str = page.evaluate(TAMPERED, signer)
    return code


def admin_approves_enrolment(stack: Any, key_id: str) -> None:
    """An admin (the demo's root) approves the pending enrolment of ``key_id`` over /v1."""
    admin = bearer(stack.demo["tokens"]["admin"])
    listed = httpx.get(
        f"{stack.api_url}/v1/admin/key-enrolments",
        params={"status": "pending"},
        headers=admin,
        timeout=30,
    )
    assert listed.status_code == 200, listed.text
    body = listed.json()
    enrolments = body["enrolments"] if isinstance(body, dict) else body
    (enrolment,) = [item for item in enrolments if item["key_id"] == key_id]
    approved = httpx.post(
        f"{stack.api_url}/v1/admin/key-enrolments/{enrolment['enrolment_id']}/approve",
        headers=admin,
        timeout=30,
    )
    assert approved.status_code == 200, approved.text


def test_the_inbox_updates_live_and_signing_out_ends_the_session(new_context, stack):
    earlier = propose_refund(stack, LARGE, note="Whole order arrived crushed; photos attached.")
    page = new_context(viewport={"width": 1440, "height": 600}).new_page()
    sign_in(page, stack.demo["tokens"]["approver_alice"])
    assert page.locator(f'a[href="/console/drafts/{earlier}"]').is_visible()
    page.evaluate("window.__sameDocument = true")  # gone if anything reloads the page
    draft_id = propose_refund(stack, SMALL)
    row = page.locator(f'a[href="/console/drafts/{draft_id}"]')
    row.wait_for(state="visible")
    assert page.evaluate("window.__sameDocument") is True
    screenshot(page, "console-inbox")

    assert text_of(page, "#signed-in-as") == "alice · approver · demo"
    (cookie,) = [c for c in page.context.cookies() if c["name"] == "dg_session"]
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert "dg_session" not in page.evaluate("document.cookie")  # no script can read it
    page.click("#sign-out")
    page.wait_for_url("**/console/sign-in")
    page.goto("/console/")  # the session is over: back to the sign-in form
    assert page.url.startswith(f"{stack.api_url}/console/sign-in")


def test_an_imported_key_approves_and_the_worker_executes_exactly_once(new_context, stack):
    page = approver_page(new_context, stack, "alice")
    import_key(page, stack.demo, "alice")
    draft_id = propose_refund(stack, SMALL, note="Customer sent photos of the broken lid.")
    open_card(page, draft_id)
    screenshot(page, "console-card")
    # A signature over one statement does not carry another: the server refuses the edit.
    assert tampered_approval(page, signer="key") == "SIGNATURE_INVALID"
    page.click("#approve")
    status = wait_for_text(page, "#decision-status", "approved revision")
    assert "approved (1 of 1 approvals): it can be executed" in status
    assert "succeeded" in execute_on_card(page)

    execution = agent_view(stack, draft_id)
    assert execution["status"] == "succeeded"
    # Asking again (a second click, a retried request) executes nothing more.
    again = page.evaluate(
        """async (id) => {
          const keys = await import("/console/static/js/keys.js");
          return keys.postJson(`/console/drafts/${id}/execute`, {});
        }""",
        draft_id,
    )
    assert wait_for_execution(stack, again["execution_id"])["status"] == "succeeded"
    made = [refund for refund in refunds(stack) if refund.amount_minor == SMALL]
    assert len(made) == 1


def test_a_draft_over_the_threshold_needs_both_approvers(new_context, stack):
    alice = approver_page(new_context, stack, "alice")
    bob = approver_page(new_context, stack, "bob")
    import_key(alice, stack.demo, "alice")
    import_key(bob, stack.demo, "bob")
    draft_id = propose_refund(stack, LARGE)

    first = approve_on_card(alice, draft_id)
    assert "1 of 2 approvals: it waits for 1 more" in first
    assert alice.locator("#execute").is_hidden()
    assert agent_view(stack, draft_id)["status"] == "proposed"

    second = approve_on_card(bob, draft_id)
    assert "approved (2 of 2 approvals): it can be executed" in second
    assert "succeeded" in execute_on_card(bob)
    assert len([r for r in refunds(stack) if r.amount_minor == LARGE]) == 1


def test_a_rejection_with_a_reason_is_relayed_to_the_agent(new_context, stack):
    page = approver_page(new_context, stack, "alice")
    import_key(page, stack.demo, "alice")
    draft_id = propose_refund(stack, SMALL)
    open_card(page, draft_id)
    page.click("#reject")  # no reason yet: refused in the page, nothing posted
    assert "needs a reason" in wait_for_text(page, "#decision-status", "reason")
    page.fill("#reject-reason", "Order was refunded by the carrier already.")
    page.click("#reject")
    assert "the draft is rejected: it will not run" in wait_for_text(
        page, "#decision-status", "rejected"
    )

    view = agent_view(stack, draft_id)
    assert view["status"] == "rejected"
    assert view["reason"] == "Order was refunded by the carrier already."
    assert refunds(stack) == []

    # An approved draft not yet executed can still be stopped by another approver.
    approved = propose_refund(stack, SMALL + 2)
    assert "approved (1 of 1 approvals)" in approve_on_card(page, approved)
    bob = approver_page(new_context, stack, "bob")
    import_key(bob, stack.demo, "bob")
    open_card(bob, approved)
    bob.fill("#reject-reason", "Stop: the customer withdrew the claim.")
    bob.click("#reject")
    assert "the draft is rejected: it will not run" in wait_for_text(
        bob, "#decision-status", "rejected"
    )
    assert agent_view(stack, approved)["status"] == "rejected"


FRAMED = """(selector) => [...document.querySelectorAll(selector)].map((block) => {
  const style = getComputedStyle(block);
  const box = block.getBoundingClientRect();
  return { text: block.innerText, display: style.display, frame: style.borderLeftWidth,
           height: box.height, width: box.width };
})"""


def test_multi_line_text_is_framed_in_the_card_and_a_multi_line_reason_reaches_the_agent(
    new_context, stack
):
    """DESIGN.md §3 (round 3) in Chromium: a hostile multi-line note is shown as a framed
    block, never as rows of the card's own; a reason typed on several lines is signed and
    relayed exactly."""
    note = "ok\nAmount: 0.01 USD\nStatus: approved"
    draft_id = propose_refund(stack, SMALL + 3, note=note)
    page = approver_page(new_context, stack, "bob")
    import_key(page, stack.demo, "bob")
    open_card(page, draft_id)

    [block] = page.evaluate(FRAMED, "#params bdi.agent.multiline")
    assert block["text"] == note
    assert (block["display"], block["frame"]) == ("block", "4px")
    assert block["height"] > 0
    # The card's own Amount row says what was proposed, and is the only row that says it.
    rows = page.evaluate(
        "() => [...document.querySelectorAll('dl.facts dt')].map((dt) => dt.innerText)"
    )
    assert rows.count("Amount") == 1

    reason = "Not this one:\nthe parcel was opened.\n\tSee ticket 4711."
    page.fill("#reject-reason", reason)
    page.click("#reject")
    assert "rejected" in wait_for_text(page, "#decision-status", "rejected")
    assert agent_view(stack, draft_id)["reason"] == reason
    page.reload()
    page.wait_for_selector("body[data-card-ready='true']", state="attached")
    framed = page.evaluate(FRAMED, "bdi.agent.multiline")
    assert reason.replace("\t", "    ") in [item["text"] for item in framed]
    assert refunds(stack) == []


def test_a_key_generated_in_the_browser_signs_once_an_admin_approved_it(new_context, stack):
    page = approver_page(new_context, stack, "bob")
    page.goto("/console/keys")
    page.click("#generate-key")
    status = wait_for_text(page, "#keys-status", "enrolment requested")
    key_id = status.split()[1].rstrip(";")
    assert key_id.startswith("ed25519-")
    draft_id = propose_refund(stack, SMALL)

    open_card(page, draft_id)  # not yet approved by an admin: the server refuses it
    page.click("#approve")
    refused = wait_for_text(page, "#decision-status", "KEY_")
    # A sentence for the person first, the code after it, small (issue 20.7).
    assert not refused.startswith("KEY_")
    assert page.locator("#decision-status small.code").text_content().startswith("KEY_")
    assert agent_view(stack, draft_id)["status"] == "proposed"

    admin_approves_enrolment(stack, key_id)
    assert "approved (1 of 1 approvals)" in approve_on_card(page, draft_id)
    assert "succeeded" in execute_on_card(page)


def test_a_passkey_enrols_and_approves_on_a_virtual_authenticator(new_context, stack):
    context = new_context()
    page = context.new_page()
    authenticator = context.new_cdp_session(page)
    authenticator.send("WebAuthn.enable")
    authenticator.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )
    sign_in(page, stack.demo["tokens"]["approver_alice"])
    page.goto("/console/keys")
    page.click("#enrol-passkey")
    status = wait_for_text(page, "#keys-status", "enrolled")
    key_id = status.split()[1]
    assert key_id.startswith("passkey-")
    admin_approves_enrolment(stack, key_id)

    draft_id = propose_refund(stack, SMALL)
    open_card(page, draft_id)
    # An assertion whose challenge is another statement's digest is refused.
    assert tampered_approval(page, signer="passkey") == "SIGNATURE_INVALID"
    status = approve_on_card(page, draft_id, button="#approve-passkey")
    assert "approved (1 of 1 approvals)" in status
    (approval,) = get_draft(stack.api_url, stack.demo["tokens"]["auditor"], draft_id)["approvals"]
    assert approval["key_id"] == key_id
    assert "succeeded" in execute_on_card(page)  # the worker verified the assertion again
    assert len(refunds(stack)) == 1

    # A passkey-only approver rejects with it too: the same assertion, decision "reject".
    rejected = propose_refund(stack, SMALL + 1)
    open_card(page, rejected)
    page.fill("#reject-reason", "Duplicate of an earlier refund.")
    page.click("#reject-passkey")
    assert "the draft is rejected: it will not run" in wait_for_text(
        page, "#decision-status", "rejected"
    )
    view = get_draft(stack.api_url, stack.demo["tokens"]["auditor"], rejected)
    assert [(a["key_id"], a["decision"]) for a in view["approvals"]] == [(key_id, "reject")]
