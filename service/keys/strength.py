"""Whether a credential's public key is strong enough to sign anything (DESIGN.md §12).

The rule itself is ``service.signing.strong_public_key``; this module applies it to what the
keys domain holds: an Ed25519 key (raw, base64url) or a passkey's COSE key, whose EdDSA (OKP)
form carries an Ed25519 key too. It is asked when a credential enters (registration,
enrolment), each time a stored one is used to verify (a row written behind the API's back
must never count), and by ``draftgate doctor``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session
from webauthn.helpers import decode_credential_public_key
from webauthn.helpers.cose import COSECRV
from webauthn.helpers.decode_credential_public_key import DecodedOKPPublicKey

from service.keys import repository
from service.keys.models import ApproverKey
from service.keys.repository import Credential
from service.signing import b64url_decode, parse_public_key, strong_public_key


def cose_ed25519_key(cose_key: bytes) -> bytes | None:
    """The raw Ed25519 key of an EdDSA (OKP) COSE key, None for any other key type (ES256,
    RS256: the ``webauthn`` library loads and checks those). Raises ValueError for an OKP key
    that is not a strong Ed25519 key, or COSE bytes that do not decode."""
    try:
        decoded = decode_credential_public_key(cose_key)
    except Exception:  # the library parses CBOR of any shape: every failure is "unusable"
        raise ValueError("its COSE public key does not decode") from None
    if not isinstance(decoded, DecodedOKPPublicKey):
        return None
    if decoded.crv != COSECRV.ED25519:
        raise ValueError("it is an OKP key on a curve other than Ed25519")
    return strong_public_key(decoded.x)


def cose_key_problem(cose_key: bytes) -> str | None:
    """Why a passkey's COSE public key may not sign, or None."""
    try:
        cose_ed25519_key(cose_key)
    except ValueError as exc:
        return str(exc)
    return None


def credential_problem(credential: Credential) -> str | None:
    """Why a stored key or passkey never counts (its public key is weak), or None."""
    try:
        if isinstance(credential, ApproverKey):
            parse_public_key(credential.public_key)
            return None
        return cose_key_problem(b64url_decode(credential.public_key))
    except ValueError as exc:
        return str(exc)


@dataclass(frozen=True)
class WeakCredential:
    tenant: str
    key_id: str
    approver: str
    problem: str


def weak_credentials(session: Session) -> list[WeakCredential]:
    """Every active key and passkey, in any tenant, whose public key is weak: written before
    the rule existed, or behind the API's back. None of them counts; an operator revokes them."""
    return [
        WeakCredential(credential.tenant, credential.key_id, credential.approver, problem)
        for credential in repository.active_credentials(session)
        if (problem := credential_problem(credential)) is not None
    ]
