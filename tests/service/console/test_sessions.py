"""Signing in to the console and out again: the session row, its cookie, its timeouts."""

from __future__ import annotations

from datetime import timedelta

import httpx
from sqlalchemy import update
from sqlmodel import Session, col, select

from service.audit.models import AuditEvent
from service.db import session_scope
from service.sessions import actions as sessions
from service.sessions.models import ConsoleSession
from service.sql import utcnow
from service.tokens import actions as tokens
from tests.service.console.console import SAME_ORIGIN, csrf_of, page, sign_in, signed_in
from tests.support.backends import both_backends


def cookie_parts(response: httpx.Response, name: str) -> list[str]:
    """The attributes of the Set-Cookie header that sets ``name`` (lower-cased)."""
    [header] = [
        h for h in response.headers.get_list("set-cookie") if h.lower().startswith(name + "=")
    ]
    parts = [part.strip() for part in header.split(";")]
    return [parts[0], *(part.lower() for part in parts[1:])]


def events(runtime, type_: str) -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        statement = select(AuditEvent).where(col(AuditEvent.type) == type_)
        return list(session.exec(statement.order_by(col(AuditEvent.seq))).all())


def session_rows(runtime) -> list[ConsoleSession]:
    with Session(runtime.engine) as session:
        return list(session.exec(select(ConsoleSession)).all())


@both_backends
def test_sign_in_opens_a_session_that_stores_only_a_digest(browser, runtime, demo):
    response = sign_in(browser, demo["tokens"]["approver_alice"])

    assert response.status_code == 303
    assert response.headers["location"] == "/console/"
    secret = browser.cookies.get("dg_session", path="/console")
    assert secret
    assert secret.startswith("dgs_")
    [row] = session_rows(runtime)
    assert row.secret_sha256 == sessions.secret_digest(secret)
    assert secret not in repr(row.model_dump())
    assert (row.tenant, row.subject, row.role.value, row.method.value) == (
        "demo",
        "alice",
        "approver",
        "token",
    )
    inbox = page(browser, "/console/")
    assert inbox.by_id("signed-in-as").text.startswith("alice")
    [event] = events(runtime, "console.signed_in")
    assert event.actor == "approver:alice"
    assert event.data["session_id"] == row.id
    assert secret not in str(event.data)
    assert demo["tokens"]["approver_alice"] not in str(event.data)


def test_the_session_cookie_is_httponly_strict_and_scoped_to_the_console(browser, demo):
    response = sign_in(browser, demo["tokens"]["approver_alice"])

    parts = cookie_parts(response, "dg_session")
    assert parts[0].startswith("dg_session=dgs_")
    assert "httponly" in parts
    assert "samesite=strict" in parts
    assert "path=/console" in parts
    assert "secure" not in parts  # http://127.0.0.1: loopback, where browsers allow it


def test_the_cookie_is_secure_anywhere_but_loopback_http(app, demo):
    from anyio.from_thread import start_blocking_portal

    from tests.support.api_client import _PortalTransport

    origin = "http://console.example"
    with (
        start_blocking_portal("asyncio") as portal,
        httpx.Client(transport=_PortalTransport(app, portal), base_url=origin) as client,
    ):
        form = client.get("/console/sign-in")
        sign_in_cookie = cookie_parts(form, "dg_sign_in")
        assert "secure" in sign_in_cookie
        token = sign_in_cookie[0].split("=", 1)[1]
        response = client.post(
            "/console/sign-in",
            data={"token": demo["tokens"]["approver_alice"], "csrf_token": token, "next": ""},
            headers={"Origin": origin, "Cookie": f"dg_sign_in={token}"},
        )
    assert response.status_code == 303
    parts = cookie_parts(response, "dg_session")
    assert "secure" in parts
    assert "httponly" in parts
    assert "samesite=strict" in parts


def test_agents_and_unknown_tokens_cannot_sign_in_and_the_refusal_is_audited(
    browser, runtime, demo
):
    for token in (demo["tokens"]["agent"], "dg_not-a-token"):
        response = sign_in(browser, token)
        assert response.status_code == 401
        assert page_problem(response) is not None
        assert "dg_session" not in browser.cookies

    refused = [e for e in events(runtime, "auth.refused") if e.data["door"] == "console"]
    assert len(refused) == 2
    assert "agent" in refused[0].data["reason"]
    assert session_rows(runtime) == []


def page_problem(response: httpx.Response) -> str | None:
    from tests.service.console.dom import parse

    element = parse(response.text).by_id("sign-in-problem")
    return element.text if element is not None else None


def test_auditors_and_admins_may_sign_in(browser, demo):
    for who in ("auditor", "admin"):
        browser.cookies.clear()
        assert sign_in(browser, demo["tokens"][who]).status_code == 303
        assert page(browser, "/console/").by_id("signed-in-as") is not None


def test_a_page_without_a_session_redirects_to_sign_in_and_back(browser, demo):
    response = browser.get("/console/drafts/dft_" + "0" * 32)
    assert response.status_code == 303
    assert response.headers["location"] == "/console/sign-in?next=/console/drafts/dft_" + "0" * 32

    signed = sign_in(browser, demo["tokens"]["approver_alice"], next_path="/console/keys")
    assert signed.headers["location"] == "/console/keys"


def test_sign_in_never_redirects_off_the_console(browser, demo):
    for target in ("https://evil.example/", "//evil.example/", "/v1/drafts", "/console/\\\\evil"):
        browser.cookies.clear()
        response = sign_in(browser, demo["tokens"]["approver_alice"], next_path=target)
        assert response.headers["location"] == "/console/", target


def test_a_json_request_without_a_session_is_a_401_problem(browser):
    response = browser.get("/console/executions/exe_" + "0" * 24)

    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "SESSION_REQUIRED"


@both_backends
def test_sign_out_ends_the_session_and_is_audited(browser, runtime, demo):
    csrf = signed_in(browser, demo["tokens"]["approver_alice"])
    secret = browser.cookies.get("dg_session")

    response = browser.post("/console/sign-out", data={"csrf_token": csrf}, headers=SAME_ORIGIN)

    assert response.status_code == 303
    assert response.headers["location"] == "/console/sign-in"
    [row] = session_rows(runtime)
    assert row.ended_at is not None
    assert row.end_reason.value == "signed_out"
    [event] = events(runtime, "console.signed_out")
    assert event.actor == "approver:alice"
    assert event.data["session_id"] == row.id
    # The old cookie, replayed, is dead.
    replay = httpx.Cookies()
    replay.set("dg_session", secret, path="/console")
    browser.cookies = replay
    assert browser.get("/console/").status_code == 303


def move_back(runtime, **columns: timedelta) -> ConsoleSession:
    """Move the one session's timestamps back in time (as if that long had passed)."""
    with session_scope(runtime.engine) as session:
        [row] = session.exec(select(ConsoleSession)).all()
        values = {name: getattr(row, name) - delta for name, delta in columns.items()}
        session.execute(update(ConsoleSession).values(**values))
    [moved] = session_rows(runtime)
    return moved


@both_backends
def test_an_idle_session_ends_at_its_next_request(browser, runtime, demo):
    signed_in(browser, demo["tokens"]["approver_alice"])
    idle = runtime.settings.console_idle_timeout_seconds
    move_back(runtime, last_seen_at=timedelta(seconds=idle))

    response = browser.get("/console/")

    assert response.status_code == 303
    [row] = session_rows(runtime)
    assert row.end_reason.value == "idle"
    [ended] = events(runtime, "console.session_ended")
    assert ended.data["reason"] == "idle"


def test_activity_keeps_a_session_alive(browser, runtime, demo):
    signed_in(browser, demo["tokens"]["approver_alice"])
    idle = runtime.settings.console_idle_timeout_seconds
    before = move_back(runtime, last_seen_at=timedelta(seconds=idle - 60))

    assert browser.get("/console/").status_code == 200  # 60 s before it would have ended

    [row] = session_rows(runtime)
    assert row.ended_at is None
    assert row.last_seen_at > before.last_seen_at + timedelta(seconds=idle - 120)


def test_a_live_refresh_of_the_inbox_is_not_activity(browser, runtime, demo):
    """inbox.js refreshes the rows after each SSE event: an agent proposing every minute must
    not keep an unattended session alive (F9); the person's own requests still do."""
    signed_in(browser, demo["tokens"]["approver_alice"])
    before = move_back(runtime, last_seen_at=timedelta(minutes=5))

    refreshed = browser.get("/console/inbox/rows", headers={"X-Console-Refresh": "1"})

    assert refreshed.status_code == 200
    [row] = session_rows(runtime)
    assert row.last_seen_at == before.last_seen_at
    assert browser.get("/console/inbox/rows").status_code == 200  # a filter change: the person
    [row] = session_rows(runtime)
    assert row.last_seen_at > before.last_seen_at


def test_a_session_ends_at_its_absolute_lifetime_whatever_the_activity(browser, runtime, demo):
    signed_in(browser, demo["tokens"]["approver_alice"])
    lifetime = runtime.settings.console_session_lifetime_seconds
    move_back(runtime, expires_at=timedelta(seconds=lifetime))

    assert browser.get("/console/").status_code == 303
    [row] = session_rows(runtime)
    assert row.end_reason.value == "expired"


@both_backends
def test_revoking_the_token_kills_the_session_at_its_next_request(browser, runtime, demo):
    csrf = signed_in(browser, demo["tokens"]["approver_alice"])
    with session_scope(runtime.engine) as session:
        principal = tokens.authenticate(session, demo["tokens"]["approver_alice"])
        tokens.revoke(session, tenant="demo", token_id=principal.token_id, actor="admin:root")

    assert browser.get("/console/").status_code == 303
    response = browser.post(
        "/console/drafts/dft_" + "0" * 32 + "/execute",
        headers={**SAME_ORIGIN, "X-CSRF-Token": csrf},
    )
    assert response.status_code == 401
    assert response.json()["code"] == "SESSION_REQUIRED"
    [row] = session_rows(runtime)
    assert row.end_reason.value == "credential_revoked"


def test_a_signed_in_person_asking_for_the_form_goes_straight_on(browser, demo):
    signed_in(browser, demo["tokens"]["approver_alice"])
    response = browser.get("/console/sign-in")
    assert response.status_code == 303
    assert response.headers["location"] == "/console/"
    assert csrf_of(browser)


def test_the_sessions_principal_is_the_bearers(browser, runtime, demo):
    signed_in(browser, demo["tokens"]["approver_bob"])
    secret = browser.cookies.get("dg_session")
    with session_scope(runtime.engine) as session:
        verdict = sessions.check(session, secret, now=utcnow(), idle_seconds=60)
        bearer = tokens.authenticate(session, demo["tokens"]["approver_bob"])
    assert verdict.principal == bearer


def test_signing_in_again_ends_the_browsers_previous_session(browser, runtime, demo):
    signed_in(browser, demo["tokens"]["approver_alice"])
    browser.cookies.set("dg_sign_in", "double-submit", path="/console")

    response = browser.post(
        "/console/sign-in",
        data={"token": demo["tokens"]["approver_bob"], "csrf_token": "double-submit"},
        headers=SAME_ORIGIN,
    )

    assert response.status_code == 303
    rows = {row.subject: row for row in session_rows(runtime)}
    assert rows["alice"].end_reason is not None
    assert rows["alice"].end_reason.value == "replaced"
    assert rows["bob"].ended_at is None
    assert page(browser, "/console/").by_id("signed-in-as").text.startswith("bob")
