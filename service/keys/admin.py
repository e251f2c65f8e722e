"""What an admin does with approvers' credentials, as a principal (the admin routes and the
console call these; the CLI calls service.keys.actions as the operator).

Every call is audited: changes by the use cases they call, reads as ``admin.viewed``.
"""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session

from service.audit import actions as audit
from service.errors import permission_denied
from service.keys import actions as keys
from service.keys import enrolments, passkeys, repository
from service.keys.schemas import ApproverInfo, KeyInfo, PasskeyInfo
from service.principal import Principal, Role
from service.tokens import repository as tokens_repository


def list_approvers(session: Session, principal: Principal) -> list[ApproverInfo]:
    """Every approver of the tenant: anyone with an approver token or a credential."""
    principal.require(Role.ADMIN)
    tenant = principal.tenant
    tokens = [
        token
        for token in tokens_repository.list_for(session, tenant)
        if token.role is Role.APPROVER
    ]
    subjects = {token.subject for token in tokens}
    subjects |= {key.approver for key in repository.list_for(session, tenant)}
    subjects |= {passkey.approver for passkey in repository.passkeys_for(session, tenant)}
    subjects |= {enrolment.approver for enrolment in repository.enrolments_for(session, tenant)}
    approvers = []
    for subject in sorted(subjects):
        credentials = enrolments.credentials_of(session, tenant, subject)
        active_tokens = sum(1 for t in tokens if t.subject == subject and t.revoked_at is None)
        signs = any(k.active for k in credentials.keys) or any(
            p.active for p in credentials.passkeys
        )
        status = "active" if active_tokens and signs else "no_token" if signs else "no_credential"
        approvers.append(
            ApproverInfo(**credentials.model_dump(), status=status, active_tokens=active_tokens)
        )
    record_view(session, principal, what="approvers", count=len(approvers))
    return approvers


def register_key(
    session: Session, principal: Principal, *, approver: str, public_key: str, label: str = ""
) -> KeyInfo:
    """Register an approver's Ed25519 public key, active at once (an admin vouches for it).

    Never for the admin themselves (maker ≠ checker, as for enrolments), and only for a
    person the operator made an approver (``enrolments.require_operator_approver``)."""
    principal.require(Role.ADMIN)
    if approver == principal.subject:
        raise permission_denied(
            "You cannot register a key in your own name; another admin or the operator must."
        )
    enrolments.require_operator_approver(session, principal.tenant, approver)
    return keys.register(
        session,
        tenant=principal.tenant,
        approver=approver,
        public_key=public_key,
        label=label,
        actor=principal.actor,
    )


def revoke_key(session: Session, principal: Principal, *, key_id: str) -> KeyInfo:
    principal.require(Role.ADMIN)
    return keys.revoke(session, tenant=principal.tenant, key_id=key_id, actor=principal.actor)


def revoke_passkey(
    session: Session, principal: Principal, *, key_id: str, now: datetime
) -> PasskeyInfo:
    principal.require(Role.ADMIN)
    return passkeys.revoke(
        session, tenant=principal.tenant, key_id=key_id, actor=principal.actor, now=now
    )


def record_view(session: Session, principal: Principal, *, what: str, count: int) -> None:
    """Audit an admin's read (who looked at which list, and how long it was)."""
    audit.record(
        session,
        tenant=principal.tenant,
        actor=principal.actor,
        type="admin.viewed",
        data={"what": what, "count": count},
    )
