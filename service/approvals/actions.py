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

from service.approvals import repository
from service.approvals.models import Approval
from service.approvals.schemas import (
    STATEMENT_TYPE,
    ApprovalRequest,
    ApprovalStatement,
    Decision,
    build_statement,
)
from service.audit import actions as audit
from service.canonical import canonical_json, params_sha256
from service.drafts import repository as drafts_repository
from service.drafts.actions import draft_unavailable, expire_if_due
from service.drafts.models import Draft, DraftStatus
from service.errors import Category, DomainError
from service.keys import repository as keys_repository
from service.keys.models import ApproverKey
from service.policies.actions import resolve
from service.principal import Principal, Role
from service.runtime import Runtime
from service.signing import verify
from service.sql import rfc3339_seconds

APPROVAL_EVENT = {Decision.APPROVE: "approval.approved", Decision.REJECT: "approval.rejected"}


def statement_to_sign(
    session: Session, principal: Principal, draft: Draft, *, now: datetime
) -> dict[str, Any]:
    """The approve statement for the draft's current revision, ready for the caller to sign.

    ``key_id`` is the caller's key when they have exactly one active key, else
    null for the client to fill in; ``issued_at`` may be replaced by the
    signer's own clock (within the allowed skew).
    """
    keys = keys_repository.list_for(session, principal.tenant, principal.subject)
    active = [key for key in keys if key.revoked_at is None]
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
    key = keys_repository.get(session, principal.tenant, statement.key_id)
    if key is None or key.approver != principal.subject:
        raise _refused(
            "KEY_NOT_OWNED",
            "The statement's key_id is not a key registered to you.",
            "Sign with your own registered key.",
        )
    if key.revoked_at is not None:
        raise _refused(
            "KEY_REVOKED",
            "The signing key has been revoked; it signs nothing any more.",
            "Ask an admin to register a new key for you.",
        )
    if not verify(key.public_key, canonical_json(statement.signed_value()), request.signature):
        raise _refused(
            "SIGNATURE_INVALID",
            "The signature does not verify over the JCS encoding of the statement.",
            "Sign exactly the statement you send, with the key named by key_id.",
        )
    draft = drafts_repository.get(session, principal.tenant, draft_id, for_update=True)
    if draft is None:
        raise draft_unavailable()
    _check_draft_state(session, draft, statement, now=now)
    _check_binding(draft, statement)
    _check_freshness(statement, now=now, skew_seconds=runtime.settings.approval_clock_skew_seconds)
    if principal.subject in {draft.proposed_by, draft.on_behalf_of}:
        raise _refused(
            "SELF_APPROVAL",
            "The proposer of a draft cannot approve or reject it.",
            "Another approver must decide on this draft.",
            category=Category.PERMISSION_DENIED,
        )
    if repository.by_approver(session, draft.id, draft.revision, principal.subject) is not None:
        raise _refused(
            "ALREADY_SIGNED",
            f"You have already signed revision {draft.revision} of this draft.",
            "Each approver signs a revision once; wait for other approvers.",
            category=Category.CONFLICT,
        )

    approval = Approval(
        id="apv_" + secrets.token_hex(12),
        tenant=draft.tenant,
        draft_id=draft.id,
        revision=draft.revision,
        approver=principal.subject,
        key_id=key.key_id,
        decision=statement.decision.value,
        reason=statement.reason,
        params_sha256=statement.params_sha256,
        statement=statement.signed_value(),
        signature=request.signature,
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
            "params_sha256": statement.params_sha256,
            "issued_at": statement.issued_at,
            "reason": statement.reason,
        },
    )
    if statement.decision is Decision.REJECT:
        _set_status(
            session,
            draft,
            DraftStatus.REJECTED,
            now=now,
            reason=statement.reason,
            actor=principal.actor,
            trace_id=trace_id,
        )
        return draft
    quorum = check_quorum(session, draft, runtime)
    if quorum.met:
        _set_status(
            session,
            draft,
            DraftStatus.APPROVED,
            now=now,
            actor=principal.actor,
            trace_id=trace_id,
            data={"approvers": quorum.approvers},
        )
    return draft


@dataclass(frozen=True)
class Quorum:
    """The verified approvals of a draft's current revision."""

    required: int
    approvers: list[str] = field(default_factory=list)
    rejected_by: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def met(self) -> bool:
        return not self.rejected_by and len(self.approvers) >= self.required


def check_quorum(session: Session, draft: Draft, runtime: Runtime) -> Quorum:
    """Count only approvals whose signatures verify against the draft as stored now.

    The number required is the larger of what the draft records and what the
    configured policy demands today for the amount in the *signed* params (never
    the unsigned amount columns), so no edited column can lower the bar.
    """
    action = runtime.registry.write(draft.action)
    if action is None:
        return Quorum(required=1, problems=[f"the action {draft.action} is not registered"])
    try:
        signed = action.Input.model_validate_json(json.dumps(draft.params))
    except ValidationError:
        return Quorum(required=1, problems=["the stored params are not valid for the action"])
    policy = resolve(
        runtime.policies,
        draft.action,
        amount=action.amount_of(signed),
        default_ttl_seconds=runtime.settings.default_draft_ttl_seconds,
    )
    required = max(draft.approvals_required, policy.approvals_required, 1)
    digest = params_sha256(draft.params)
    approvers: set[str] = set()
    rejected_by: list[str] = []
    problems: list[str] = []
    for approval in repository.for_draft(session, draft.id, draft.revision):
        key = keys_repository.get(session, draft.tenant, approval.key_id)
        problem = approval_problem(approval, draft, key, digest=digest)
        if problem:
            problems.append(f"{approval.id} by {approval.approver}: {problem}")
        elif approval.decision == Decision.REJECT.value:
            rejected_by.append(approval.approver)
        else:
            approvers.add(approval.approver)
    return Quorum(
        required=required, approvers=sorted(approvers), rejected_by=rejected_by, problems=problems
    )


def approval_problem(
    approval: Approval, draft: Draft, key: ApproverKey | None, *, digest: str
) -> str | None:
    """Why a stored approval does not count for the draft's current revision, or None."""
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
        "decision": approval.decision,
    }
    mismatched = sorted(name for name, value in expected.items() if statement.get(name) != value)
    if mismatched:
        return "statement does not match the stored draft: " + ", ".join(mismatched)
    if key is None or key.approver != approval.approver:
        return "the signing key is not registered to the approver"
    if key.revoked_at is not None and key.revoked_at <= approval.created_at:
        return "the key was revoked before it signed"
    if not verify(key.public_key, canonical_json(statement), approval.signature):
        return "the signature does not verify"
    if approval.approver in {draft.proposed_by, draft.on_behalf_of}:
        return "the approver proposed the draft"
    return None


def _check_identity(principal: Principal, draft_id: str, statement: ApprovalStatement) -> None:
    if statement.draft_id != draft_id:
        raise _refused(
            "STATEMENT_MISMATCH",
            "The statement names a different draft than the URL.",
            "Sign a statement for this draft.",
            category=Category.INVALID_ARGUMENT,
        )
    if statement.tenant != principal.tenant:
        raise _refused(
            "STATEMENT_MISMATCH",
            "The statement names a different tenant than your token.",
            "Sign a statement for your own tenant.",
            category=Category.INVALID_ARGUMENT,
        )
    if statement.approver != principal.subject:
        raise _refused(
            "APPROVER_MISMATCH",
            "The statement's approver is not the subject of your token.",
            "Sign statements only in your own name, with your own token.",
            category=Category.PERMISSION_DENIED,
        )


def _check_draft_state(
    session: Session, draft: Draft, statement: ApprovalStatement, *, now: datetime
) -> None:
    if expire_if_due(session, draft, now=now):
        raise _refused(
            "DRAFT_EXPIRED",
            "The draft has expired; nothing expired can be approved.",
            "Ask for a new proposal if the change is still wanted.",
            category=Category.CONFLICT,
        )
    open_for = (
        {DraftStatus.PROPOSED}
        if statement.decision is Decision.APPROVE
        else {DraftStatus.PROPOSED, DraftStatus.APPROVED}
    )
    if DraftStatus(draft.status) not in open_for:
        raise _refused(
            "DRAFT_NOT_OPEN",
            f"The draft is {draft.status}; it no longer accepts {statement.decision.value} "
            "decisions.",
            "Check the draft's current status.",
            category=Category.CONFLICT,
        )


def _check_binding(draft: Draft, statement: ApprovalStatement) -> None:
    if statement.revision != draft.revision:
        raise _refused(
            "STALE_REVISION",
            f"The statement is for revision {statement.revision}, but the draft is at "
            f"revision {draft.revision}; earlier revisions can no longer be approved.",
            "Fetch the draft again, review the current revision and sign that.",
            category=Category.CONFLICT,
        )
    mismatched = [
        name
        for name, expected in (
            ("action", draft.action),
            ("contract_version", draft.contract_version),
            ("params_sha256", params_sha256(draft.params)),
        )
        if getattr(statement, name) != expected
    ]
    if mismatched or draft.params_sha256 != params_sha256(draft.params):
        raise _refused(
            "STATEMENT_MISMATCH",
            "The statement does not match the draft's current revision: "
            + ", ".join(mismatched or ["params_sha256"])
            + ".",
            "Fetch the draft again and sign the statement for what it shows.",
            category=Category.CONFLICT,
        )


def _check_freshness(statement: ApprovalStatement, *, now: datetime, skew_seconds: int) -> None:
    issued_at = datetime.fromisoformat(statement.issued_at.replace("Z", "+00:00"))
    if abs(now - issued_at) > timedelta(seconds=skew_seconds):
        raise _refused(
            "STATEMENT_STALE",
            f"issued_at {statement.issued_at} is more than {skew_seconds} s away from "
            "the server's clock.",
            "Sign a fresh statement now (and check your clock).",
            category=Category.CONFLICT,
        )


def _set_status(
    session: Session,
    draft: Draft,
    status: DraftStatus,
    *,
    now: datetime,
    actor: str,
    trace_id: str | None,
    reason: str | None = None,
    data: dict[str, object] | None = None,
) -> None:
    draft.status = status.value
    draft.status_reason = reason
    draft.updated_at = now
    if status not in (DraftStatus.PROPOSED, DraftStatus.APPROVED):
        draft.open_dedupe_key = None
    session.add(draft)
    session.flush()
    audit.record(
        session,
        tenant=draft.tenant,
        actor=actor,
        type=f"draft.{status.value}",
        draft_id=draft.id,
        trace_id=trace_id,
        data={"revision": draft.revision, "reason": reason, **(data or {})},
    )


def _refused(
    code: str,
    message: str,
    suggested_action: str,
    *,
    category: Category = Category.PERMISSION_DENIED,
) -> DomainError:
    return DomainError(code, category, message, suggested_action=suggested_action)
