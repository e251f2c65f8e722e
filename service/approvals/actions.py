"""Approval use cases: what to sign, accepting a signed decision, and checking a quorum.

The quorum check trusts nothing stored as a flag: it recomputes the params
digest from the stored params, re-verifies every signature against the
registered key, and recomputes how many approvers the policy requires. The
worker runs the same check before it executes anything.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlmodel import Session

from service import metrics
from service.approvals import errors, repository, signatures
from service.approvals.models import Approval
from service.approvals.schemas import (
    SCHEME_ED25519,
    SCHEME_WEBAUTHN,
    STATEMENT_TYPE,
    ApprovalRequest,
    ApprovalStatement,
    Decision,
    build_statement,
)
from service.audit import actions as audit
from service.canonical import canonical_json, params_sha256
from service.drafts import repository as drafts_repository
from service.drafts import state as draft_state
from service.drafts.errors import contract_changed, draft_expired, draft_unavailable
from service.drafts.models import Draft, DraftStatus
from service.drafts.policy import applied_policy
from service.errors import DomainError
from service.executions import errors as execution_errors
from service.keys import repository as keys_repository
from service.keys.assertions import RelyingParty, relying_party
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
    keys = keys_repository.list_for(session, principal.tenant, principal.subject)
    passkeys = keys_repository.passkeys_for(session, principal.tenant, principal.subject)
    credentials: list[Credential] = [*keys, *passkeys]
    active = [credential for credential in credentials if credential.revoked_at is None]
    return build_statement(
        tenant=draft.tenant,
        draft_id=draft.id,
        revision=draft.revision,
        action=draft.action,
        contract_version=draft.contract_version,
        params_sha256=draft.params_sha256,
        decision=Decision.APPROVE,
        approver=principal.subject,
        key_id=active[0].key_id if len(active) == 1 else None,
        issued_at=rfc3339_seconds(now),
    )


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
    key = signatures.verify_request(session, principal, request, settings=runtime.settings, now=now)
    draft = _lock_open_draft(session, principal, draft_id, statement.decision, now=now)
    check_contract(runtime, draft)
    _check_binding(draft, statement)
    _check_freshness(statement, now=now, skew_seconds=runtime.settings.approval_clock_skew_seconds)
    _check_approver(session, principal, draft)
    approval = _record_decision(session, principal, draft, key, request, now=now, trace_id=trace_id)
    _apply_decision(session, runtime, principal, draft, approval, now=now, trace_id=trace_id)
    return draft


def check_contract(runtime: Runtime, draft: Draft) -> None:
    """Refuse a draft whose action's contract changed in the running code since it was drafted."""
    action = runtime.registry.write(draft.action)
    if action is not None and action.contract_version != draft.contract_version:
        raise contract_changed(draft.action, draft.contract_version, action.contract_version)


def _lock_open_draft(
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


def _check_approver(session: Session, principal: Principal, draft: Draft) -> None:
    """Maker ≠ checker, and one signature per approver and revision."""
    if principal.subject in {draft.proposed_by, draft.on_behalf_of}:
        raise errors.self_approval()
    if repository.by_approver(session, draft.id, draft.revision, principal.subject) is not None:
        raise errors.already_signed(draft.revision)


def _record_decision(
    session: Session,
    principal: Principal,
    draft: Draft,
    key: Credential,
    request: ApprovalRequest,
    *,
    now: datetime,
    trace_id: str | None,
) -> Approval:
    statement = request.statement
    webauthn = request.webauthn
    approval = Approval(
        id="apv_" + secrets.token_hex(12),
        tenant=draft.tenant,
        draft_id=draft.id,
        revision=draft.revision,
        approver=principal.subject,
        key_id=key.key_id,
        decision=statement.decision,
        reason=statement.reason,
        params_sha256=statement.params_sha256,
        statement=statement.signed_value(),
        signature=webauthn.signature if webauthn else str(request.signature),
        scheme=SCHEME_WEBAUTHN if webauthn else SCHEME_ED25519,
        authenticator_data=webauthn.authenticator_data if webauthn else None,
        client_data_json=webauthn.client_data_json if webauthn else None,
        created_at=now,
    )
    session.add(approval)
    session.flush()
    audit.record(
        session,
        tenant=draft.tenant,
        actor=principal.actor,
        type=APPROVAL_EVENT[statement.decision],
        draft_id=draft.id,
        trace_id=trace_id,
        data={
            "approval_id": approval.id,
            "revision": draft.revision,
            "key_id": key.key_id,
            "scheme": approval.scheme,
            "params_sha256": statement.params_sha256,
            "issued_at": statement.issued_at,
            "reason": statement.reason,
            **({"sign_count": key.sign_count} if isinstance(key, ApproverPasskey) else {}),
        },
    )
    return approval


def _apply_decision(
    session: Session,
    runtime: Runtime,
    principal: Principal,
    draft: Draft,
    approval: Approval,
    *,
    now: datetime,
    trace_id: str | None,
) -> None:
    """A rejection ends the draft; an approval completes it when the quorum now verifies."""
    if approval.decision is Decision.REJECT:
        draft_state.transition(
            session,
            draft,
            DraftStatus.REJECTED,
            now=now,
            actor=principal.actor,
            trace_id=trace_id,
            reason=approval.reason,
        )
        return
    quorum = check_quorum(session, draft, runtime)
    if quorum.met:
        draft_state.transition(
            session,
            draft,
            DraftStatus.APPROVED,
            now=now,
            actor=principal.actor,
            trace_id=trace_id,
            data={"approvers": quorum.approvers},
        )
        metrics.quorum_reached(session, draft, now)


@dataclass(frozen=True)
class Quorum:
    """The verified approvals of a draft's current revision."""

    required: int
    approvers: list[str] = field(default_factory=list)
    rejected_by: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # Approvers whose approval verified but whose key was revoked since: they do not count.
    revoked: list[str] = field(default_factory=list)

    @property
    def met(self) -> bool:
        return not self.rejected_by and len(self.approvers) >= self.required

    def refusal(self) -> DomainError:
        """Why the quorum does not hold, as the error execution is refused with."""
        # Only revocations stand between it and the quorum: not tampering, a stolen key.
        only_revoked = self.revoked and len(self.problems) == len(self.revoked)
        enough_without = len(self.approvers) + len(self.revoked) >= self.required
        if only_revoked and enough_without and not self.rejected_by:
            return errors.approval_key_revoked(self.revoked)
        return execution_errors.approvals_unverified(
            {
                "required": self.required,
                "verified_approvers": self.approvers,
                "problems": self.problems,
            }
        )


def check_quorum(session: Session, draft: Draft, runtime: Runtime) -> Quorum:
    """Count only approvals whose signatures verify against the draft as stored now.

    The number required is the larger of what the draft records and what the
    configured policy demands today for the amount in the *signed* params (never
    the unsigned amount columns), so no edited column can lower the bar.
    """
    required = _required_approvals(session, draft, runtime)
    if isinstance(required, str):
        return Quorum(required=1, problems=[required])
    digest = params_sha256(draft.params)
    party = relying_party(runtime.settings)
    approvals = repository.for_draft(session, draft.id, draft.revision)
    keys = keys_repository.by_ids(session, draft.tenant, {a.key_id for a in approvals})
    approvers: set[str] = set()
    rejected_by: list[str] = []
    problems: list[str] = []
    revoked: list[str] = []
    for approval in approvals:
        key = keys.get(approval.key_id)
        problem = approval_problem(approval, draft, key, digest=digest, relying_party=party)
        if problem:
            problems.append(f"{approval.id} by {approval.approver}: {problem}")
            if problem == REVOKED_SINCE and approval.decision is Decision.APPROVE:
                revoked.append(approval.approver)
        elif approval.decision is Decision.REJECT:
            rejected_by.append(approval.approver)
        else:
            approvers.add(approval.approver)
    return Quorum(
        required=required,
        approvers=sorted(approvers),
        rejected_by=rejected_by,
        problems=problems,
        revoked=sorted(revoked),
    )


def _required_approvals(session: Session, draft: Draft, runtime: Runtime) -> int | str:
    """How many approvers the draft needs today, or why that cannot be known."""
    action = runtime.registry.write(draft.action)
    if action is None:
        return f"the action {draft.action} is not registered"
    try:
        signed = action.Input.model_validate_json(json.dumps(draft.params))
    except ValidationError:
        return "the stored params are not valid for the action"
    # The amount of the signed params, added to the peers that were there when it was
    # proposed (never the unsigned amount columns, never a lowered approvals_required).
    policy, _ = applied_policy(
        session,
        runtime.policies,
        draft.action,
        tenant=draft.tenant,
        params=draft.params,
        amount=action.amount_of(signed),
        default_ttl_seconds=runtime.settings.default_draft_ttl_seconds,
        as_of=draft.created_at,
        draft_id=draft.id,
        created_before=draft.created_at,
    )
    return max(draft.approvals_required, policy.approvals_required, 1)


def approval_problem(
    approval: Approval,
    draft: Draft,
    key: Credential | None,
    *,
    digest: str,
    relying_party: RelyingParty | None = None,
) -> str | None:
    """Why a stored approval does not count for the draft's current revision, or None.

    A passkey's assertion is checked against ``relying_party`` (the settings': what the
    worker and every quorum check pass), else against the relying party and origin the
    passkey was registered at (for showing a draft). Its sign counter is not checked again:
    it was checked when the approval was accepted, and the passkey's counter has moved on
    with every later use, so a stored assertion can only be older than it."""
    statement = approval.statement
    expected = {
        "type": STATEMENT_TYPE,
        "tenant": draft.tenant,
        "draft_id": draft.id,
        "revision": draft.revision,
        "action": draft.action,
        "contract_version": draft.contract_version,
        "params_sha256": digest,
        "approver": approval.approver,
        "key_id": approval.key_id,
        "decision": approval.decision.value,
    }
    mismatched = sorted(name for name, value in expected.items() if statement.get(name) != value)
    if mismatched:
        return "statement does not match the stored draft: " + ", ".join(mismatched)
    if key is None or key.approver != approval.approver:
        return "the signing key is not registered to the approver"
    if key.revoked_at is not None and key.revoked_at <= approval.created_at:
        return "the key was revoked before it signed"
    problem = signatures.problem(approval, key, canonical_json(statement), relying_party)
    if problem:
        return problem
    if approval.approver in {draft.proposed_by, draft.on_behalf_of}:
        return "the approver proposed the draft"
    if key.revoked_at is not None:
        return REVOKED_SINCE
    return None


# A valid approval whose key was revoked afterwards: historical, no longer counted.
REVOKED_SINCE = "the key was revoked after it signed; its approvals no longer count"


def _check_identity(principal: Principal, draft_id: str, statement: ApprovalStatement) -> None:
    if statement.draft_id != draft_id:
        raise errors.statement_for_other_draft()
    if statement.tenant != principal.tenant:
        raise errors.statement_for_other_tenant()
    if statement.approver != principal.subject:
        raise errors.approver_mismatch()


def _check_binding(draft: Draft, statement: ApprovalStatement) -> None:
    if statement.revision != draft.revision:
        raise errors.stale_revision(statement.revision, draft.revision)
    digest = params_sha256(draft.params)
    mismatched = [
        name
        for name, expected in (
            ("action", draft.action),
            ("contract_version", draft.contract_version),
            ("params_sha256", digest),
        )
        if getattr(statement, name) != expected
    ]
    if mismatched or draft.params_sha256 != digest:
        raise errors.statement_mismatch(mismatched or ["params_sha256"])


def _check_freshness(statement: ApprovalStatement, *, now: datetime, skew_seconds: int) -> None:
    issued_at = datetime.fromisoformat(statement.issued_at.replace("Z", "+00:00"))
    if abs(now - issued_at) > timedelta(seconds=skew_seconds):
        raise errors.statement_stale(statement.issued_at, skew_seconds)
