"""Both signature schemes of an approval (docs/approvals.md): an Ed25519 signature over
JCS(statement), or a passkey's WebAuthn assertion whose challenge is SHA-256(JCS(statement)).

``verify_request`` checks a signed statement as it arrives, an approval's or a standing
grant's (and advances a passkey's sign counter); ``problem`` re-checks a stored one, for
every quorum check and the worker. Both refuse a
credential whose public key is weak (``service.keys.strength``) before anything else about
its signature: such a key may have been written straight into the database, and under it a
signature can be forged without any private key.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from sqlmodel import Session

from service.approvals import errors
from service.approvals.schemas import (
    SCHEME_ED25519,
    SCHEME_WEBAUTHN,
    SignedRequest,
    WebAuthnAssertion,
)
from service.canonical import canonical_json
from service.config import Settings
from service.keys import errors as keys_errors
from service.keys import repository as keys_repository
from service.keys.assertions import (
    Assertion,
    AssertionRefused,
    RelyingParty,
    relying_party,
    verify_assertion,
)
from service.keys.models import ApproverKey, ApproverPasskey
from service.keys.repository import Credential
from service.keys.strength import credential_problem
from service.principal import Principal
from service.signing import verify


class SignedRow(Protocol):
    """A stored signed statement: an approval or a standing grant."""

    scheme: str
    signature: str
    authenticator_data: str | None
    client_data_json: str | None


class Statement(Protocol):
    """A signed statement as parsed: whose key signs it, and the value whose JCS is signed."""

    @property
    def key_id(self) -> str: ...

    def signed_value(self) -> dict[str, Any]: ...


def verify_request(
    session: Session,
    principal: Principal,
    request: SignedRequest,
    statement: Statement,
    *,
    settings: Settings,
    now: datetime,
) -> Credential:
    """The caller's own, active credential the request's ``statement`` names, whose signature
    over JCS(statement) verifies (an approval's, a batch's, a standing grant's)."""
    key_id, signed = statement.key_id, statement.signed_value()
    if request.webauthn is not None:
        return _verify_assertion(
            session, principal, key_id, signed, request.webauthn, settings=settings, now=now
        )
    key = keys_repository.get(session, principal.tenant, key_id)
    if key is None or key.approver != principal.subject:
        raise errors.key_not_owned()
    if key.revoked_at is not None:
        raise errors.key_revoked()
    _refuse_weak(key)
    assert request.signature is not None  # a signed request holds exactly one of the two
    if not verify(key.public_key, canonical_json(signed), request.signature):
        raise errors.signature_invalid()
    return key


def _verify_assertion(
    session: Session,
    principal: Principal,
    key_id: str,
    signed: dict[str, Any],
    webauthn: WebAuthnAssertion,
    *,
    settings: Settings,
    now: datetime,
) -> ApproverPasskey:
    """The caller's own, active passkey, whose assertion signs the statement; its sign
    counter advances here (under the passkey's row lock), and only if the approval commits."""
    passkey = keys_repository.get_passkey(session, principal.tenant, key_id, for_update=True)
    if passkey is None or passkey.approver != principal.subject:
        raise errors.key_not_owned()
    if passkey.revoked_at is not None:
        raise errors.key_revoked()
    _refuse_weak(passkey)
    try:
        passkey.sign_count = verify_assertion(
            _assertion(webauthn),
            signed_bytes=canonical_json(signed),
            credential_id=passkey.credential_id,
            public_key=passkey.public_key,
            relying_party=relying_party(settings),
            sign_count=passkey.sign_count,
        )
    except AssertionRefused as refused:
        raise errors.assertion_refused(refused.check, refused.message) from None
    passkey.last_used_at = now
    session.add(passkey)
    return passkey


def _refuse_weak(credential: Credential) -> None:
    weakness = credential_problem(credential)
    if weakness is not None:
        raise keys_errors.weak_public_key(
            f"Your registered credential {credential.key_id}", weakness
        )


def _assertion(webauthn: WebAuthnAssertion) -> Assertion:
    return Assertion(
        credential_id=webauthn.credential_id,
        authenticator_data=webauthn.authenticator_data,
        client_data_json=webauthn.client_data_json,
        signature=webauthn.signature,
    )


def problem(
    approval: SignedRow, key: Credential, signed: bytes, party: RelyingParty | None
) -> str | None:
    """Why the stored statement's signature does not sign ``signed`` (JCS of its statement)
    with ``key``, by the approval's scheme; None when it does. A weak key never counts."""
    weakness = credential_problem(key)
    if weakness is not None:
        return f"the signing key is weak and never counts: {weakness}"
    if isinstance(key, ApproverKey):
        if approval.scheme != SCHEME_ED25519 or not verify(
            key.public_key, signed, approval.signature
        ):
            return "the signature does not verify"
        return None
    if approval.scheme != SCHEME_WEBAUTHN or not (
        approval.authenticator_data and approval.client_data_json
    ):
        return "the signature does not verify (not a passkey assertion)"
    try:
        verify_assertion(
            Assertion(
                credential_id=key.credential_id,
                authenticator_data=approval.authenticator_data,
                client_data_json=approval.client_data_json,
                signature=approval.signature,
            ),
            signed_bytes=signed,
            credential_id=key.credential_id,
            public_key=key.public_key,
            relying_party=party or RelyingParty(rp_id=key.rp_id, origins=(key.origin,)),
            sign_count=None,
        )
    except AssertionRefused as refused:
        return f"the passkey assertion does not verify: {refused.message}"
    return None
