"""Approval use cases: what to sign, and accepting a signed decision (or refusing it).

Whether a decision completes or ends a draft is the progress owner's answer
(``service.approvals.progress``), which the execute gate and the worker read too.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session

from service import metrics
from service.approvals import errors, oversight, progress, signatures
from service.approvals.models import Approval
from service.approvals.schemas import (
    SCHEME_ED25519,
    SCHEME_WEBAUTHN,
    ApprovalRequest,
    ApprovalStatement,
    BatchItem,
    Decision,
    SignedRequest,
    build_statement,
    moment,
)
from service.audit import actions as audit
from service.canonical import params_sha256
from service.drafts import repository as drafts_repository
from service.drafts import state as draft_state
from service.drafts.errors import contract_changed, draft_expired, draft_unavailable
from service.drafts.models import Draft, DraftStatus
from service.keys import repository as keys_repository
from service.keys.models import ApproverPasskey
from service.keys.repository import Credential
from service.principal import Principal, Role
from service.runtime import Runtime
from service.sql import rfc3339_seconds

APPROVAL_EVENT = {Decision.APPROVE: "approval.approved", Decision.REJECT: "approval.rejected"}
# Which draft statuses accept which decision: a rejection may still stop an approved draft.
OPEN_FOR = {
    Decision.APPROVE: frozenset({DraftStatus.PROPOSED}),
    Decision.REJECT: frozenset({DraftStatus.PROPOSED, DraftStatus.APPROVED}),
}


def statement_to_sign(
    session: Session, principal: Principal, draft: Draft, *, now: datetime
) -> dict[str, Any]:
    """The approve statement for the draft's current revision, ready for the caller to sign.

    ``key_id`` is the caller's credential when they have exactly one active key or passkey,
    else null for the client to fill in; ``issued_at`` may be replaced by the
    signer's own clock (within the allowed skew).
    """
    return build_statement(
        tenant=draft.tenant,
        draft_id=draft.id,
        revision=draft.revision,
        action=draft.action,
        contract_version=draft.contract_version,
        params_sha256=draft.params_sha256,
        decision=Decision.APPROVE,
        approver=principal.subject,
        key_id=own_key_id(session, principal),
        issued_at=rfc3339_seconds(now),
        source_revision=draft.source_revision,
    )


def own_key_id(session: Session, principal: Principal) -> str | None:
    """The caller's credential when they have exactly one active key or passkey, else None
    (for the client to fill in)."""
    keys = keys_repository.list_for(session, principal.tenant, principal.subject)
    passkeys = keys_repository.passkeys_for(session, principal.tenant, principal.subject)
    credentials: list[Credential] = [*keys, *passkeys]
    active = [credential for credential in credentials if credential.revoked_at is None]
    return active[0].key_id if len(active) == 1 else None


def submit(
    session: Session,
    principal: Principal,
    *,
    runtime: Runtime,
    draft_id: str,
    request: ApprovalRequest,
    now: datetime,
    trace_id: str | None = None,
) -> Draft:
    """Accept a signed approve/reject decision on a draft's current revision, or refuse it.

    Every rule of DESIGN.md §4 is checked; any failure raises and nothing is
    recorded but the refusal's audit event (written by the caller).
    """
    principal.require(Role.APPROVER)
    statement = request.statement
    _check_identity(principal, draft_id, statement)
    key = signatures.verify_request(
        session,
        principal,
        request,
        statement,
        settings=runtime.settings,
        now=now,
    )
    draft = lock_open_draft(session, principal, draft_id, statement.decision, now=now)
    check_contract(runtime, draft)
    check_binding(draft, statement)
    check_freshness(
        statement.issued_at, now=now, skew_seconds=runtime.settings.approval_clock_skew_seconds
    )
    rules = progress.Rules.of(runtime)
    check_signer(progress.of_draft(session, rules, draft), principal, statement.decision)
    record_decision(
        session,
        rules,
        principal,
        draft,
        key,
        request,
        Signed.of(statement),
        now=now,
        trace_id=trace_id,
    )
    settle(session, rules, draft, actor=principal.actor, now=now, trace_id=trace_id)
    return draft


def check_contract(runtime: Runtime, draft: Draft) -> None:
    """Refuse a draft whose action's contract changed in the running code since it was drafted."""
    action = runtime.registry.write(draft.action)
    if action is not None and action.contract_version != draft.contract_version:
        raise contract_changed(draft.action, draft.contract_version, action.contract_version)


def lock_open_draft(
    session: Session, principal: Principal, draft_id: str, decision: Decision, *, now: datetime
) -> Draft:
    draft = drafts_repository.get(session, principal.tenant, draft_id, for_update=True)
    if draft is None:
        raise draft_unavailable()
    if draft_state.expire_if_due(session, draft, now=now):
        raise draft_expired("approved")
    if draft.status not in OPEN_FOR[decision]:
        raise errors.draft_not_open(draft.status.value, decision.value)
    return draft


def check_signer(
    standing: progress.ApprovalProgress, principal: Principal, decision: Decision
) -> None:
    bar = standing.bar(principal.subject, decision)
    if bar is progress.Bar.PROPOSER:
        raise errors.self_approval()
    if bar is progress.Bar.ALREADY_SIGNED:
        raise errors.already_signed(standing.revision)


@dataclass(frozen=True)
class Signed:
    """What one signed decision on one draft says: the statement as signed (an approval's,
    or a batch's that names the draft among others) and what it decides."""

    statement: dict[str, Any]
    decision: Decision
    reason: str | None
    params_sha256: str
    issued_at: str
    batch_id: str | None = None

    @classmethod
    def of(cls, statement: ApprovalStatement) -> Signed:
        return cls(
            statement.signed_value(),
            statement.decision,
            statement.reason,
            statement.params_sha256,
            statement.issued_at,
        )


def record_decision(
    session: Session,
    rules: progress.Rules,
    principal: Principal,
    draft: Draft,
    key: Credential,
    request: SignedRequest,
    signed: Signed,
    *,
    now: datetime,
    trace_id: str | None,
) -> Approval:
    """Store one verified decision on the draft's current revision, and audit it with how
    carefully it was reviewed (``oversight``)."""
    webauthn = request.webauthn
    approval = Approval(
        id="apv_" + secrets.token_hex(12),
        tenant=draft.tenant,
        draft_id=draft.id,
        revision=draft.revision,
        approver=principal.subject,
        key_id=key.key_id,
        decision=signed.decision,
        reason=signed.reason,
        params_sha256=signed.params_sha256,
        statement=signed.statement,
        signature=webauthn.signature if webauthn else str(request.signature),
        scheme=SCHEME_WEBAUTHN if webauthn else SCHEME_ED25519,
        authenticator_data=webauthn.authenticator_data if webauthn else None,
        client_data_json=webauthn.client_data_json if webauthn else None,
        created_at=now,
    )
    session.add(approval)
    session.flush()
    care = oversight.decided(
        session, rules, principal, draft, signed.decision.value, now=now, trace_id=trace_id
    )
    audit.record(
        session,
        tenant=draft.tenant,
        actor=principal.actor,
        type=APPROVAL_EVENT[signed.decision],
        draft_id=draft.id,
        trace_id=trace_id,
        data={
            "approval_id": approval.id,
            "revision": draft.revision,
            "key_id": key.key_id,
            "scheme": approval.scheme,
            "params_sha256": signed.params_sha256,
            "issued_at": signed.issued_at,
            "reason": signed.reason,
            **({"batch_id": signed.batch_id} if signed.batch_id else {}),
            "oversight": care.as_data(),
            **({"sign_count": key.sign_count} if isinstance(key, ApproverPasskey) else {}),
        },
    )
    return approval


def settle(
    session: Session,
    rules: progress.Rules,
    draft: Draft,
    *,
    actor: str,
    now: datetime,
    trace_id: str | None,
    reason: str | None = None,
) -> progress.ApprovalProgress:
    """Counted again with a decision just recorded (a signed one, or a grant's): a verified
    rejection ends the draft; approvals that now meet the policy approve it (``reason``: what
    the agent should still read then, e.g. that an approver narrowed it)."""
    standing = progress.of_draft(session, rules, draft)
    if standing.rejections:
        draft_state.transition(
            session,
            draft,
            DraftStatus.REJECTED,
            now=now,
            actor=actor,
            trace_id=trace_id,
            reason=standing.rejections[0].signed.reason,
        )
    elif standing.met and draft.status is DraftStatus.PROPOSED:
        draft_state.transition(
            session,
            draft,
            DraftStatus.APPROVED,
            now=now,
            actor=actor,
            trace_id=trace_id,
            reason=reason,
            data={"approvers": standing.approvers},
        )
        metrics.quorum_reached(session, draft, now)
    return standing


def _check_identity(principal: Principal, draft_id: str, statement: ApprovalStatement) -> None:
    if statement.draft_id != draft_id:
        raise errors.statement_for_other_draft()
    check_signer_identity(principal, tenant=statement.tenant, approver=statement.approver)


def check_signer_identity(principal: Principal, *, tenant: str, approver: str) -> None:
    """Refuse a statement signed for another tenant or in another approver's name."""
    if tenant != principal.tenant:
        raise errors.statement_for_other_tenant()
    if approver != principal.subject:
        raise errors.approver_mismatch()


def check_binding(draft: Draft, statement: ApprovalStatement | BatchItem) -> None:
    if statement.revision != draft.revision:
        raise errors.stale_revision(statement.revision, draft.revision)
    digest = params_sha256(draft.params)
    mismatched = [
        name
        for name, expected in (
            ("action", draft.action),
            ("contract_version", draft.contract_version),
            ("params_sha256", digest),
            ("source_revision", draft.source_revision),
        )
        if getattr(statement, name) != expected
    ]
    if mismatched or draft.params_sha256 != digest:
        raise errors.statement_mismatch(mismatched or ["params_sha256"])


def check_freshness(issued_at: str, *, now: datetime, skew_seconds: int) -> None:
    """Refuse a statement issued further from the server's clock than the allowed skew."""
    if abs(now - moment(issued_at)) > timedelta(seconds=skew_seconds):
        raise errors.statement_stale(issued_at, skew_seconds)
