"""Passkeys as the second signature scheme, over the real API (docs/approvals.md, "Passkeys").

A software authenticator (tests/support/authenticator.py) stands in for the approver's
passkey; everything else is real: the API in-process, the core, the database. Each refusal
is checked as for Ed25519 (tests/service/api/test_approvals_api.py): the problem, exactly one
``approval.refused`` audit event with its code, and nothing else recorded — here also that
the passkey's sign counter did not move.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlmodel import Session, col, select

from harness.approvals import signed_decision
from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.approvals.models import Approval
from service.approvals.schemas import Decision, statement_for
from service.keys.models import ApproverPasskey
from service.signing import b64url
from service.sql import rfc3339_seconds, utcnow
from tests.service.api.test_approvals_api import (
    LARGE,
    SMALL,
    assert_refused,
    events,
    execute,
    post_approval,
    propose,
    snapshot,
    token,
)
from tests.support.api_client import bearer, get_draft, in_process
from tests.support.authenticator import SoftwareAuthenticator, enrol_passkey
from tests.support.backends import both_backends

RP_ID = "localhost"
ORIGIN = "http://localhost:8000"


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    # The console at a host name: browsers refuse an IP address as a relying party id.
    return {"api_public_url": ORIGIN}


@pytest.fixture
def api(runtime, demo) -> Iterator[httpx.Client]:
    with in_process(create_app(runtime)) as client:
        yield client


@pytest.fixture
def door(runtime, demo) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


@pytest.fixture
def passkey(api, demo) -> tuple[SoftwareAuthenticator, str]:
    """alice's passkey, registered and approved by the admin: (authenticator, key id)."""
    authenticator = SoftwareAuthenticator(rp_id=RP_ID, origin=ORIGIN)
    return authenticator, enrol_passkey(api, demo, "alice", authenticator)


def statement(
    api: httpx.Client, demo: dict[str, Any], draft_id: str, key_id: str
) -> dict[str, Any]:
    draft = get_draft(api, token(demo, "alice"), draft_id)
    return statement_for(
        draft,
        decision=Decision.APPROVE,
        approver="alice",
        key_id=key_id,
        issued_at=rfc3339_seconds(utcnow()),
    )


def stored_passkey(runtime, key_id: str) -> ApproverPasskey:
    with Session(runtime.engine) as session:
        found = session.get(ApproverPasskey, key_id)
        assert found is not None
        return found


# --- the scheme works --------------------------------------------------------------------


@both_backends
def test_a_passkey_approval_is_accepted_counted_and_audited(api, runtime, demo, door, passkey):
    authenticator, key_id = passkey
    draft_id = propose(door)["draft_id"]

    response = post_approval(
        api,
        token(demo, "alice"),
        draft_id,
        authenticator.approval(statement(api, demo, draft_id, key_id)),
    )

    assert response.status_code == 201, response.text
    draft = response.json()
    assert draft["status"] == "approved"
    [shown] = draft["approvals"]
    assert (shown["key_id"], shown["counts"], shown["problem"]) == (key_id, True, None)
    with Session(runtime.engine) as session:
        [approval] = session.scalars(
            select(Approval).where(col(Approval.draft_id) == draft_id)
        ).all()
    assert approval.scheme == "webauthn"
    assert approval.authenticator_data
    assert approval.client_data_json
    assert stored_passkey(runtime, key_id).sign_count == 1
    [audited] = [e for e in events(runtime, type="approval.approved") if e.draft_id == draft_id]
    assert audited.data["scheme"] == "webauthn"
    assert audited.data["sign_count"] == 1
    assert execute(api, token(demo, "alice"), draft_id).status_code == 202


@both_backends
def test_two_approvers_one_ed25519_one_passkey_make_a_quorum_of_two(
    api, runtime, demo, door, passkey
):
    authenticator, key_id = passkey
    draft_id = propose(door, LARGE)["draft_id"]  # 600.00 USD: two approvers
    bob = signed_decision(
        get_draft(api, token(demo, "bob"), draft_id),
        approver="bob",
        key_file=demo["approvers"]["bob"]["private_key_file"],
    )
    assert post_approval(api, token(demo, "bob"), draft_id, bob).json()["status"] == "proposed"

    response = post_approval(
        api,
        token(demo, "alice"),
        draft_id,
        authenticator.approval(statement(api, demo, draft_id, key_id)),
    )

    assert response.status_code == 201, response.text
    assert response.json()["status"] == "approved"
    assert sorted(a["approver"] for a in response.json()["approvals"] if a["counts"]) == [
        "alice",
        "bob",
    ]
    accepted = execute(api, token(demo, "alice"), draft_id)
    assert accepted.status_code == 202, accepted.text


def test_the_statement_to_sign_names_the_only_credential(api, demo, door, passkey, runtime):
    _, key_id = passkey
    # alice has her demo Ed25519 key and now a passkey: two credentials, no guess.
    draft_id = propose(door)["draft_id"]
    assert get_draft(api, token(demo, "alice"), draft_id)["statement_to_sign"]["key_id"] is None
    revoked = api.post(
        f"/v1/admin/keys/{demo['approvers']['alice']['key_id']}/revoke",
        headers=bearer(demo["tokens"]["admin"]),
    )
    assert revoked.status_code == 200, revoked.text
    assert get_draft(api, token(demo, "alice"), draft_id)["statement_to_sign"]["key_id"] == key_id


# --- refusals ----------------------------------------------------------------------------


def _refuse(api, runtime, demo, draft_id, body, status, code, key_id) -> None:
    count = stored_passkey(runtime, key_id).sign_count
    before = snapshot(runtime, draft_id)
    response = post_approval(api, token(demo, "alice"), draft_id, body)
    assert_refused(response, status, code, runtime=runtime, draft_id=draft_id, before=before)
    assert stored_passkey(runtime, key_id).sign_count == count


@pytest.mark.parametrize(
    ("options", "status", "code"),
    [
        pytest.param(
            {"origin": "https://evil.example"}, 403, "ASSERTION_INVALID", id="wrong-origin"
        ),
        pytest.param({"rp_id": "evil.example"}, 403, "ASSERTION_INVALID", id="wrong-rp-id"),
        pytest.param({"user_verified": False}, 403, "USER_NOT_VERIFIED", id="no-user-verification"),
    ],
)
def test_an_assertion_made_elsewhere_or_without_verification_is_refused(
    api, runtime, demo, door, passkey, options, status, code
):
    authenticator, key_id = passkey
    draft_id = propose(door)["draft_id"]
    body = authenticator.approval(statement(api, demo, draft_id, key_id), **options)
    _refuse(api, runtime, demo, draft_id, body, status, code, key_id)


def _flip(text: str, at: int) -> str:
    replacement = "A" if text[at] != "A" else "B"
    return text[:at] + replacement + text[at + 1 :]


@pytest.mark.parametrize(
    "tampering",
    [
        "statement-edited",
        "signature-flipped",
        "authenticator-data-edited",
        "client-data-edited",
        "other-authenticator",
    ],
)
def test_a_tampered_assertion_or_statement_is_refused_as_an_invalid_signature(
    api, runtime, demo, door, passkey, tampering
):
    authenticator, key_id = passkey
    draft_id = propose(door)["draft_id"]
    body = authenticator.approval(statement(api, demo, draft_id, key_id))
    assertion = body["webauthn"]
    if tampering == "statement-edited":  # a later issued_at than the one signed
        body["statement"]["issued_at"] = rfc3339_seconds(utcnow()).replace("Z", ".5Z")
    elif tampering == "signature-flipped":
        assertion["signature"] = _flip(assertion["signature"], 20)
    elif tampering == "authenticator-data-edited":  # the counter bytes, within the signed data
        assertion["authenticator_data"] = _flip(assertion["authenticator_data"], 46)
    elif tampering == "client-data-edited":  # still JSON, a different "type" casing... any byte
        assertion["client_data_json"] = _flip(assertion["client_data_json"], 60)
    else:  # a different key claiming alice's credential id
        impostor = SoftwareAuthenticator(
            rp_id=RP_ID, origin=ORIGIN, credential_id=authenticator.credential_id
        )
        body = impostor.approval(body["statement"])
    code = {"client-data-edited": None}.get(tampering, "SIGNATURE_INVALID")
    count = stored_passkey(runtime, key_id).sign_count
    before = snapshot(runtime, draft_id)
    response = post_approval(api, token(demo, "alice"), draft_id, body)
    problem = response.json()
    # An edited client data byte lands in the challenge (another statement) or breaks the
    # JSON; either way it is refused, and says which.
    assert problem["code"] in ({code} if code else {"SIGNATURE_INVALID", "ASSERTION_INVALID"})
    assert_refused(
        response, 403, problem["code"], runtime=runtime, draft_id=draft_id, before=before
    )
    assert stored_passkey(runtime, key_id).sign_count == count


def test_a_counter_that_does_not_increase_is_refused_as_a_replay(api, runtime, demo, door, passkey):
    authenticator, key_id = passkey
    first = propose(door)["draft_id"]
    accepted = post_approval(
        api,
        token(demo, "alice"),
        first,
        authenticator.approval(statement(api, demo, first, key_id)),
    )
    assert accepted.status_code == 201, accepted.text
    second = propose(door, SMALL + 100)["draft_id"]

    # The same counter again (a cloned authenticator, or an assertion replayed).
    replayed = authenticator.approval(statement(api, demo, second, key_id), count=False)
    _refuse(api, runtime, demo, second, replayed, 403, "SIGN_COUNT_NOT_INCREASED", key_id)

    fresh = authenticator.approval(statement(api, demo, second, key_id))
    assert post_approval(api, token(demo, "alice"), second, fresh).status_code == 201
    assert stored_passkey(runtime, key_id).sign_count == 2


def test_the_same_assertion_cannot_approve_another_draft(api, runtime, demo, door, passkey):
    authenticator, key_id = passkey
    first = propose(door)["draft_id"]
    body = authenticator.approval(statement(api, demo, first, key_id))
    assert post_approval(api, token(demo, "alice"), first, body).status_code == 201
    second = propose(door, SMALL + 100)["draft_id"]
    moved = {
        "statement": statement(api, demo, second, key_id)
        | {"issued_at": body["statement"]["issued_at"]},
        "webauthn": body["webauthn"],
    }
    _refuse(api, runtime, demo, second, moved, 403, "SIGNATURE_INVALID", key_id)


def test_a_passkey_not_yet_approved_by_an_admin_signs_nothing(api, runtime, demo, door):
    authenticator = SoftwareAuthenticator(rp_id=RP_ID, origin=ORIGIN)
    alice = bearer(token(demo, "alice"))
    options = api.post("/v1/me/passkeys/registration-options", headers=alice).json()["options"]
    enrolled = api.post(
        "/v1/me/passkeys", json={"credential": authenticator.create(options)}, headers=alice
    )
    assert enrolled.status_code == 201, enrolled.text
    key_id = enrolled.json()["key_id"]
    assert enrolled.json()["status"] == "pending"
    draft_id = propose(door)["draft_id"]
    before = snapshot(runtime, draft_id)

    response = post_approval(
        api,
        token(demo, "alice"),
        draft_id,
        authenticator.approval(statement(api, demo, draft_id, key_id)),
    )

    assert_refused(
        response, 403, "KEY_NOT_OWNED", runtime=runtime, draft_id=draft_id, before=before
    )


def test_a_revoked_passkey_signs_nothing_and_its_approvals_stop_counting(
    api, runtime, demo, door, passkey
):
    authenticator, key_id = passkey
    approved = propose(door)["draft_id"]
    body = authenticator.approval(statement(api, demo, approved, key_id))
    assert post_approval(api, token(demo, "alice"), approved, body).status_code == 201
    revoked = api.post(
        f"/v1/admin/passkeys/{key_id}/revoke", headers=bearer(demo["tokens"]["admin"])
    )
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["active"] is False

    refused = execute(api, token(demo, "alice"), approved)
    assert refused.status_code == 409
    assert refused.json()["code"] == "APPROVAL_KEY_REVOKED"
    other = propose(door, SMALL + 100)["draft_id"]
    before = snapshot(runtime, other)
    response = post_approval(
        api,
        token(demo, "alice"),
        other,
        authenticator.approval(statement(api, demo, other, key_id)),
    )
    assert_refused(response, 403, "KEY_REVOKED", runtime=runtime, draft_id=other, before=before)


def test_an_ed25519_signature_and_an_assertion_together_or_neither_are_refused(
    api, runtime, demo, door, passkey
):
    authenticator, key_id = passkey
    draft_id = propose(door)["draft_id"]
    body = authenticator.approval(statement(api, demo, draft_id, key_id))
    for broken in ({**body, "signature": "A" * 86}, {"statement": body["statement"]}):
        before = snapshot(runtime, draft_id)
        response = post_approval(api, token(demo, "alice"), draft_id, broken)
        problem = assert_refused(
            response, 400, "INVALID_ARGUMENT", runtime=runtime, draft_id=draft_id, before=before
        )
        assert "exactly one of signature" in problem["detail"]


def test_client_data_nested_past_the_parsers_limit_is_refused_not_an_error(
    api, runtime, demo, door, passkey
):
    authenticator, key_id = passkey
    draft_id = propose(door)["draft_id"]
    body = authenticator.approval(statement(api, demo, draft_id, key_id))
    body["webauthn"]["client_data_json"] = b64url(b"[" * 2_900)
    _refuse(api, runtime, demo, draft_id, body, 403, "ASSERTION_INVALID", key_id)
