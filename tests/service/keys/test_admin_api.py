"""The admin routes over the real API: approvers and their credentials, and bearer tokens.
Admin role only (403 for everyone else, audited as ``<route>.refused``), every call audited,
errors as problem+json."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlmodel import Session, col, select

from service.api.app import create_app
from service.audit.models import AuditEvent
from service.keys.models import ApproverKey
from service.signing import generate_private_key, key_id_for, public_key_b64
from service.tokens.models import ApiToken
from tests.support.api_client import bearer, in_process
from tests.support.authenticator import SoftwareAuthenticator, enrol_passkey
from tests.support.backends import both_backends

ORIGIN = "http://localhost:8000"
PROBLEM_JSON = "application/problem+json"
ENROLMENT = "enr_" + "0" * 24
TOKEN = "tok_" + "0" * 16
# Every admin route: (method, path, JSON body, route name).
ROUTES = [
    ("GET", "/v1/admin/approvers", None, "admin.approvers"),
    ("GET", "/v1/admin/key-enrolments", None, "admin.enrolments"),
    ("POST", f"/v1/admin/key-enrolments/{ENROLMENT}/approve", None, "admin.enrolment_approve"),
    (
        "POST",
        f"/v1/admin/key-enrolments/{ENROLMENT}/reject",
        {"reason": "x"},
        "admin.enrolment_reject",
    ),
    (
        "POST",
        "/v1/admin/keys",
        {"approver": "mallory", "public_key": "A" * 43},
        "admin.key_register",
    ),
    ("POST", "/v1/admin/keys/ed25519-0000000000000000/revoke", None, "admin.key_revoke"),
    ("POST", "/v1/admin/passkeys/passkey-0000000000000000/revoke", None, "admin.passkey_revoke"),
    ("GET", "/v1/admin/tokens", None, "admin.tokens"),
    ("POST", "/v1/admin/tokens", {"subject": "mallory", "role": "admin"}, "admin.token_issue"),
    ("POST", f"/v1/admin/tokens/{TOKEN}/revoke", None, "admin.token_revoke"),
]


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"api_public_url": ORIGIN}


@pytest.fixture
def api(runtime, demo) -> Iterator[httpx.Client]:
    with in_process(create_app(runtime)) as client:
        yield client


def admin(demo: dict[str, Any]) -> dict[str, str]:
    return bearer(demo["tokens"]["admin"])


def events(runtime) -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        return list(session.scalars(select(AuditEvent).order_by(col(AuditEvent.seq))).all())


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    problem: dict[str, Any] = response.json()
    assert problem["code"] == code, problem
    return problem


def test_every_admin_route_refuses_everyone_but_admins(api, runtime, demo):
    """One test over the whole matrix (the demo is seeded once): each refusal is a 403, one
    ``<route>.refused`` event by the caller, and nothing else."""
    actors = {"approver_alice": "approver:alice", "auditor": "auditor:audrey"}
    with Session(runtime.engine) as session:
        tokens_before = len(session.scalars(select(ApiToken)).all())
    for who, actor in actors.items():
        for method, path, body, name in ROUTES:
            before = len(events(runtime))

            response = api.request(method, path, json=body, headers=bearer(demo["tokens"][who]))

            assert_problem(response, 403, "PERMISSION_DENIED")
            after = events(runtime)[before:]
            assert [(e.type, e.actor) for e in after] == [(f"{name}.refused", actor)], (who, name)
    with Session(runtime.engine) as session:
        assert len(session.scalars(select(ApiToken)).all()) == tokens_before
        assert len(session.scalars(select(ApproverKey)).all()) == 2  # the demo's two


def test_without_a_token_the_admin_routes_answer_401(api, demo):
    assert_problem(api.get("/v1/admin/approvers"), 401, "UNAUTHENTICATED")


@both_backends
def test_an_issued_token_is_shown_once_stored_hashed_works_and_can_be_revoked(api, runtime, demo):
    issued = api.post(
        "/v1/admin/tokens",
        json={"subject": "dave", "role": "auditor", "label": "new hire"},
        headers=admin(demo),
    )

    assert issued.status_code == 201, issued.text
    assert issued.headers["cache-control"] == "no-store"  # no proxy or browser keeps it
    secret = issued.json()["token"]
    token_id = issued.json()["token_id"]
    assert secret.startswith("dg_")
    with Session(runtime.engine) as session:
        stored = session.get(ApiToken, token_id)
        assert stored is not None
        assert stored.token_sha256 == hashlib.sha256(secret.encode()).hexdigest()
    listed = api.get("/v1/admin/tokens", headers=admin(demo))
    assert secret not in listed.text
    assert token_id in {t["token_id"] for t in listed.json()["tokens"]}
    assert api.get("/v1/audit/events", headers=bearer(secret)).status_code == 200
    audited = [e for e in events(runtime) if e.type == "token.issued"][-1]
    assert audited.actor == "admin:root"
    assert secret not in str(audited.data)

    revoked = api.post(f"/v1/admin/tokens/{token_id}/revoke", headers=admin(demo))

    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["revoked_at"] is not None
    assert_problem(api.get("/v1/audit/events", headers=bearer(secret)), 401, "UNAUTHENTICATED")
    assert [e.type for e in events(runtime)][-2:] == ["token.revoked", "auth.refused"]


@pytest.mark.parametrize(
    "body",
    [
        {"subject": "dave", "role": "approver", "tenant": "other"},
        {"subject": "dave", "role": "root"},
        {"subject": "dave", "role": "agent"},  # an agent token names its end user
        {"subject": "", "role": "approver"},
        ["dave"],
    ],
)
def test_a_bad_token_request_is_refused(api, runtime, demo, body):
    with Session(runtime.engine) as session:
        before = len(session.scalars(select(ApiToken)).all())
    assert_problem(
        api.post("/v1/admin/tokens", json=body, headers=admin(demo)), 400, "INVALID_ARGUMENT"
    )
    with Session(runtime.engine) as session:
        assert len(session.scalars(select(ApiToken)).all()) == before
    assert events(runtime)[-1].type == "admin.token_issue.refused"


@pytest.mark.parametrize("role", ["approver", "admin"])
def test_the_api_issues_no_approver_or_admin_token(api, runtime, demo, role):
    # One stolen admin token must not mint the people of a quorum: those are the operator's.
    with Session(runtime.engine) as session:
        before = len(session.scalars(select(ApiToken)).all())

    problem = assert_problem(
        api.post(
            "/v1/admin/tokens", json={"subject": "mallory1", "role": role}, headers=admin(demo)
        ),
        403,
        "PERMISSION_DENIED",
    )

    assert "operator" in problem["detail"]
    with Session(runtime.engine) as session:
        assert len(session.scalars(select(ApiToken)).all()) == before
    assert events(runtime)[-1].type == "admin.token_issue.refused"


@pytest.mark.parametrize(
    ("approver", "why"),
    [
        ("mallory1", "no active approver token"),  # nobody the operator made an approver
        ("root", "own name"),  # the admin themselves: maker ≠ checker
        ("audrey", "no active approver token"),  # an auditor is not an approver
    ],
)
def test_an_admin_registers_keys_only_for_approvers_the_operator_made(
    api, runtime, demo, approver, why
):
    public_key = public_key_b64(generate_private_key())

    problem = assert_problem(
        api.post(
            "/v1/admin/keys",
            json={"approver": approver, "public_key": public_key},
            headers=admin(demo),
        ),
        403,
        "PERMISSION_DENIED",
    )

    assert why.split()[-1] in problem["detail"]
    with Session(runtime.engine) as session:
        assert session.get(ApproverKey, key_id_for(public_key)) is None
    assert events(runtime)[-1].type == "admin.key_register.refused"


def test_an_enrolment_of_an_approver_whose_token_was_revoked_is_not_approved(api, runtime, demo):
    public_key = public_key_b64(generate_private_key())
    alice = bearer(demo["tokens"]["approver_alice"])
    enrolled = api.post("/v1/me/key-enrolments", json={"public_key": public_key}, headers=alice)
    assert enrolled.status_code in (200, 201, 202), enrolled.text
    enrolment_id = enrolled.json()["enrolment_id"]
    with Session(runtime.engine) as session:
        tokens = session.scalars(select(ApiToken).where(col(ApiToken.subject) == "alice")).all()
        token_ids = [token.id for token in tokens]
    for token_id in token_ids:
        api.post(f"/v1/admin/tokens/{token_id}/revoke", headers=admin(demo))

    approved = api.post(f"/v1/admin/key-enrolments/{enrolment_id}/approve", headers=admin(demo))

    assert_problem(approved, 403, "PERMISSION_DENIED")
    with Session(runtime.engine) as session:
        assert session.get(ApproverKey, key_id_for(public_key)) is None
    assert events(runtime)[-1].type == "admin.enrolment_approve.refused"


def test_an_admin_registers_and_revokes_an_approvers_key(api, runtime, demo):
    public_key = public_key_b64(generate_private_key())

    registered = api.post(
        "/v1/admin/keys",
        json={"approver": "bob", "public_key": public_key, "label": "spare"},
        headers=admin(demo),
    )

    assert registered.status_code == 201, registered.text
    assert registered.json()["key_id"] == key_id_for(public_key)
    assert registered.json()["active"] is True
    assert_problem(
        api.post(
            "/v1/admin/keys",
            json={"approver": "bob", "public_key": public_key},
            headers=admin(demo),
        ),
        409,
        "KEY_ALREADY_REGISTERED",
    )
    revoked = api.post(f"/v1/admin/keys/{key_id_for(public_key)}/revoke", headers=admin(demo))
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["active"] is False
    with Session(runtime.engine) as session:
        key = session.get(ApproverKey, key_id_for(public_key))
        assert key is not None
        assert key.revoked_at is not None
    types = [e.type for e in events(runtime)]
    assert types[-3:] == ["key.registered", "admin.key_register.refused", "key.revoked"]
    assert_problem(
        api.post("/v1/admin/keys/ed25519-0000000000000000/revoke", headers=admin(demo)),
        404,
        "KEY_UNAVAILABLE",
    )
    assert_problem(
        api.post("/v1/admin/passkeys/passkey-0000000000000000/revoke", headers=admin(demo)),
        404,
        "PASSKEY_UNAVAILABLE",
    )


@both_backends
def test_the_approvers_list_shows_keys_passkeys_and_status(api, runtime, demo):
    key_id = enrol_passkey(
        api, demo, "alice", SoftwareAuthenticator(rp_id="localhost", origin=ORIGIN)
    )
    api.post(f"/v1/admin/keys/{demo['approvers']['bob']['key_id']}/revoke", headers=admin(demo))

    listed = api.get("/v1/admin/approvers", headers=admin(demo))

    assert listed.status_code == 200, listed.text
    approvers = {a["approver"]: a for a in listed.json()["approvers"]}
    assert set(approvers) == {"alice", "bob"}
    alice, bob = approvers["alice"], approvers["bob"]
    assert (alice["status"], alice["active_tokens"]) == ("active", 1)
    assert [k["key_id"] for k in alice["keys"]] == [demo["approvers"]["alice"]["key_id"]]
    assert [p["key_id"] for p in alice["passkeys"]] == [key_id]
    assert alice["enrolments"][0]["status"] == "approved"
    assert bob["status"] == "no_credential"  # his only key is revoked
    viewed = events(runtime)[-1]
    assert (viewed.type, viewed.data) == ("admin.viewed", {"what": "approvers", "count": 2})
