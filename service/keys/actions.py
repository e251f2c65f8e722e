"""Key use cases: register a public key for an approver, revoke it, list keys.

Callers are operators (the CLI, with database access) or admin principals;
the front door decides who may call, these functions record who did.
"""

from __future__ import annotations

from sqlmodel import Session

from service.audit import actions as audit
from service.errors import invalid_argument
from service.keys import errors, repository
from service.keys.models import ApproverKey
from service.keys.schemas import KeyInfo, KeyRegistration
from service.signing import WeakPublicKey, key_id_for, parse_public_key
from service.sql import utcnow
from service.validation import parse


def register(
    session: Session, *, tenant: str, approver: str, public_key: str, label: str = "", actor: str
) -> KeyInfo:
    """Register an approver's Ed25519 public key in a tenant."""
    parse(
        KeyRegistration,
        {"tenant": tenant, "approver": approver, "public_key": public_key, "label": label},
    )
    check_new_key(session, public_key)
    key = ApproverKey(
        key_id=key_id_for(public_key),
        tenant=tenant,
        approver=approver,
        public_key=public_key,
        label=label,
        created_at=utcnow(),
    )
    session.add(key)
    audit.record(
        session,
        tenant=tenant,
        actor=actor,
        type="key.registered",
        data={"key_id": key.key_id, "approver": approver, "public_key": public_key},
    )
    return info(key)


def check_new_key(session: Session, public_key: str) -> None:
    """Refuse a public key that is not a strong Ed25519 key (WEAK_PUBLIC_KEY: small-order,
    mixed-order, non-canonical) or that is registered already: every way a key enters
    (registration, enrolment, the demo seed) goes through here."""
    try:
        parse_public_key(public_key)
    except WeakPublicKey:
        raise errors.weak_public_key() from None
    except ValueError as exc:
        raise invalid_argument(f"Not a usable Ed25519 public key: {exc}.") from None
    if repository.by_public_key(session, public_key) is not None:
        raise errors.key_already_registered()


def revoke(session: Session, *, tenant: str, key_id: str, actor: str) -> KeyInfo:
    """Revoke a key: from now on nothing it signs is accepted."""
    key = repository.get(session, tenant, key_id)
    if key is None:
        raise errors.key_unavailable(key_id)
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        session.add(key)
        audit.record(
            session,
            tenant=tenant,
            actor=actor,
            type="key.revoked",
            data={"key_id": key.key_id, "approver": key.approver},
        )
    return info(key)


def list_keys(session: Session, *, tenant: str, approver: str | None = None) -> list[KeyInfo]:
    return [info(key) for key in repository.list_for(session, tenant, approver)]


def info(key: ApproverKey) -> KeyInfo:
    return KeyInfo(
        key_id=key.key_id,
        tenant=key.tenant,
        approver=key.approver,
        public_key=key.public_key,
        label=key.label,
        created_at=key.created_at,
        revoked_at=key.revoked_at,
        active=key.revoked_at is None,
    )
