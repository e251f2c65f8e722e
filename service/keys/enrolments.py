"""Key enrolments: credentials an approver made themselves (an Ed25519 key generated in the
browser, a passkey), waiting for an admin to approve or reject them.

An approved enrolment becomes an active credential (an ApproverKey or an ApproverPasskey);
a rejected one becomes nothing. An admin never decides on their own subject's enrolment.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlmodel import Session

from service.audit import actions as audit
from service.config import Settings
from service.errors import permission_denied
from service.keys import actions as keys
from service.keys import errors, passkeys, repository
from service.keys.models import CredentialKind, EnrolmentStatus, KeyEnrolment
from service.keys.schemas import (
    ApproverCredentials,
    EnrolmentInfo,
    KeyEnrolmentRequest,
    PasskeyRegistrationRequest,
)
from service.principal import Principal, Role
from service.signing import key_id_for
from service.tokens import repository as tokens_repository


def enrol_key(
    session: Session, principal: Principal, *, request: KeyEnrolmentRequest, now: datetime
) -> EnrolmentInfo:
    """Ask for an Ed25519 public key (made in the approver's browser) to become theirs."""
    principal.require(Role.APPROVER)
    keys.check_new_key(session, request.public_key)
    return _create(
        session,
        principal,
        kind=CredentialKind.ED25519,
        key_id=key_id_for(request.public_key),
        label=request.label,
        material={"public_key": request.public_key},
        now=now,
    )


def enrol_passkey(
    session: Session,
    principal: Principal,
    *,
    settings: Settings,
    request: PasskeyRegistrationRequest,
    now: datetime,
) -> EnrolmentInfo:
    """Verify a passkey registration (its challenge, origin, relying party, user
    verification) and ask for it to become the approver's credential."""
    principal.require(Role.APPROVER)
    material = passkeys.verify_registration(
        session, principal, settings=settings, credential=request.credential, now=now
    )
    if repository.passkey_by_credential_id(session, material["credential_id"]) is not None:
        raise errors.key_already_registered()
    return _create(
        session,
        principal,
        kind=CredentialKind.PASSKEY,
        key_id=passkeys.key_id_for_credential(material["credential_id"]),
        label=request.label,
        material=material,
        now=now,
    )


def my_credentials(session: Session, principal: Principal) -> ApproverCredentials:
    """The caller's own keys, passkeys and enrolments (what the console's keys page shows)."""
    principal.require(Role.APPROVER)
    return credentials_of(session, principal.tenant, principal.subject)


def credentials_of(session: Session, tenant: str, approver: str) -> ApproverCredentials:
    return ApproverCredentials(
        approver=approver,
        keys=keys.list_keys(session, tenant=tenant, approver=approver),
        passkeys=passkeys.list_passkeys(session, tenant=tenant, approver=approver),
        enrolments=[
            info(enrolment)
            for enrolment in repository.enrolments_for(session, tenant, approver=approver)
        ],
    )


def list_enrolments(
    session: Session, principal: Principal, *, status: EnrolmentStatus | None = None
) -> list[EnrolmentInfo]:
    """The tenant's enrolments (admins), oldest first."""
    principal.require(Role.ADMIN)
    rows = repository.enrolments_for(session, principal.tenant, status=status)
    return [info(enrolment) for enrolment in rows]


def approve(
    session: Session, principal: Principal, *, enrolment_id: str, now: datetime
) -> EnrolmentInfo:
    """Approve a pending enrolment: its credential becomes active (admins), if its approver
    still holds an active approver token (one the operator issued)."""
    principal.require(Role.ADMIN)
    decider = Decider(principal.tenant, principal.actor, principal.subject)
    enrolment = repository.get_enrolment(session, principal.tenant, enrolment_id)
    if enrolment is not None and enrolment.approver != principal.subject:
        require_operator_approver(session, principal.tenant, enrolment.approver)
    return decide(session, decider, enrolment_id=enrolment_id, approve=True, now=now)


def reject(
    session: Session, principal: Principal, *, enrolment_id: str, reason: str, now: datetime
) -> EnrolmentInfo:
    """Reject a pending enrolment: nothing becomes usable (admins)."""
    principal.require(Role.ADMIN)
    decider = Decider(principal.tenant, principal.actor, principal.subject)
    return decide(
        session, decider, enrolment_id=enrolment_id, approve=False, reason=reason, now=now
    )


def require_operator_approver(session: Session, tenant: str, approver: str) -> None:
    """Refuse to give ``approver`` a credential unless they hold an active approver token.

    Approver tokens are issued by the operator at the host only (the API issues agent and
    auditor tokens), so an admin token — stolen or not — can vouch only for people the
    operator created, never invent approvers to fill a quorum with."""
    if not any(
        token.role is Role.APPROVER and token.subject == approver and token.revoked_at is None
        for token in tokens_repository.list_for(session, tenant)
    ):
        raise permission_denied(
            f"{approver!r} holds no active approver token in this tenant; the operator "
            "issues approver tokens at the host (draftgate tokens issue) before an admin "
            "may give them a credential."
        )


@dataclass(frozen=True)
class Decider:
    """Who decides on enrolments: an admin principal, or the operator at the CLI
    (``subject`` None: an operator is nobody's approver)."""

    tenant: str
    actor: str
    subject: str | None = None


def decide(
    session: Session,
    decider: Decider,
    *,
    enrolment_id: str,
    approve: bool,
    now: datetime,
    reason: str | None = None,
) -> EnrolmentInfo:
    """Approve (the credential becomes active) or reject (nothing) a pending enrolment."""
    enrolment = _pending(session, decider, enrolment_id)
    if not approve:
        return _decide(
            session, decider, enrolment, EnrolmentStatus.REJECTED, now=now, reason=reason
        )
    if enrolment.kind is CredentialKind.ED25519:
        keys.register(
            session,
            tenant=enrolment.tenant,
            approver=enrolment.approver,
            public_key=enrolment.material["public_key"],
            label=enrolment.label,
            actor=decider.actor,
        )
    else:
        passkeys.activate(session, enrolment, actor=decider.actor, now=now)
    return _decide(session, decider, enrolment, EnrolmentStatus.APPROVED, now=now)


def operator_enrolments(
    session: Session, *, tenant: str, status: EnrolmentStatus | None = None
) -> list[EnrolmentInfo]:
    """The tenant's enrolments, for the operator at the CLI."""
    return [
        info(enrolment) for enrolment in repository.enrolments_for(session, tenant, status=status)
    ]


def info(enrolment: KeyEnrolment) -> EnrolmentInfo:
    material = enrolment.material
    return EnrolmentInfo(
        enrolment_id=enrolment.id,
        tenant=enrolment.tenant,
        approver=enrolment.approver,
        kind=enrolment.kind,
        key_id=enrolment.key_id,
        label=enrolment.label,
        status=enrolment.status,
        public_key=material.get("public_key") if enrolment.kind is CredentialKind.ED25519 else None,
        credential_id=material.get("credential_id"),
        reason=enrolment.reason,
        created_at=enrolment.created_at,
        decided_at=enrolment.decided_at,
        decided_by=enrolment.decided_by,
    )


def _create(
    session: Session,
    principal: Principal,
    *,
    kind: CredentialKind,
    key_id: str,
    label: str,
    material: dict[str, Any],
    now: datetime,
) -> EnrolmentInfo:
    if repository.pending_for_key(session, principal.tenant, key_id) is not None:
        raise errors.enrolment_pending()
    enrolment = KeyEnrolment(
        id="enr_" + secrets.token_hex(12),
        tenant=principal.tenant,
        approver=principal.subject,
        kind=kind,
        key_id=key_id,
        label=label,
        material=material,
        status=EnrolmentStatus.PENDING,
        created_at=now,
    )
    session.add(enrolment)
    audit.record(
        session,
        tenant=principal.tenant,
        actor=principal.actor,
        type="key.enrolment_requested",
        data={"enrolment_id": enrolment.id, "kind": kind.value, "key_id": key_id},
    )
    return info(enrolment)


def _pending(session: Session, decider: Decider, enrolment_id: str) -> KeyEnrolment:
    enrolment = repository.get_enrolment(session, decider.tenant, enrolment_id, for_update=True)
    if enrolment is None:
        raise errors.enrolment_unavailable(enrolment_id)
    if enrolment.status is not EnrolmentStatus.PENDING:
        raise errors.enrolment_decided(enrolment.status.value)
    if enrolment.approver == decider.subject:  # maker ≠ checker, for credentials too
        raise errors.self_enrolment()
    return enrolment


def _decide(
    session: Session,
    decider: Decider,
    enrolment: KeyEnrolment,
    status: EnrolmentStatus,
    *,
    now: datetime,
    reason: str | None = None,
) -> EnrolmentInfo:
    enrolment.status = status
    enrolment.reason = reason
    enrolment.decided_at = now
    enrolment.decided_by = decider.actor
    session.add(enrolment)
    audit.record(
        session,
        tenant=enrolment.tenant,
        actor=decider.actor,
        type=f"key.enrolment_{status.value}",
        data={
            "enrolment_id": enrolment.id,
            "kind": enrolment.kind.value,
            "key_id": enrolment.key_id,
            "approver": enrolment.approver,
            "reason": reason,
        },
    )
    return info(enrolment)
