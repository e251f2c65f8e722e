"""What approvers and auditors read about drafts: the queue, and one draft in full."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime

from sqlmodel import Session

from service.approvals import repository as approvals_repository
from service.approvals.actions import approval_problem, statement_to_sign
from service.canonical import params_sha256
from service.drafts import repository
from service.drafts.actions import draft_unavailable, expire_if_due
from service.drafts.models import Draft, DraftStatus
from service.drafts.schemas import (
    ApprovalProgress,
    DraftDetail,
    DraftPage,
    DraftSummary,
    ExecutionRef,
    ProposedBy,
    RevisionView,
    amount_of,
)
from service.errors import invalid_argument
from service.executions import repository as executions_repository
from service.keys import repository as keys_repository
from service.principal import Principal, Role

MAX_PAGE = 100


def list_drafts(
    session: Session,
    principal: Principal,
    *,
    status: DraftStatus | None = None,
    action: str | None = None,
    cursor: str | None = None,
    limit: int = 20,
    now: datetime,
) -> DraftPage:
    principal.require(Role.APPROVER, Role.AUDITOR)
    limit = max(1, min(limit, MAX_PAGE))
    # Expiry is enforced on every read: nothing past its time is listed as still open.
    for draft in repository.open_past_expiry(session, now, tenant=principal.tenant):
        expire_if_due(session, draft, now=now)
    rows = repository.page(
        session,
        principal.tenant,
        status=status.value if status else None,
        action=action,
        after=_decode(cursor) if cursor else None,
        limit=limit + 1,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    return DraftPage(
        drafts=[_summary(session, draft) for draft in rows],
        next_cursor=_encode(rows[-1]) if more and rows else None,
    )


def get_detail(
    session: Session, principal: Principal, draft_id: str, *, now: datetime
) -> DraftDetail:
    principal.require(Role.APPROVER, Role.AUDITOR)
    draft = repository.get(session, principal.tenant, draft_id)
    if draft is None:
        raise draft_unavailable()
    expire_if_due(session, draft, now=now)
    digest = params_sha256(draft.params)
    approvals = []
    for approval in approvals_repository.for_draft(session, draft.id):
        key = keys_repository.get(session, draft.tenant, approval.key_id)
        current = approval.revision == draft.revision
        problem = approval_problem(approval, draft, key, digest=digest) if current else None
        approvals.append(
            {
                "approval_id": approval.id,
                "revision": approval.revision,
                "approver": approval.approver,
                "key_id": approval.key_id,
                "decision": approval.decision,
                "reason": approval.reason,
                "issued_at": approval.statement.get("issued_at"),
                "recorded_at": approval.created_at,
                "counts": current and problem is None and approval.decision == "approve",
                "problem": problem if current else "signed an earlier revision",
            }
        )
    execution = executions_repository.for_draft(session, draft.id)
    open_for_approval = draft.status == DraftStatus.PROPOSED
    return DraftDetail(
        draft_id=draft.id,
        tenant=draft.tenant,
        action=draft.action,
        contract_version=draft.contract_version,
        revision=draft.revision,
        status=DraftStatus(draft.status),
        status_reason=draft.status_reason,
        params=draft.params,
        params_sha256=draft.params_sha256,
        summary=draft.summary,
        amount=amount_of(draft),
        risk=draft.risk,
        policy=draft.policy,
        approvals_required=draft.approvals_required,
        proposed_by=ProposedBy(agent=draft.proposed_by, on_behalf_of=draft.on_behalf_of),
        trace_id=draft.trace_id,
        created_at=draft.created_at,
        updated_at=draft.updated_at,
        expires_at=draft.expires_at,
        approvals=approvals,
        revisions=[
            RevisionView(
                revision=r.revision,
                params_sha256=r.params_sha256,
                summary=r.summary,
                created_at=r.created_at,
            )
            for r in repository.revisions(session, draft.id)
        ],
        execution=ExecutionRef(execution_id=execution.id, status=execution.status)
        if execution
        else None,
        statement_to_sign=(
            statement_to_sign(session, principal, draft, now=now)
            if principal.role is Role.APPROVER and open_for_approval
            else None
        ),
    )


def _summary(session: Session, draft: Draft) -> DraftSummary:
    return DraftSummary(
        draft_id=draft.id,
        action=draft.action,
        status=DraftStatus(draft.status),
        revision=draft.revision,
        summary=draft.summary,
        amount=amount_of(draft),
        risk=draft.risk,
        approvals=ApprovalProgress(
            required=draft.approvals_required,
            received=approvals_repository.count_approvals(session, draft.id, draft.revision),
        ),
        created_at=draft.created_at,
        expires_at=draft.expires_at,
    )


def _encode(draft: Draft) -> str:
    raw = json.dumps([draft.created_at.isoformat(), draft.id]).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _decode(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, draft_id = json.loads(raw)
        moment = datetime.fromisoformat(created_at)
    except (ValueError, TypeError, binascii.Error):
        raise invalid_argument("The cursor is not one this API returned.") from None
    if moment.tzinfo is None:
        raise invalid_argument("The cursor is not one this API returned.")
    return moment, str(draft_id)
