"""A body over the limit on a console route: 413 in the console's own form (problem+json for
its scripts' routes, its error page for a form), with the console's headers, audited as
``console.request.refused`` under the signed-in person — never a 401 "No bearer token" and a
failed login, which is what the API's own refusal said of a request that has a session
cookie and no bearer token."""

from __future__ import annotations

from sqlmodel import Session, col, select

from service.audit.models import AuditEvent
from tests.service.console.console import propose, same_origin, signed_in
from tests.service.console.dom import parse
from tests.service.console.test_guard import CSP

HUGE = b'{"statement": "' + b"x" * 70_000 + b'"}'


def events_of(runtime, *types: str) -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        statement = select(AuditEvent).where(col(AuditEvent.type).in_(types))
        return list(session.exec(statement.order_by(col(AuditEvent.seq))).all())


def test_an_oversize_json_body_is_413_and_audited_under_the_session(browser, door, demo, runtime):
    draft = propose(door)
    csrf = signed_in(browser, demo["tokens"]["approver_alice"])
    before = events_of(runtime, "auth.refused", "console.request.refused", "request.refused")

    response = browser.post(
        f"/console/drafts/{draft['draft_id']}/approvals",
        content=HUGE,
        headers={
            **same_origin(browser),
            "X-CSRF-Token": csrf,
            "content-type": "application/json",
        },
    )

    assert response.status_code == 413, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "REQUEST_TOO_LARGE"
    assert response.headers["content-security-policy"] == CSP
    assert response.headers["cache-control"] == "no-store"
    after = events_of(runtime, "auth.refused", "console.request.refused", "request.refused")
    [event] = after[len(before) :]
    assert (event.type, event.tenant, event.actor) == (
        "console.request.refused",
        "demo",
        "approver:alice",
    )
    assert event.data["error"]["code"] == "REQUEST_TOO_LARGE"
    assert event.data["session_id"].startswith("cs_")
    assert event.data["path"] == f"/console/drafts/{draft['draft_id']}/approvals"


def test_an_oversize_form_is_413_on_the_consoles_error_page(browser, runtime):
    browser.get("/console/sign-in")
    response = browser.post(
        "/console/sign-in",
        data={"token": "x" * 70_000, "csrf_token": "whatever"},
        headers=same_origin(browser),
    )

    assert response.status_code == 413, response.text[:500]
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"] == CSP
    [problem] = parse(response.text).find_all("p", id="problem")
    assert problem.attrs["data-code"] == "REQUEST_TOO_LARGE"
    [event] = events_of(runtime, "auth.refused", "console.request.refused", "request.refused")
    assert (event.type, event.actor) == ("console.request.refused", "anonymous")


def test_an_oversize_body_from_another_origin_is_not_put_on_the_session(
    browser, door, demo, runtime
):
    """A cross-origin request carrying the cookie proves nothing about who sent it."""
    draft = propose(door)
    signed_in(browser, demo["tokens"]["approver_alice"])

    response = browser.post(
        f"/console/drafts/{draft['draft_id']}/execute",
        content=HUGE,
        headers={"Origin": "https://evil.example", "content-type": "application/json"},
    )

    assert response.status_code == 413, response.text
    [event] = events_of(runtime, "console.request.refused")
    assert event.actor == "anonymous"
    assert "session_id" not in event.data
