"""What guards every /console request: security headers, CSRF, and the origin checks."""

from __future__ import annotations

from sqlmodel import Session, col, select

from service.audit.models import AuditEvent
from tests.service.console.console import CONSOLE_ORIGIN, page, post_json, propose, signed_in
from tests.service.console.test_card import decide_body, draft_data

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def refused_events(runtime, type_: str) -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        return list(session.exec(select(AuditEvent).where(col(AuditEvent.type) == type_)).all())


def test_every_console_response_carries_the_security_headers(browser, door, demo):
    draft = propose(door)
    signed_in(browser, demo["tokens"]["approver_alice"])

    for path in (
        "/console/sign-in",
        "/console/",
        f"/console/drafts/{draft['draft_id']}",
        "/console/keys",
        "/console/static/css/console.css",
        "/console/executions/exe_" + "0" * 24,  # a problem+json answer too
        "/console/credentials",  # JSON for keys.js: never cached either
    ):
        headers = browser.get(path).headers
        assert headers["content-security-policy"] == CSP, path
        assert "unsafe-inline" not in headers["content-security-policy"]
        assert "unsafe-eval" not in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY"
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["x-content-type-options"] == "nosniff"
        expected = "no-cache" if "/static/" in path else "no-store"
        assert headers["cache-control"] == expected, path


def test_the_api_outside_the_console_runs_no_script(browser):
    """Same origin as the console: nothing served outside it may run script (F3)."""
    for path in ("/healthz", "/openapi.json", "/v1/drafts", "/nowhere"):
        headers = browser.get(path).headers
        assert headers["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'"
        assert headers["x-content-type-options"] == "nosniff", path
    assert browser.get("/docs").status_code == 404
    assert browser.get("/redoc").status_code == 404


def test_no_page_has_inline_script_or_style(browser, door, demo):
    draft = propose(door)
    signed_in(browser, demo["tokens"]["approver_alice"])
    for path in ("/console/", f"/console/drafts/{draft['draft_id']}", "/console/keys"):
        document = page(browser, path)
        for script in document.find_all("script"):
            # Either loaded from 'self', or a JSON data block (never executed).
            assert (
                script.attrs.get("src", "").startswith("/console/static/")
                or script.attrs.get("type") == "application/json"
            ), (path, script.attrs)
        assert document.find_all("style") == []
        for element in document.iter():
            assert "style" not in element.attrs, (path, element.tag)
            assert not any(name.startswith("on") for name in element.attrs), (path, element.tag)


def test_htmx_is_loaded_with_its_integrity(browser, demo):
    signed_in(browser, demo["tokens"]["approver_alice"])
    [htmx] = [
        s for s in page(browser, "/console/").find_all("script") if "htmx" in s.attrs.get("src", "")
    ]
    assert htmx.attrs["integrity"].startswith("sha512-")


def test_a_state_changing_request_without_the_csrf_token_is_refused(browser, door, demo, runtime):
    draft = propose(door)
    csrf = signed_in(browser, demo["tokens"]["approver_alice"])
    body = decide_body(
        demo, draft_data(page(browser, f"/console/drafts/{draft['draft_id']}")), "alice"
    )
    path = f"/console/drafts/{draft['draft_id']}/approvals"

    for presented in (None, "", "0" * 64, csrf[:-1] + ("0" if csrf[-1] != "0" else "1")):
        headers = {} if presented is None else {"X-CSRF-Token": presented}
        response = post_json(browser, path, body, None, **headers)
        assert response.status_code == 403, presented
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == "CSRF_REFUSED"

    refused = refused_events(runtime, "console.approval.refused")
    assert {e.data["error"]["code"] for e in refused} == {"CSRF_REFUSED"}
    assert draft_data(page(browser, f"/console/drafts/{draft['draft_id']}"))["status"] == (
        "proposed"
    )
    # The same request with the token goes through.
    assert post_json(browser, path, body, csrf).status_code == 200


def test_a_form_body_on_a_json_route_is_a_problem_not_a_5xx(browser, door, demo):
    """JSON routes take the CSRF token from the header only and read their body once: a
    urlencoded form there (token in a field) is refused, never a 500 ("Stream consumed")."""
    draft = propose(door)
    csrf = signed_in(browser, demo["tokens"]["approver_alice"])
    headers = {"Origin": CONSOLE_ORIGIN}
    for path in (
        f"/console/drafts/{draft['draft_id']}/approvals",
        "/console/credentials/enrolments",
        "/console/credentials/passkeys/options",
    ):
        form = browser.post(path, data={"csrf_token": csrf}, headers=headers)
        assert form.status_code == 403, (path, form.text)
        assert form.json()["code"] == "CSRF_REFUSED"
        both = browser.post(
            path, data={"csrf_token": csrf}, headers={**headers, "X-CSRF-Token": csrf}
        )
        assert both.status_code == 400, (path, both.text)
        assert both.headers["content-type"] == "application/problem+json"
    assert draft_data(page(browser, f"/console/drafts/{draft['draft_id']}"))["status"] == (
        "proposed"
    )


def test_sign_out_needs_the_csrf_token_too(browser, demo):
    signed_in(browser, demo["tokens"]["approver_alice"])
    response = browser.post("/console/sign-out", headers={"Origin": CONSOLE_ORIGIN})
    assert response.status_code == 403
    assert browser.get("/console/").status_code == 200  # still signed in


def test_a_request_from_another_origin_is_refused_even_with_the_token(browser, door, demo, runtime):
    draft = propose(door)
    csrf = signed_in(browser, demo["tokens"]["approver_alice"])
    path = f"/console/drafts/{draft['draft_id']}/execute"

    for headers in (
        {"Origin": "https://evil.example"},
        {"Origin": "http://127.0.0.1:8001"},  # another port is another origin
        {"Origin": "null"},  # a sandboxed frame, with nothing else to show
        {"Origin": "null", "Sec-Fetch-Site": "cross-site"},
        {"Referer": "https://evil.example/page"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {},  # no proof of origin at all
    ):
        response = browser.post(path, headers={"X-CSRF-Token": csrf, **headers})
        assert response.status_code == 403, headers
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == "CROSS_ORIGIN_REFUSED", headers

    refused = refused_events(runtime, "console.request.refused")
    assert refused
    assert all(e.data["error"]["code"] == "CROSS_ORIGIN_REFUSED" for e in refused)


def test_same_origin_proofs_a_browser_gives_are_accepted(browser, door, demo):
    """Origin, or (under Referrer-Policy no-referrer, where a browser may send Origin: null)
    Sec-Fetch-Site: same-origin, or a same-origin Referer."""
    csrf = signed_in(browser, demo["tokens"]["approver_alice"])
    for headers in (
        {"Origin": CONSOLE_ORIGIN},
        {"Origin": "null", "Sec-Fetch-Site": "same-origin"},
        {"Sec-Fetch-Site": "same-origin"},
        {"Referer": CONSOLE_ORIGIN + "/console/"},
    ):
        draft = propose(door, idempotency_key=f"k-{len(headers)}-{sorted(headers)[0]}")
        response = browser.post(
            f"/console/drafts/{draft['draft_id']}/execute",
            headers={"X-CSRF-Token": csrf, **headers},
        )
        # Past the guard and the CSRF check: refused by the core, as not approved.
        assert response.status_code == 409, (headers, response.text)


def test_cross_origin_reads_are_refused_but_links_from_elsewhere_open_pages(browser, demo):
    signed_in(browser, demo["tokens"]["approver_alice"])
    fetched = browser.get(
        "/console/events", headers={"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}
    )
    assert fetched.status_code == 403
    assert fetched.json()["code"] == "CROSS_ORIGIN_REFUSED"
    foreign = browser.get("/console/", headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403
    # A link in a notification e-mail: a top-level navigation (SameSite=Strict keeps the
    # cookie back, so it lands on the sign-in form; that is the browser's part).
    link = browser.get(
        "/console/", headers={"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    )
    assert link.status_code == 200


def test_the_sign_in_form_has_its_own_csrf_token(browser, demo):
    browser.get("/console/sign-in")
    response = browser.post(
        "/console/sign-in",
        data={"token": demo["tokens"]["approver_alice"], "csrf_token": "forged", "next": ""},
        headers={"Origin": CONSOLE_ORIGIN},
    )
    assert response.status_code == 403
    assert response.json()["code"] == "CSRF_REFUSED"
    assert "dg_session" not in browser.cookies


def test_the_console_is_not_in_the_openapi_schema(browser):
    paths = browser.get("/openapi.json").json()["paths"]
    assert not [path for path in paths if path.startswith("/console")]
