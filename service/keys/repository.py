from __future__ import annotations

from datetime import datetime

from sqlmodel import Session, col, delete, select

from service.keys.models import (
    ApproverKey,
    ApproverPasskey,
    EnrolmentStatus,
    KeyEnrolment,
    WebAuthnChallenge,
)

# A signing credential of either scheme: an Ed25519 key or a passkey.
Credential = ApproverKey | ApproverPasskey


def get(session: Session, tenant: str, key_id: str) -> ApproverKey | None:
    key = session.get(ApproverKey, key_id)
    return key if key is not None and key.tenant == tenant else None


def by_public_key(session: Session, public_key: str) -> ApproverKey | None:
    statement = select(ApproverKey).where(col(ApproverKey.public_key) == public_key)
    return session.exec(statement).one_or_none()


def list_for(session: Session, tenant: str, approver: str | None = None) -> list[ApproverKey]:
    statement = select(ApproverKey).where(col(ApproverKey.tenant) == tenant)
    if approver is not None:
        statement = statement.where(col(ApproverKey.approver) == approver)
    return list(session.exec(statement.order_by(col(ApproverKey.created_at))).all())


def by_ids(session: Session, tenant: str, key_ids: set[str]) -> dict[str, Credential]:
    """The tenant's credentials (keys and passkeys) among ``key_ids``, by id (one query per
    scheme for a whole quorum)."""
    if not key_ids:
        return {}
    ids = sorted(key_ids)
    found: dict[str, Credential] = {}
    keys = select(ApproverKey).where(
        col(ApproverKey.tenant) == tenant, col(ApproverKey.key_id).in_(ids)
    )
    found.update({key.key_id: key for key in session.exec(keys).all()})
    passkeys = select(ApproverPasskey).where(
        col(ApproverPasskey.tenant) == tenant, col(ApproverPasskey.key_id).in_(ids)
    )
    found.update({passkey.key_id: passkey for passkey in session.exec(passkeys).all()})
    return found


def active_credentials(session: Session) -> list[Credential]:
    """Every unrevoked key and passkey of every tenant (what ``draftgate doctor`` inspects)."""
    keys = select(ApproverKey).where(col(ApproverKey.revoked_at).is_(None))
    passkeys = select(ApproverPasskey).where(col(ApproverPasskey.revoked_at).is_(None))
    return [*session.exec(keys).all(), *session.exec(passkeys).all()]


# --- passkeys -------------------------------------------------------------------------------


def get_passkey(
    session: Session, tenant: str, key_id: str, *, for_update: bool = False
) -> ApproverPasskey | None:
    statement = select(ApproverPasskey).where(
        col(ApproverPasskey.tenant) == tenant, col(ApproverPasskey.key_id) == key_id
    )
    if for_update:  # the sign counter is read, compared and advanced by one approval at a time
        statement = statement.with_for_update().execution_options(populate_existing=True)
    return session.exec(statement).one_or_none()


def passkey_by_credential_id(session: Session, credential_id: str) -> ApproverPasskey | None:
    statement = select(ApproverPasskey).where(col(ApproverPasskey.credential_id) == credential_id)
    return session.exec(statement).one_or_none()


def passkeys_for(
    session: Session, tenant: str, approver: str | None = None
) -> list[ApproverPasskey]:
    statement = select(ApproverPasskey).where(col(ApproverPasskey.tenant) == tenant)
    if approver is not None:
        statement = statement.where(col(ApproverPasskey.approver) == approver)
    return list(session.exec(statement.order_by(col(ApproverPasskey.created_at))).all())


# --- enrolments -----------------------------------------------------------------------------


def get_enrolment(
    session: Session, tenant: str, enrolment_id: str, *, for_update: bool = False
) -> KeyEnrolment | None:
    statement = select(KeyEnrolment).where(
        col(KeyEnrolment.tenant) == tenant, col(KeyEnrolment.id) == enrolment_id
    )
    if for_update:  # two admins deciding at once: one decides, the other sees it decided
        statement = statement.with_for_update().execution_options(populate_existing=True)
    return session.exec(statement).one_or_none()


def pending_for_key(session: Session, tenant: str, key_id: str) -> KeyEnrolment | None:
    # Per tenant: an enrolment waiting in one tenant must not block (or reveal) another's.
    statement = select(KeyEnrolment).where(
        col(KeyEnrolment.tenant) == tenant,
        col(KeyEnrolment.key_id) == key_id,
        col(KeyEnrolment.status) == EnrolmentStatus.PENDING,
    )
    return session.exec(statement.limit(1)).first()


def enrolments_for(
    session: Session,
    tenant: str,
    *,
    approver: str | None = None,
    status: EnrolmentStatus | None = None,
) -> list[KeyEnrolment]:
    statement = select(KeyEnrolment).where(col(KeyEnrolment.tenant) == tenant)
    if approver is not None:
        statement = statement.where(col(KeyEnrolment.approver) == approver)
    if status is not None:
        statement = statement.where(col(KeyEnrolment.status) == status)
    order = (col(KeyEnrolment.created_at), col(KeyEnrolment.id))
    return list(session.exec(statement.order_by(*order)).all())


# --- registration challenges ----------------------------------------------------------------


def take_challenge(
    session: Session, tenant: str, subject: str, challenge: str, *, now: datetime
) -> bool:
    """Consume the challenge if it was issued to this subject and is still fresh."""
    found = session.get(WebAuthnChallenge, challenge)
    if found is None or (found.tenant, found.subject) != (tenant, subject):
        return False
    session.delete(found)
    session.flush()
    return found.expires_at > now


def forget_expired_challenges(session: Session, *, now: datetime) -> None:
    session.execute(delete(WebAuthnChallenge).where(col(WebAuthnChallenge.expires_at) <= now))
