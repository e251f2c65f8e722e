"""``draftgate keys enrolments|approve-enrolment|reject-enrolment|passkeys|revoke-passkey`` as
an operator runs them, in-process, against the test database."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlmodel import Session, col, select

from service.audit.models import AuditEvent
from service.db import session_scope
from service.keys import enrolments, passkeys
from service.keys.models import ApproverKey, ApproverPasskey
from service.keys.schemas import KeyEnrolmentRequest, PasskeyRegistrationRequest
from service.signing import generate_private_key, public_key_b64
from service.sql import utcnow
from service.tokens import actions as tokens
from tests.support import cli
from tests.support.authenticator import SoftwareAuthenticator


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"webauthn_rp_id": "localhost", "webauthn_origins": ["http://localhost:8000"]}


def run(runtime: Any, *args: str) -> Any:
    env = cli.operator_env(runtime)
    env["DRAFTGATE_DEFAULT_TENANT"] = "demo"
    return cli.run("keys", *args, env=env)


def enrol_key(runtime: Any, demo: dict[str, Any]) -> str:
    with session_scope(runtime.engine) as session:
        alice = tokens.authenticate(session, demo["tokens"]["approver_alice"])
        request = KeyEnrolmentRequest(public_key=public_key_b64(generate_private_key()))
        return enrolments.enrol_key(session, alice, request=request, now=utcnow()).enrolment_id


def enrol_passkey(runtime: Any, demo: dict[str, Any]) -> str:
    authenticator = SoftwareAuthenticator(rp_id="localhost", origin="http://localhost:8000")
    with session_scope(runtime.engine) as session:
        alice = tokens.authenticate(session, demo["tokens"]["approver_alice"])
        options = passkeys.registration_options(
            session, alice, settings=runtime.settings, now=utcnow()
        ).options
        request = PasskeyRegistrationRequest(credential=authenticator.create(options))
        return enrolments.enrol_passkey(
            session, alice, settings=runtime.settings, request=request, now=utcnow()
        ).enrolment_id


def last_event(runtime: Any) -> AuditEvent:
    with Session(runtime.engine) as session:
        event = session.scalars(select(AuditEvent).order_by(col(AuditEvent.seq).desc())).first()
        assert event is not None
        return event


def test_the_operator_lists_approves_and_rejects_enrolments(runtime, demo):
    approved_id, rejected_id = enrol_key(runtime, demo), enrol_passkey(runtime, demo)

    listed = run(runtime, "enrolments", "--status", "pending", "--json")

    assert listed.exit_code == 0, listed.output
    assert {e["enrolment_id"]: e["kind"] for e in json.loads(listed.output)} == {
        approved_id: "ed25519",
        rejected_id: "passkey",
    }
    approved = run(runtime, "approve-enrolment", approved_id)
    assert approved.exit_code == 0, approved.output
    assert "is active" in approved.output
    assert (last_event(runtime).type, last_event(runtime).actor) == (
        "key.enrolment_approved",
        "operator:cli",
    )
    rejected = run(runtime, "reject-enrolment", rejected_id, "--reason", "unknown device")
    assert rejected.exit_code == 0, rejected.output
    with Session(runtime.engine) as session:
        assert len(session.scalars(select(ApproverKey)).all()) == 3  # the demo's two + one
        assert session.scalars(select(ApproverPasskey)).all() == []
    again = run(runtime, "approve-enrolment", rejected_id)
    assert again.exit_code != 0
    assert "ENROLMENT_DECIDED" in again.output
    table = run(runtime, "enrolments")
    assert "approved" in table.output
    assert "rejected" in table.output


def test_the_operator_lists_and_revokes_passkeys(runtime, demo):
    enrolment_id = enrol_passkey(runtime, demo)
    assert run(runtime, "approve-enrolment", enrolment_id).exit_code == 0

    listed = run(runtime, "passkeys", "--json")

    assert listed.exit_code == 0, listed.output
    [passkey] = json.loads(listed.output)
    assert (passkey["approver"], passkey["active"]) == ("alice", True)
    revoked = run(runtime, "revoke-passkey", passkey["key_id"])
    assert revoked.exit_code == 0, revoked.output
    assert (last_event(runtime).type, last_event(runtime).actor) == (
        "passkey.revoked",
        "operator:cli",
    )
    assert "revoked" in run(runtime, "passkeys").output
    missing = run(runtime, "revoke-passkey", "passkey-0000000000000000")
    assert missing.exit_code != 0
    assert "PASSKEY_UNAVAILABLE" in missing.output
