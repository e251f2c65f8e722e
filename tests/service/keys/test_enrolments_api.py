"""Enrolling credentials over the real API: passkey registration (its single-use challenge,
origin, relying party, user verification) and browser-made Ed25519 keys, each pending until
an admin approves (an active credential) or rejects (nothing) it.

A software authenticator (tests/support/authenticator.py) plays the approver's passkey.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import Session, col, select

from service.api.app import create_app
from service.audit.models import AuditEvent
from service.db import session_scope
from service.keys.models import ApproverKey, ApproverPasskey, KeyEnrolment, WebAuthnChallenge
from service.principal import Role
from service.signing import b64url, generate_private_key, public_key_b64
from service.sql import utcnow
from service.tokens import actions as tokens
from tests.support.api_client import bearer, in_process
from tests.support.authenticator import SoftwareAuthenticator
from tests.support.backends import both_backends

RP_ID = "localhost"
ORIGIN = "http://localhost:8000"
PROBLEM_JSON = "application/problem+json"


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"api_public_url": ORIGIN}


@pytest.fixture
def api(runtime, demo) -> Iterator[httpx.Client]:
    with in_process(create_app(runtime)) as client:
        yield client


def as_(demo: dict[str, Any], who: str) -> dict[str, str]:
    return bearer(demo["tokens"][who if who in demo["tokens"] else f"approver_{who}"])


def options_for(api: httpx.Client, demo: dict[str, Any], who: str = "alice") -> dict[str, Any]:
    response = api.post("/v1/me/passkeys/registration-options", headers=as_(demo, who))
    assert response.status_code == 200, response.text
    options: dict[str, Any] = response.json()["options"]
    return options


def register(
    api: httpx.Client, demo: dict[str, Any], credential: dict[str, Any], who: str = "alice"
) -> httpx.Response:
    return api.post(
        "/v1/me/passkeys",
        json={"credential": credential, "label": "laptop"},
        headers=as_(demo, who),
    )


def audit_types(runtime, since: int = 0) -> list[str]:
    with Session(runtime.engine) as session:
        rows = session.scalars(
            select(AuditEvent).where(col(AuditEvent.seq) > since).order_by(col(AuditEvent.seq))
        ).all()
        return [row.type for row in rows]


def last_seq(runtime) -> int:
    with Session(runtime.engine) as session:
        rows = session.scalars(select(AuditEvent.seq).order_by(col(AuditEvent.seq).desc())).first()
        return int(rows or 0)


def rows(runtime, model: Any) -> list[Any]:
    with Session(runtime.engine) as session:
        return list(session.scalars(select(model)).all())


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    problem: dict[str, Any] = response.json()
    assert problem["code"] == code, problem
    return problem


# --- passkeys ------------------------------------------------------------------------------


@both_backends
def test_registration_options_require_user_verification_and_keep_a_challenge(api, runtime, demo):
    options = options_for(api, demo)

    assert options["rp"] == {"name": "draftgate", "id": RP_ID}
    assert options["authenticatorSelection"]["userVerification"] == "required"
    assert options["attestation"] == "none"
    assert {p["alg"] for p in options["pubKeyCredParams"]} == {-7, -8, -257}
    assert options["user"]["name"] == "alice"
    assert "alice" not in options["user"]["id"]  # a hash, not the name
    [stored] = rows(runtime, WebAuthnChallenge)
    assert (stored.challenge, stored.subject) == (options["challenge"], "alice")
    assert stored.expires_at - stored.created_at == timedelta(seconds=300)


@both_backends
def test_a_registered_passkey_is_pending_until_an_admin_approves_it(api, runtime, demo):
    authenticator = SoftwareAuthenticator(rp_id=RP_ID, origin=ORIGIN)
    seq = last_seq(runtime)

    enrolled = register(api, demo, authenticator.create(options_for(api, demo)))

    assert enrolled.status_code == 201, enrolled.text
    enrolment = enrolled.json()
    assert (enrolment["kind"], enrolment["status"]) == ("passkey", "pending")
    assert enrolment["credential_id"] == authenticator.credential_id_b64
    assert enrolment["key_id"].startswith("passkey-")
    assert rows(runtime, ApproverPasskey) == []
    assert rows(runtime, WebAuthnChallenge) == []  # used up
    mine = api.get("/v1/me/credentials", headers=as_(demo, "alice")).json()
    assert [e["enrolment_id"] for e in mine["enrolments"]] == [enrolment["enrolment_id"]]
    assert mine["passkeys"] == []

    pending = api.get("/v1/admin/key-enrolments", headers=as_(demo, "admin"))
    assert [e["enrolment_id"] for e in pending.json()["enrolments"]] == [enrolment["enrolment_id"]]
    approved = api.post(
        f"/v1/admin/key-enrolments/{enrolment['enrolment_id']}/approve", headers=as_(demo, "admin")
    )

    assert approved.status_code == 200, approved.text
    assert approved.json()["status"] == "approved"
    assert approved.json()["decided_by"] == "admin:root"
    [passkey] = rows(runtime, ApproverPasskey)
    assert (passkey.key_id, passkey.approver, passkey.rp_id) == (
        enrolment["key_id"],
        "alice",
        RP_ID,
    )
    assert (passkey.algorithm, passkey.sign_count, passkey.transports) == (-7, 0, ["internal"])
    mine = api.get("/v1/me/credentials", headers=as_(demo, "alice")).json()
    assert [p["key_id"] for p in mine["passkeys"] if p["active"]] == [enrolment["key_id"]]
    assert audit_types(runtime, seq) == [
        "passkey.registration_started",
        "key.enrolment_requested",
        "admin.viewed",
        "passkey.registered",
        "key.enrolment_approved",
    ]
    again = api.post(
        f"/v1/admin/key-enrolments/{enrolment['enrolment_id']}/reject",
        json={"reason": "changed my mind"},
        headers=as_(demo, "admin"),
    )
    assert_problem(again, 409, "ENROLMENT_DECIDED")


def test_a_registration_challenge_is_used_once(api, runtime, demo):
    options = options_for(api, demo)
    first = SoftwareAuthenticator(rp_id=RP_ID, origin=ORIGIN)
    assert register(api, demo, first.create(options)).status_code == 201

    second = SoftwareAuthenticator(rp_id=RP_ID, origin=ORIGIN)
    replayed = register(api, demo, second.create(options))

    assert_problem(replayed, 409, "REGISTRATION_CHALLENGE_UNKNOWN")
    assert audit_types(runtime)[-1] == "passkey.enrolment.refused"


def test_a_challenge_issued_to_another_approver_or_expired_is_refused(api, runtime, demo):
    bobs = options_for(api, demo, "bob")
    authenticator = SoftwareAuthenticator(rp_id=RP_ID, origin=ORIGIN)
    assert_problem(
        register(api, demo, authenticator.create(bobs), "alice"),
        409,
        "REGISTRATION_CHALLENGE_UNKNOWN",
    )
    alices = options_for(api, demo)
    with session_scope(runtime.engine) as session:
        session.execute(
            update(WebAuthnChallenge)
            .where(col(WebAuthnChallenge.challenge) == alices["challenge"])
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    assert_problem(
        register(api, demo, authenticator.create(alices)), 409, "REGISTRATION_CHALLENGE_UNKNOWN"
    )
    assert rows(runtime, KeyEnrolment) == []


@pytest.mark.parametrize(
    "variant",
    [
        "wrong-origin",
        "wrong-rp-id",
        "no-user-verification",
        "garbage",
        "not-base64",
        "no-response",
        "nested-client-data",
    ],
)
def test_a_registration_that_does_not_verify_is_refused_not_an_error(api, runtime, demo, variant):
    options = options_for(api, demo)
    authenticator = SoftwareAuthenticator(rp_id=RP_ID, origin=ORIGIN)
    if variant == "wrong-origin":
        credential = authenticator.create(options, origin="https://evil.example")
    elif variant == "wrong-rp-id":
        credential = authenticator.create({**options, "rp": {"id": "evil.example"}})
    elif variant == "no-user-verification":
        authenticator.user_verified = False
        credential = authenticator.create(options)
    else:
        credential = authenticator.create(options)
        if variant == "garbage":
            credential["response"]["attestationObject"] = "AAAA"
        elif variant == "nested-client-data":
            credential["response"]["clientDataJSON"] = b64url(b"[" * 20_000)
        elif variant == "not-base64":
            credential["response"]["clientDataJSON"] = "not base64!"
        else:
            del credential["response"]

    response = register(api, demo, credential)

    assert_problem(response, 400, "PASSKEY_REGISTRATION_INVALID")
    assert rows(runtime, KeyEnrolment) == []
    assert audit_types(runtime)[-1] == "passkey.enrolment.refused"


def test_a_passkey_already_registered_or_pending_cannot_be_enrolled_again(api, runtime, demo):
    authenticator = SoftwareAuthenticator(rp_id=RP_ID, origin=ORIGIN)
    assert register(api, demo, authenticator.create(options_for(api, demo))).status_code == 201
    assert_problem(
        register(api, demo, authenticator.create(options_for(api, demo))), 409, "ENROLMENT_PENDING"
    )


def test_only_approvers_enrol_credentials(api, runtime, demo):
    for who in ("auditor", "admin"):
        refused = api.post("/v1/me/passkeys/registration-options", headers=as_(demo, who))
        assert_problem(refused, 403, "PERMISSION_DENIED")
        refused = api.post(
            "/v1/me/key-enrolments",
            json={"public_key": public_key_b64(generate_private_key())},
            headers=as_(demo, who),
        )
        assert_problem(refused, 403, "PERMISSION_DENIED")
    assert audit_types(runtime)[-1] == "key.enrolment.refused"
    assert rows(runtime, WebAuthnChallenge) == []


# --- Ed25519 keys made in a browser ----------------------------------------------------------


@both_backends
def test_a_browser_key_enrolment_approved_becomes_an_active_key(api, runtime, demo):
    public_key = public_key_b64(generate_private_key())

    enrolled = api.post(
        "/v1/me/key-enrolments",
        json={"public_key": public_key, "label": "console"},
        headers=as_(demo, "alice"),
    )

    assert enrolled.status_code == 201, enrolled.text
    enrolment = enrolled.json()
    assert (enrolment["kind"], enrolment["status"], enrolment["public_key"]) == (
        "ed25519",
        "pending",
        public_key,
    )
    assert public_key not in {k.public_key for k in rows(runtime, ApproverKey)}
    approved = api.post(
        f"/v1/admin/key-enrolments/{enrolment['enrolment_id']}/approve", headers=as_(demo, "admin")
    )
    assert approved.status_code == 200, approved.text
    [key] = [k for k in rows(runtime, ApproverKey) if k.public_key == public_key]
    assert (key.key_id, key.approver, key.revoked_at) == (enrolment["key_id"], "alice", None)


def test_a_rejected_enrolment_becomes_nothing(api, runtime, demo):
    public_key = public_key_b64(generate_private_key())
    enrolment = api.post(
        "/v1/me/key-enrolments", json={"public_key": public_key}, headers=as_(demo, "alice")
    ).json()

    rejected = api.post(
        f"/v1/admin/key-enrolments/{enrolment['enrolment_id']}/reject",
        json={"reason": "not a key we issued"},
        headers=as_(demo, "admin"),
    )

    assert rejected.status_code == 200, rejected.text
    assert (rejected.json()["status"], rejected.json()["reason"]) == (
        "rejected",
        "not a key we issued",
    )
    assert public_key not in {k.public_key for k in rows(runtime, ApproverKey)}
    assert audit_types(runtime)[-1] == "key.enrolment_rejected"
    listed = api.get("/v1/admin/key-enrolments?status=rejected", headers=as_(demo, "admin"))
    assert [e["enrolment_id"] for e in listed.json()["enrolments"]] == [enrolment["enrolment_id"]]
    assert api.get("/v1/admin/key-enrolments", headers=as_(demo, "admin")).json() == {
        "enrolments": []
    }
    assert_problem(
        api.post(
            f"/v1/admin/key-enrolments/{enrolment['enrolment_id']}/reject",
            json={"reason": ""},
            headers=as_(demo, "admin"),
        ),
        400,
        "INVALID_ARGUMENT",
    )


def test_a_registered_or_invalid_key_cannot_be_enrolled(api, runtime, demo):
    registered = demo["approvers"]["alice"]["key_id"]
    [alice_key] = [k for k in rows(runtime, ApproverKey) if k.key_id == registered]
    assert_problem(
        api.post(
            "/v1/me/key-enrolments",
            json={"public_key": alice_key.public_key},
            headers=as_(demo, "bob"),
        ),
        409,
        "KEY_ALREADY_REGISTERED",
    )
    for bad in ("A" * 43 + "=", "short", 42):
        assert_problem(
            api.post("/v1/me/key-enrolments", json={"public_key": bad}, headers=as_(demo, "alice")),
            400,
            "INVALID_ARGUMENT",
        )
    assert rows(runtime, KeyEnrolment) == []


def test_an_admin_cannot_decide_on_their_own_enrolment(api, runtime, demo):
    enrolment = api.post(
        "/v1/me/key-enrolments",
        json={"public_key": public_key_b64(generate_private_key())},
        headers=as_(demo, "alice"),
    ).json()
    with session_scope(runtime.engine) as session:
        alice_admin = tokens.issue(
            session, tenant="demo", subject="alice", role=Role.ADMIN, actor="operator:test"
        ).token

    refused = api.post(
        f"/v1/admin/key-enrolments/{enrolment['enrolment_id']}/approve",
        headers=bearer(alice_admin),
    )

    assert_problem(refused, 403, "SELF_ENROLMENT")
    assert audit_types(runtime)[-1] == "admin.enrolment_approve.refused"
    [stored] = rows(runtime, KeyEnrolment)
    assert stored.status == "pending"
