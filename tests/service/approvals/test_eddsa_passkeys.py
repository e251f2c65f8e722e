"""EdDSA (COSE -8) passkeys hold Ed25519 keys, so the same rule holds for them: a weak OKP key
is refused at registration, and an assertion is verified by draftgate's one strict Ed25519
verification (the ``webauthn`` library verifies with OpenSSL, which accepts small-order
keys). An honest EdDSA passkey still registers, signs and counts.

BUG (before issue 17): a passkey whose COSE key is the identity point registered (201), and
one planted in the database signed any statement with R = identity, S = 0 (201).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import cbor2
import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlmodel import Session, col, select

from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.approvals.schemas import Decision, statement_for
from service.audit.models import AuditEvent
from service.canonical import canonical_json
from service.db import session_scope
from service.keys.models import ApproverPasskey, KeyEnrolment
from service.keys.passkeys import key_id_for_credential
from service.signing import b64url, b64url_decode
from service.sql import rfc3339_seconds, utcnow
from tests.service import ed25519_cases as curve
from tests.service.api.test_approvals_api import (
    assert_refused,
    execute,
    post_approval,
    propose,
    snapshot,
    token,
)
from tests.support.api_client import bearer, get_draft, in_process
from tests.support.authenticator import AAGUID, AT, UP, UV, authenticator_data, client_data

RP_ID = "localhost"
ORIGIN = "http://localhost:8000"
IDENTITY = curve.small_order_encodings()[0]
R_IDENTITY_S_ZERO = IDENTITY + bytes(32)


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"api_public_url": ORIGIN}


@pytest.fixture
def api(runtime, demo) -> Iterator[httpx.Client]:
    with in_process(create_app(runtime)) as client:
        yield client


@pytest.fixture
def door(runtime, demo) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


def cose_okp(x: bytes) -> bytes:
    return cbor2.dumps({1: 1, 3: -8, -1: 6, -2: x})  # kty OKP, alg EdDSA, crv Ed25519, x


@dataclass
class EdDSAAuthenticator:
    """An EdDSA software authenticator (tests/support/authenticator.py's is ES256): with a
    real key, or a forger holding only a weak public key (``private_key`` None)."""

    private_key: Ed25519PrivateKey | None = field(default_factory=Ed25519PrivateKey.generate)
    public_key: bytes = b""
    credential_id: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    sign_count: int = 0

    def __post_init__(self) -> None:
        if self.private_key is not None:
            self.public_key = self.private_key.public_key().public_bytes_raw()

    def create(self, options: dict[str, Any]) -> dict[str, Any]:
        attested = (
            AAGUID
            + len(self.credential_id).to_bytes(2, "big")
            + self.credential_id
            + cose_okp(self.public_key)
        )
        auth_data = authenticator_data(RP_ID, flags=UP | UV | AT, sign_count=0, attested=attested)
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        client = client_data("webauthn.create", b64url_decode(options["challenge"]), ORIGIN)
        return {
            "id": b64url(self.credential_id),
            "rawId": b64url(self.credential_id),
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(client),
                "attestationObject": b64url(attestation),
                "transports": ["internal"],
            },
            "clientExtensionResults": {},
        }

    def approval(self, statement: dict[str, Any]) -> dict[str, Any]:
        self.sign_count += 1
        auth_data = authenticator_data(RP_ID, flags=UP | UV, sign_count=self.sign_count)
        challenge = hashlib.sha256(canonical_json(statement)).digest()
        client = client_data("webauthn.get", challenge, ORIGIN)
        signed = auth_data + hashlib.sha256(client).digest()
        signature = self.private_key.sign(signed) if self.private_key else R_IDENTITY_S_ZERO
        return {
            "statement": statement,
            "webauthn": {
                "credential_id": b64url(self.credential_id),
                "authenticator_data": b64url(auth_data),
                "client_data_json": b64url(client),
                "signature": b64url(signature),
            },
        }


def register(api: httpx.Client, demo: dict[str, Any], authenticator: EdDSAAuthenticator):
    alice = bearer(demo["tokens"]["approver_alice"])
    options = api.post("/v1/me/passkeys/registration-options", headers=alice)
    assert options.status_code == 200, options.text
    credential = authenticator.create(options.json()["options"])
    return api.post("/v1/me/passkeys", json={"credential": credential}, headers=alice)


def statement(api: httpx.Client, demo: dict[str, Any], draft_id: str, key_id: str):
    return statement_for(
        get_draft(api, token(demo, "alice"), draft_id),
        decision=Decision.APPROVE,
        approver="alice",
        key_id=key_id,
        issued_at=rfc3339_seconds(utcnow()),
    )


def test_an_honest_eddsa_passkey_registers_signs_and_counts(api, runtime, demo, door):
    authenticator = EdDSAAuthenticator()
    enrolled = register(api, demo, authenticator)
    assert enrolled.status_code == 201, enrolled.text
    enrolment = enrolled.json()
    approved = api.post(
        f"/v1/admin/key-enrolments/{enrolment['enrolment_id']}/approve",
        headers=bearer(demo["tokens"]["admin"]),
    )
    assert approved.status_code == 200, approved.text
    draft_id = propose(door)["draft_id"]

    body = authenticator.approval(statement(api, demo, draft_id, enrolment["key_id"]))
    response = post_approval(api, token(demo, "alice"), draft_id, body)

    assert response.status_code == 201, response.text
    [shown] = response.json()["approvals"]
    assert (shown["counts"], shown["problem"]) == (True, None)
    assert execute(api, token(demo, "alice"), draft_id).status_code == 202


@pytest.mark.parametrize(
    "weak_x",
    [
        pytest.param(IDENTITY, id="identity"),
        pytest.param(curve.small_order_encodings()[3], id="order-8"),
        pytest.param(
            curve.encode(curve.add(curve.mul(0xBEEF, curve.BASE), curve.T8)), id="mixed-order"
        ),
    ],
)
def test_a_weak_eddsa_passkey_is_refused_at_registration(api, runtime, demo, weak_x):
    response = register(api, demo, EdDSAAuthenticator(private_key=None, public_key=weak_x))

    assert response.status_code == 400, response.text
    problem = response.json()
    assert problem["code"] == "WEAK_PUBLIC_KEY"
    assert problem["detail"].startswith("This passkey's public key is refused:")
    with Session(runtime.engine) as session:
        assert session.scalars(select(KeyEnrolment)).all() == []
        event = session.scalars(select(AuditEvent).order_by(col(AuditEvent.seq).desc())).first()
    assert event is not None
    assert event.type == "passkey.enrolment.refused"
    assert event.data["error"]["code"] == "WEAK_PUBLIC_KEY"


def test_a_planted_weak_eddsa_passkey_signs_nothing(api, runtime, demo, door):
    forger = EdDSAAuthenticator(private_key=None, public_key=IDENTITY)
    key_id = key_id_for_credential(b64url(forger.credential_id))
    with session_scope(runtime.engine) as session:
        session.add(
            ApproverPasskey(
                key_id=key_id,
                tenant="demo",
                approver="alice",
                credential_id=b64url(forger.credential_id),
                public_key=b64url(cose_okp(IDENTITY)),
                algorithm=-8,
                sign_count=0,
                transports=["internal"],
                aaguid=str(AAGUID.hex()),
                rp_id=RP_ID,
                origin=ORIGIN,
                label="planted",
                created_at=utcnow(),
            )
        )
    draft_id = propose(door)["draft_id"]
    before = snapshot(runtime, draft_id)

    response = post_approval(
        api, token(demo, "alice"), draft_id, forger.approval(statement(api, demo, draft_id, key_id))
    )

    assert_refused(
        response, 400, "WEAK_PUBLIC_KEY", runtime=runtime, draft_id=draft_id, before=before
    )
    with Session(runtime.engine) as session:
        stored = session.get(ApproverPasskey, key_id)
        assert stored is not None
        assert stored.sign_count == 0
