"""What the console refuses, seen from a real browser: text that tries to become markup,
state-changing requests without the session's CSRF token, and requests from another site.

None of it depends on the database, so these run on the embedded stack only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlmodel import col, select
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, PlainTextResponse
from starlette.routing import Route

from harness.servers import serve
from service.audit.models import AuditEvent
from service.db import session_scope
from tests.console.helpers import (
    SMALL,
    agent_view,
    import_key,
    open_card,
    propose_refund,
    sign_in,
    wait_for_text,
)

pytestmark = pytest.mark.full

# The agent writes this note: every way it could try to become markup or script, including
# closing the card's JSON data block. A page-level flag records any script it ran.
HOSTILE_NOTE = (
    "</script><script>window.__pwned = 1</script>"
    '<img class="injected" src="x" onerror="window.__pwned = 2">'
    '<b class="injected">bold?</b> {{ 7*7 }} &amp; \' " <!-- -->'
)
# Elements the hostile text would have created, had anything parsed it as HTML (checked
# apart from the CSP, which would stop the scripts from running even then).
INJECTED = """document.querySelectorAll(
  '.injected, script:not([src]):not([type="application/json"])').length"""


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[str]:
    """Another site: a page that would like to act with the approver's session."""

    async def page(request: Any) -> HTMLResponse:
        return HTMLResponse("<!doctype html><title>elsewhere</title><p>win a prize</p>")

    async def health(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/", page), Route("/healthz", health)])
    with serve(app) as base:
        yield base


def refused_requests(stack: Any, path: str) -> list[str]:
    """The codes of the audited refusals of console requests to ``path``, oldest first."""
    with session_scope(stack.runtime.engine) as session:
        events = session.exec(
            select(AuditEvent)
            .where(AuditEvent.type == "console.request.refused")
            .order_by(col(AuditEvent.seq))
        ).all()
    return [event.data["error"]["code"] for event in events if event.data["path"] == path]


def csrf_token(page: Any) -> str:
    token: str = page.locator('meta[name="csrf-token"]').get_attribute("content") or ""
    assert token
    return token


FETCH = """async ([url, headers, body]) => {
  const response = await fetch(url, {method: "POST", headers, body: JSON.stringify(body)});
  let json = null;
  try { json = await response.json(); } catch {}
  return {status: response.status, type: response.headers.get("content-type"), body: json};
}"""


def test_the_hostile_draft_renders_as_plain_text(new_context, stack):
    page = new_context().new_page()
    sign_in(page, stack.demo["tokens"]["approver_alice"])
    draft_id = propose_refund(stack, SMALL, note=HOSTILE_NOTE)
    page.locator(f'a[href="/console/drafts/{draft_id}"]').wait_for(state="visible")
    open_card(page, draft_id)  # data-card-ready: the JSON block parsed, its digest matched
    assert HOSTILE_NOTE in page.inner_text("main")  # shown as typed
    assert page.evaluate(INJECTED) == 0
    assert page.evaluate("window.__pwned") is None
    shown = page.evaluate("JSON.parse(document.getElementById('draft-data').textContent)")
    assert shown["params"]["note"] == HOSTILE_NOTE


SIGNED_APPROVAL = """async () => {
  const { statementFor } = await import("/console/static/js/card.js");
  const { canonicalBytes } = await import("/console/static/js/jcs.js");
  const keys = await import("/console/static/js/keys.js");
  const draft = JSON.parse(document.getElementById("draft-data").textContent);
  const key = await keys.storedKey(draft.tenant, draft.approver);
  const statement = statementFor(draft, {
    paramsSha256: draft.params_sha256, decision: "approve", keyId: key.key_id,
  });
  return { statement, signature: await keys.signWith(key, canonicalBytes(statement)) };
}"""


def test_a_state_changing_request_needs_the_sessions_csrf_token(new_context, stack):
    page = new_context().new_page()
    sign_in(page, stack.demo["tokens"]["approver_alice"])
    import_key(page, stack.demo, "alice")
    draft_id = propose_refund(stack, SMALL)
    open_card(page, draft_id)
    token = csrf_token(page)
    url = f"/console/drafts/{draft_id}/approvals"
    json_headers = {"Content-Type": "application/json"}
    body = page.evaluate(SIGNED_APPROVAL)  # a valid, signed approval

    missing = page.evaluate(FETCH, [url, json_headers, body])
    wrong = page.evaluate(FETCH, [url, {**json_headers, "X-CSRF-Token": token[::-1]}, body])
    for refused in (missing, wrong):
        assert refused["status"] == 403, refused
        assert refused["type"].startswith("application/problem+json")
        assert refused["body"]["code"] == "CSRF_REFUSED"
    assert agent_view(stack, draft_id)["status"] == "proposed"
    # The very same request with the session's token is accepted.
    accepted = page.evaluate(FETCH, [url, {**json_headers, "X-CSRF-Token": token}, body])
    assert accepted["status"] == 200, accepted
    assert accepted["body"]["draft"]["status"] == "approved"


def test_requests_from_another_origin_are_refused(new_context, stack, elsewhere):
    context = new_context()
    page = context.new_page()
    sign_in(page, stack.demo["tokens"]["approver_alice"])
    draft_id = propose_refund(stack, SMALL)
    open_card(page, draft_id)
    token = csrf_token(page)
    target = f"{stack.api_url}/console/drafts/{draft_id}/execute"

    # With the session's cookie and even its token, a request naming another origin fails.
    forged = context.request.post(
        target,
        headers={"Origin": elsewhere, "X-CSRF-Token": token, "Content-Type": "application/json"},
        data="{}",
    )
    assert forged.status == 403
    assert forged.json()["code"] == "CROSS_ORIGIN_REFUSED"

    # A page of another site can neither read the console nor post to it.
    other = context.new_page()
    other.goto(elsewhere)
    read = other.evaluate(
        """async (url) => {
          try { await fetch(url, {credentials: "include"}); return "read"; }
          catch (error) { return error.name; }
        }""",
        f"{stack.api_url}/console/",
    )
    assert read == "TypeError"  # no CORS grant: the browser withholds the response
    outcome = other.evaluate(
        """async (url) => {
          try {
            await fetch(url, {method: "POST", mode: "no-cors", credentials: "include",
                              headers: {"Content-Type": "text/plain"}, body: "{}"});
            return "opaque";
          } catch (error) { return error.name; }
        }""",
        target,
    )
    # The other page learns nothing (the console's Cross-Origin-Resource-Policy withholds
    # even an opaque answer); the server refused the request, and said so in the audit log.
    assert outcome == "TypeError"
    assert refused_requests(stack, f"/console/drafts/{draft_id}/execute") == [
        "CROSS_ORIGIN_REFUSED",
        "CROSS_ORIGIN_REFUSED",
    ]
    assert agent_view(stack, draft_id)["status"] == "proposed"


def test_the_card_refuses_to_sign_params_that_do_not_hash_to_the_servers_digest(new_context, stack):
    page = new_context().new_page()
    sign_in(page, stack.demo["tokens"]["approver_alice"])
    import_key(page, stack.demo, "alice")
    draft_id = propose_refund(stack, SMALL)

    def tamper(route: Any) -> None:
        # The page's data says 1,500.00 where the server's digest is of 15.00.
        response = route.fetch()
        body = response.text()
        assert '"amount_minor":1500,' in body
        route.fulfill(
            response=response, body=body.replace('"amount_minor":1500,', '"amount_minor":150000,')
        )

    page.route(f"**/console/drafts/{draft_id}", tamper)
    page.goto(f"/console/drafts/{draft_id}")
    assert wait_for_text(page, "#decision-status", "refused").startswith("refused: the params")
    assert page.locator("#approve").is_disabled()
    assert page.locator("#reject").is_disabled()
    assert agent_view(stack, draft_id)["status"] == "proposed"
