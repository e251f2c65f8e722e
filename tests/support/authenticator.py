"""A software WebAuthn authenticator: the honest test double of a passkey.

It does what an authenticator and its browser do, byte for byte per WebAuthn Level 2, and
nothing the server could lean on: an ES256 (P-256) credential made with ``cryptography``;
attestation ``none``; authenticator data ``rpIdHash || flags || signCount [|| attested
credential data]``; client data JSON as a browser serialises it; a DER ECDSA signature over
``authenticatorData || SHA-256(clientDataJSON)``. Its counter goes up by one per assertion.

Only the authenticator is simulated: the server under test is real (its API, database and
worker). The browser's own authenticator (Chromium's virtual one) is exercised by the
console's end-to-end test.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from service.canonical import canonical_json
from service.signing import b64url, b64url_decode

UP, UV, AT = 0x01, 0x04, 0x40
AAGUID = bytes(16)  # "none" attestation: an all-zero AAGUID, as privacy-minded platforms send


def authenticator_data(rp_id: str, *, flags: int, sign_count: int, attested: bytes = b"") -> bytes:
    return (
        hashlib.sha256(rp_id.encode()).digest()
        + bytes([flags])
        + sign_count.to_bytes(4, "big")
        + attested
    )


def client_data(kind: str, challenge: bytes, origin: str, **extra: Any) -> bytes:
    """clientDataJSON as a browser writes it: type, challenge, origin, crossOrigin first."""
    data = {"type": kind, "challenge": b64url(challenge), "origin": origin, "crossOrigin": False}
    return json.dumps({**data, **extra}, separators=(",", ":")).encode()


def cose_es256(public_key: ec.EllipticCurvePublicKey) -> bytes:
    numbers = public_key.public_numbers()
    return cbor2.dumps(
        {
            1: 2,  # kty: EC2
            3: -7,  # alg: ES256
            -1: 1,  # crv: P-256
            -2: numbers.x.to_bytes(32, "big"),
            -3: numbers.y.to_bytes(32, "big"),
        }
    )


def es256_sign(key: ec.EllipticCurvePrivateKey, message: bytes) -> bytes:
    # Deterministic (RFC 6979) so a test vector can be reproduced byte for byte.
    return key.sign(message, ec.ECDSA(hashes.SHA256(), deterministic_signing=True))


@dataclass
class SoftwareAuthenticator:
    rp_id: str
    origin: str
    private_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    credential_id: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    sign_count: int = 0
    user_verified: bool = True

    @property
    def credential_id_b64(self) -> str:
        return b64url(self.credential_id)

    def create(self, options: dict[str, Any], *, origin: str | None = None) -> dict[str, Any]:
        """``navigator.credentials.create({publicKey: options})`` as RegistrationResponseJSON."""
        rp_id = options["rp"].get("id", self.rp_id)
        attested = (
            AAGUID
            + len(self.credential_id).to_bytes(2, "big")
            + self.credential_id
            + cose_es256(self.private_key.public_key())
        )
        flags = UP | AT | (UV if self.user_verified else 0)
        auth_data = authenticator_data(
            rp_id, flags=flags, sign_count=self.sign_count, attested=attested
        )
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        client = client_data(
            "webauthn.create", b64url_decode(options["challenge"]), origin or self.origin
        )
        return {
            "id": self.credential_id_b64,
            "rawId": self.credential_id_b64,
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(client),
                "attestationObject": b64url(attestation),
                "transports": ["internal"],
            },
            "authenticatorAttachment": "platform",
            "clientExtensionResults": {},
        }

    def get_assertion(
        self,
        challenge: bytes,
        *,
        rp_id: str | None = None,
        origin: str | None = None,
        user_verified: bool | None = None,
        count: bool = True,
    ) -> dict[str, str]:
        """``navigator.credentials.get()``: the assertion over ``challenge``, in the shape of
        the approval body's ``webauthn`` member. ``count=False`` leaves the counter as it was
        (what a cloned authenticator would send)."""
        if count:
            self.sign_count += 1
        verified = self.user_verified if user_verified is None else user_verified
        auth_data = authenticator_data(
            rp_id or self.rp_id, flags=UP | (UV if verified else 0), sign_count=self.sign_count
        )
        client = client_data("webauthn.get", challenge, origin or self.origin)
        signature = es256_sign(self.private_key, auth_data + hashlib.sha256(client).digest())
        return {
            "credential_id": self.credential_id_b64,
            "authenticator_data": b64url(auth_data),
            "client_data_json": b64url(client),
            "signature": b64url(signature),
        }

    def approval(self, statement: dict[str, Any], **options: Any) -> dict[str, Any]:
        """The approvals request body: the statement and the assertion whose challenge is
        SHA-256(JCS(statement))."""
        challenge = hashlib.sha256(canonical_json(statement)).digest()
        return {"statement": statement, "webauthn": self.get_assertion(challenge, **options)}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def enrol_passkey(
    client: Any, demo: dict[str, Any], approver: str, authenticator: SoftwareAuthenticator
) -> str:
    """Over the API: ``approver`` registers the authenticator's passkey and the demo admin
    approves the enrolment; returns the passkey's key id."""
    token = demo["tokens"][f"approver_{approver}"]
    options = client.post("/v1/me/passkeys/registration-options", headers=bearer(token))
    assert options.status_code == 200, options.text
    credential = authenticator.create(options.json()["options"])
    enrolled = client.post(
        "/v1/me/passkeys",
        json={"credential": credential, "label": f"{approver}'s passkey"},
        headers=bearer(token),
    )
    assert enrolled.status_code == 201, enrolled.text
    enrolment = enrolled.json()
    approved = client.post(
        f"/v1/admin/key-enrolments/{enrolment['enrolment_id']}/approve",
        headers=bearer(demo["tokens"]["admin"]),
    )
    assert approved.status_code == 200, approved.text
    key_id: str = enrolment["key_id"]
    return key_id
