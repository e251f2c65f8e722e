"""Passkeys (WebAuthn) as approver credentials: registration options, verifying a
registration, activating an approved one, revoking, listing (docs/approvals.md, "Passkeys").

A passkey is registered by its approver in the console and becomes usable only when an admin
approves its enrolment (service.keys.enrolments), like a key generated in a browser: a bearer
token alone must never be enough to sign.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session
from webauthn import generate_registration_options, options_to_json, verify_registration_response
from webauthn.helpers import decode_credential_public_key
from webauthn.helpers.cose import COSEAlgorithmIdentifier
from webauthn.helpers.structs import (
    AttestationConveyancePreference,
    AuthenticatorSelectionCriteria,
    AuthenticatorTransport,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from service.audit import actions as audit
from service.config import Settings
from service.keys import errors, repository, strength
from service.keys.assertions import relying_party
from service.keys.models import ApproverPasskey, KeyEnrolment, WebAuthnChallenge
from service.keys.schemas import PasskeyInfo, RegistrationOptions
from service.principal import Principal, Role
from service.signing import b64url, b64url_decode

RP_NAME = "draftgate"
# ES256 first: what platform and roaming authenticators (and Chromium's virtual one) make.
ALGORITHMS = [
    COSEAlgorithmIdentifier.ECDSA_SHA_256,
    COSEAlgorithmIdentifier.EDDSA,
    COSEAlgorithmIdentifier.RSASSA_PKCS1_v1_5_SHA_256,
]
TRANSPORTS = frozenset(transport.value for transport in AuthenticatorTransport)


def key_id_for_credential(credential_id: str) -> str:
    """A passkey's key id: ``passkey-`` + 16 hex of SHA-256 of the raw credential id."""
    return "passkey-" + hashlib.sha256(b64url_decode(credential_id)).hexdigest()[:16]


def registration_options(
    session: Session, principal: Principal, *, settings: Settings, now: datetime
) -> RegistrationOptions:
    """Options for creating a passkey (user verification required), with a fresh challenge
    kept server-side for ``webauthn_registration_ttl_seconds`` and usable once."""
    principal.require(Role.APPROVER)
    party = relying_party(settings)
    ttl = settings.webauthn_registration_ttl_seconds
    repository.forget_expired_challenges(session, now=now)
    challenge = secrets.token_bytes(32)
    registered = repository.passkeys_for(session, principal.tenant, principal.subject)
    options = generate_registration_options(
        rp_id=party.rp_id,
        rp_name=RP_NAME,
        user_name=principal.subject,
        user_id=_user_handle(principal),
        challenge=challenge,
        timeout=ttl * 1000,
        attestation=AttestationConveyancePreference.NONE,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
        exclude_credentials=[
            PublicKeyCredentialDescriptor(id=b64url_decode(passkey.credential_id))
            for passkey in registered
            if passkey.revoked_at is None
        ],
        supported_pub_key_algs=ALGORITHMS,
    )
    expires_at = now + timedelta(seconds=ttl)
    session.add(
        WebAuthnChallenge(
            challenge=b64url(challenge),
            tenant=principal.tenant,
            subject=principal.subject,
            created_at=now,
            expires_at=expires_at,
        )
    )
    audit.record(
        session,
        tenant=principal.tenant,
        actor=principal.actor,
        type="passkey.registration_started",
        data={"rp_id": party.rp_id, "expires_at": expires_at.isoformat()},
    )
    return RegistrationOptions(options=json.loads(options_to_json(options)), expires_at=expires_at)


def verify_registration(
    session: Session,
    principal: Principal,
    *,
    settings: Settings,
    credential: dict[str, Any],
    now: datetime,
) -> dict[str, Any]:
    """Verify what ``navigator.credentials.create()`` returned against a challenge issued to
    this principal (consumed here); the passkey's material for its enrolment."""
    party = relying_party(settings)
    client_data = _client_data(credential)
    challenge = client_data.get("challenge")
    if not isinstance(challenge, str) or not repository.take_challenge(
        session, principal.tenant, principal.subject, challenge, now=now
    ):
        raise errors.registration_challenge_unknown()
    if client_data.get("crossOrigin") is True:
        raise errors.passkey_registration_invalid("it was made in a cross-origin frame.")
    try:
        verified = verify_registration_response(
            credential=credential,
            expected_challenge=b64url_decode(challenge),
            expected_rp_id=party.rp_id,
            expected_origin=list(party.origins),
            require_user_verification=True,
            supported_pub_key_algs=ALGORITHMS,
        )
        algorithm = int(decode_credential_public_key(verified.credential_public_key).alg)
    except Exception as exc:  # the library parses caller-shaped JSON and CBOR: any failure
        # of it is a refusal of this registration, never a server error
        raise errors.passkey_registration_invalid(f"{_short(exc)}.") from None
    weakness = strength.cose_key_problem(verified.credential_public_key)
    if weakness is not None:  # an EdDSA passkey must hold a strong Ed25519 key
        raise errors.weak_public_key("This passkey's public key", weakness)
    return {
        "credential_id": b64url(verified.credential_id),
        "public_key": b64url(verified.credential_public_key),
        "algorithm": algorithm,
        "sign_count": verified.sign_count,
        "transports": _transports(credential),
        "aaguid": verified.aaguid,
        "rp_id": party.rp_id,
        "origin": str(client_data["origin"]),
    }


def activate(session: Session, enrolment: KeyEnrolment, *, actor: str, now: datetime) -> str:
    """Make an approved passkey enrolment an active credential; returns its key id."""
    material = enrolment.material
    if repository.passkey_by_credential_id(session, material["credential_id"]) is not None:
        raise errors.key_already_registered()
    passkey = ApproverPasskey(
        key_id=enrolment.key_id,
        tenant=enrolment.tenant,
        approver=enrolment.approver,
        credential_id=material["credential_id"],
        public_key=material["public_key"],
        algorithm=material["algorithm"],
        sign_count=material["sign_count"],
        transports=list(material["transports"]),
        aaguid=material["aaguid"],
        rp_id=material["rp_id"],
        origin=material["origin"],
        label=enrolment.label,
        created_at=now,
    )
    session.add(passkey)
    audit.record(
        session,
        tenant=passkey.tenant,
        actor=actor,
        type="passkey.registered",
        data={
            "key_id": passkey.key_id,
            "approver": passkey.approver,
            "credential_id": passkey.credential_id,
            "algorithm": passkey.algorithm,
            "aaguid": passkey.aaguid,
            "enrolment_id": enrolment.id,
        },
    )
    return passkey.key_id


def revoke(session: Session, *, tenant: str, key_id: str, actor: str, now: datetime) -> PasskeyInfo:
    """Revoke a passkey: from now on nothing it signs is accepted, and what it approved
    before no longer counts (as for a revoked key)."""
    passkey = repository.get_passkey(session, tenant, key_id)
    if passkey is None:
        raise errors.passkey_unavailable(key_id)
    if passkey.revoked_at is None:
        passkey.revoked_at = now
        session.add(passkey)
        audit.record(
            session,
            tenant=tenant,
            actor=actor,
            type="passkey.revoked",
            data={"key_id": passkey.key_id, "approver": passkey.approver},
        )
    return info(passkey)


def list_passkeys(
    session: Session, *, tenant: str, approver: str | None = None
) -> list[PasskeyInfo]:
    return [info(passkey) for passkey in repository.passkeys_for(session, tenant, approver)]


def info(passkey: ApproverPasskey) -> PasskeyInfo:
    return PasskeyInfo(
        key_id=passkey.key_id,
        tenant=passkey.tenant,
        approver=passkey.approver,
        credential_id=passkey.credential_id,
        algorithm=passkey.algorithm,
        sign_count=passkey.sign_count,
        transports=passkey.transports,
        aaguid=passkey.aaguid,
        rp_id=passkey.rp_id,
        label=passkey.label,
        created_at=passkey.created_at,
        last_used_at=passkey.last_used_at,
        revoked_at=passkey.revoked_at,
        active=passkey.revoked_at is None,
    )


def _user_handle(principal: Principal) -> bytes:
    # Stable per approver (an authenticator replaces its own older passkey for the same user)
    # and no name in clear: the WebAuthn user handle must not carry personal data.
    return hashlib.sha256(
        f"draftgate\x00{principal.tenant}\x00{principal.subject}".encode()
    ).digest()


def _client_data(credential: dict[str, Any]) -> dict[str, Any]:
    response = credential.get("response")
    encoded = response.get("clientDataJSON") if isinstance(response, dict) else None
    try:
        client_data = json.loads(b64url_decode(encoded)) if isinstance(encoded, str) else None
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: "[[[[…"
        client_data = None
    if not isinstance(client_data, dict) or not isinstance(client_data.get("origin"), str):
        raise errors.passkey_registration_invalid(
            "response.clientDataJSON is not base64url-encoded client data."
        )
    return client_data


def _transports(credential: dict[str, Any]) -> list[str]:
    transports = credential["response"].get("transports", [])
    if not isinstance(transports, list) or not all(
        isinstance(t, str) and t in TRANSPORTS for t in transports
    ):
        raise errors.passkey_registration_invalid("response.transports names unknown transports.")
    return sorted(set(transports))


def _short(exc: Exception) -> str:
    return (str(exc) or type(exc).__name__)[:200].rstrip(".")
