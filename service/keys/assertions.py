"""WebAuthn assertions over approval statements: draftgate's second signature scheme.

An approver's passkey signs ``authenticatorData || SHA-256(clientDataJSON)``; the client data
names the challenge, and for an approval the challenge is SHA-256(JCS(statement)). So the
assertion signs the statement exactly as an Ed25519 signature does, with no server-issued
challenge (docs/approvals.md, "Passkeys"). Each rule is checked here first, so a refusal
says which one failed; then the ``webauthn`` library (py_webauthn) verifies the whole
assertion again. An EdDSA passkey's signature is verified by draftgate's one strict Ed25519
verification (``service.signing.verify_bytes``) before that: the library verifies Ed25519
with OpenSSL, which accepts small-order keys and their forged signatures.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidSignature
from webauthn import verify_authentication_response
from webauthn.helpers.exceptions import WebAuthnException

from service.config import Settings
from service.keys.strength import cose_ed25519_key
from service.signing import b64url, b64url_decode, verify_bytes

Check = Literal[
    "malformed",
    "credential",
    "type",
    "challenge",
    "origin",
    "rp_id",
    "user_presence",
    "user_verification",
    "sign_count",
    "signature",
]
FLAG_USER_PRESENT = 0x01
FLAG_USER_VERIFIED = 0x04
AUTHENTICATOR_DATA_MIN_BYTES = 37  # rpIdHash (32) || flags (1) || signCount (4)


@dataclass(frozen=True)
class RelyingParty:
    """Who passkeys are for: the RP ID the authenticator scopes them to, and the origins
    (scheme://host[:port]) a browser may use them at."""

    rp_id: str
    origins: tuple[str, ...]


def relying_party(settings: Settings) -> RelyingParty:
    """The relying party of the settings: ``webauthn_rp_id`` / ``webauthn_origins``, by
    default the host and origin of ``api_public_url`` (the console is served by the API)."""
    parts = urlsplit(settings.api_public_url)
    host = (parts.netloc.rsplit("@", 1)[-1]).lower()
    # As a browser serialises an origin: lower case, no default port.
    default_port = {"http": ":80", "https": ":443"}.get(parts.scheme.lower(), "")
    if default_port and host.endswith(default_port):
        host = host.removesuffix(default_port)
    return RelyingParty(
        rp_id=settings.webauthn_rp_id or (parts.hostname or "localhost"),
        origins=tuple(settings.webauthn_origins) or (f"{parts.scheme.lower()}://{host}",),
    )


@dataclass(frozen=True)
class Assertion:
    """What ``navigator.credentials.get()`` returned, each part base64url without padding."""

    credential_id: str
    authenticator_data: str
    client_data_json: str
    signature: str


class AssertionRefused(ValueError):
    """The assertion does not sign the statement for this relying party; ``check`` says which
    rule failed."""

    def __init__(self, check: Check, message: str) -> None:
        super().__init__(message)
        self.check = check
        self.message = message


def challenge_for(signed_bytes: bytes) -> bytes:
    """The WebAuthn challenge of an approval: SHA-256 of the statement's JCS bytes."""
    return hashlib.sha256(signed_bytes).digest()


def verify_assertion(
    assertion: Assertion,
    *,
    signed_bytes: bytes,
    credential_id: str,
    public_key: str,
    relying_party: RelyingParty,
    sign_count: int | None,
) -> int:
    """Check that the assertion signs ``signed_bytes`` (JCS of the statement) with this
    credential, for this relying party, with the user verified; return its sign count.

    ``sign_count`` is the counter last seen for the credential: the new one must exceed it
    (unless both are 0, what authenticators without a counter send). ``None`` skips that one
    rule, for re-verifying a stored assertion whose counter has since been passed.
    Raises AssertionRefused.
    """
    authenticator_data, client_data = _decoded(assertion)
    if assertion.credential_id != credential_id:
        raise AssertionRefused("credential", "The assertion was made by another credential.")
    _check_client_data(client_data, challenge_for(signed_bytes), relying_party)
    new_count = _check_authenticator_data(authenticator_data, relying_party, sign_count)
    _check_eddsa(assertion, public_key, authenticator_data)
    try:
        verified = verify_authentication_response(
            credential={
                "id": credential_id,
                "rawId": credential_id,
                "type": "public-key",
                "response": {
                    "authenticatorData": assertion.authenticator_data,
                    "clientDataJSON": assertion.client_data_json,
                    "signature": assertion.signature,
                },
            },
            expected_challenge=challenge_for(signed_bytes),
            expected_rp_id=relying_party.rp_id,
            expected_origin=list(relying_party.origins),
            credential_public_key=b64url_decode(public_key),
            credential_current_sign_count=sign_count or 0,
            require_user_verification=True,
        )
    except (WebAuthnException, InvalidSignature, ValueError, TypeError, KeyError) as exc:
        raise AssertionRefused(
            "signature", f"The assertion's signature does not verify ({_short(exc)})."
        ) from None
    return max(verified.new_sign_count, new_count)  # the same number, read twice


def _decoded(assertion: Assertion) -> tuple[bytes, dict[str, object]]:
    try:
        for part in (assertion.credential_id, assertion.signature):
            b64url_decode(part)
        authenticator_data = b64url_decode(assertion.authenticator_data)
        client_data = json.loads(b64url_decode(assertion.client_data_json))
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: "[[[[…"
        raise AssertionRefused(
            "malformed", "The assertion is not base64url, or its client data is not JSON."
        ) from None
    if not isinstance(client_data, dict):
        raise AssertionRefused("malformed", "The assertion's client data is not a JSON object.")
    if len(authenticator_data) < AUTHENTICATOR_DATA_MIN_BYTES:
        raise AssertionRefused("malformed", "The authenticator data is too short.")
    return authenticator_data, client_data


def _check_eddsa(assertion: Assertion, public_key: str, authenticator_data: bytes) -> None:
    """An EdDSA (OKP) passkey: its key must be strong and its signature strictly valid over
    ``authenticatorData || SHA-256(clientDataJSON)``; other key types are the library's."""
    try:
        ed25519_key = cose_ed25519_key(b64url_decode(public_key))
    except ValueError as exc:
        raise AssertionRefused(
            "signature", f"The passkey's public key is refused: {exc}."
        ) from None
    if ed25519_key is None:
        return
    signed = authenticator_data + hashlib.sha256(b64url_decode(assertion.client_data_json)).digest()
    if not verify_bytes(ed25519_key, signed, b64url_decode(assertion.signature)):
        raise AssertionRefused("signature", "The assertion's EdDSA signature does not verify.")


def _check_client_data(
    client_data: dict[str, object], challenge: bytes, relying_party: RelyingParty
) -> None:
    if client_data.get("type") != "webauthn.get":
        raise AssertionRefused("type", "The client data is not of a webauthn.get assertion.")
    if client_data.get("challenge") != b64url(challenge):
        raise AssertionRefused(
            "challenge",
            "The assertion's challenge is not SHA-256(JCS(statement)): it signs another statement.",
        )
    if client_data.get("origin") not in relying_party.origins:
        raise AssertionRefused(
            "origin", "The assertion was made at an origin that is not draftgate's console."
        )
    if client_data.get("crossOrigin") is True:  # made inside a frame of another site
        raise AssertionRefused("origin", "The assertion was made in a cross-origin frame.")


def _check_authenticator_data(
    data: bytes, relying_party: RelyingParty, sign_count: int | None
) -> int:
    if data[:32] != hashlib.sha256(relying_party.rp_id.encode()).digest():
        raise AssertionRefused("rp_id", "The assertion is scoped to another relying party.")
    flags = data[32]
    if not flags & FLAG_USER_PRESENT:
        raise AssertionRefused("user_presence", "The authenticator saw no user present.")
    if not flags & FLAG_USER_VERIFIED:
        raise AssertionRefused(
            "user_verification", "The authenticator did not verify the user (PIN or biometric)."
        )
    new_count = int.from_bytes(data[33:37], "big")
    if sign_count is not None and (new_count or sign_count) and new_count <= sign_count:
        raise AssertionRefused(
            "sign_count",
            f"The signature counter did not increase ({new_count} after {sign_count}): a "
            "replayed assertion or a cloned authenticator.",
        )
    return new_count


def _short(exc: Exception) -> str:
    return (str(exc) or type(exc).__name__)[:200]
