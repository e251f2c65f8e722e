"""What approvers and auditors read about drafts: the queue, and one draft in full."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlmodel import Session

from service.approvals import repository as approvals_repository
from service.approvals.actions import approval_problem, statement_to_sign
from service.approvals.models import Approval
from service.approvals.schemas import Decision
from service.canonical import params_sha256
from service.cursors import CursorCodec
from service.drafts import repository
from service.drafts.errors import draft_unavailable
from service.drafts.models import Draft, DraftStatus
from service.drafts.schemas import (
    ApprovalProgress,
    DraftApproval,
    DraftDetail,
    DraftPage,
    DraftSummary,
    ExecutionRef,
    ProposedBy,
    RevisionView,
    amount_of,
)
from service.drafts.state import reason_at, status_at
from service.errors import invalid_argument
from service.executions import repository as executions_repository
from service.keys import repository as keys_repository
from service.principal import Principal, Role

MAX_PAGE = 100
CURSOR_KIND = "drafts"


def list_drafts(
    session: Session,
    principal: Principal,
    *,
    cursors: CursorCodec,
    status: DraftStatus | None = None,
    action: str | None = None,
    cursor: str | None = None,
    limit: int = 20,
    now: datetime,
) -> DraftPage:
    principal.require(Role.APPROVER, Role.AUDITOR)
    limit = max(1, min(limit, MAX_PAGE))
    # Nothing past its time is listed as still open, though the read records nothing.
    rows = repository.page(
        session,
        principal.tenant,
        status=status,
        action=action,
        after=_position(cursors, cursor) if cursor else None,
        limit=limit + 1,
        now=now,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    counts = approvals_repository.approval_counts(session, {d.id: d.revision for d in rows})
    return DraftPage(
        drafts=[_summary(draft, counts[draft.id], now) for draft in rows],
        next_cursor=(
            cursors.encode(CURSOR_KIND, [rows[-1].created_at.isoformat(), rows[-1].id])
            if more and rows
            else None
        ),
    )


def get_detail(
    session: Session, principal: Principal, draft_id: str, *, now: datetime
) -> DraftDetail:
    principal.require(Role.APPROVER, Role.AUDITOR)
    draft = repository.get(session, principal.tenant, draft_id)
    if draft is None:
        raise draft_unavailable()
    status = status_at(draft, now)
    execution = executions_repository.for_draft(session, draft.id)
    return DraftDetail(
        draft_id=draft.id,
        tenant=draft.tenant,
        action=draft.action,
        contract_version=draft.contract_version,
        revision=draft.revision,
        status=status,
        status_reason=reason_at(draft, now),
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
        approvals=_approvals(session, draft),
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
            if principal.role is Role.APPROVER and status is DraftStatus.PROPOSED
            else None
        ),
    )


def _approvals(session: Session, draft: Draft) -> list[DraftApproval]:
    """Every decision ever recorded on the draft, and whether it counts for the current revision."""
    approvals = approvals_repository.for_draft(session, draft.id)
    keys = keys_repository.by_ids(session, draft.tenant, {a.key_id for a in approvals})
    digest = params_sha256(draft.params)
    return [_approval_view(a, draft, keys.get(a.key_id), digest) for a in approvals]


def _approval_view(approval: Approval, draft: Draft, key: Any, digest: str) -> DraftApproval:
    current = approval.revision == draft.revision
    problem = (
        approval_problem(approval, draft, key, digest=digest)
        if current
        else "signed an earlier revision"
    )
    return DraftApproval(
        approval_id=approval.id,
        revision=approval.revision,
        approver=approval.approver,
        key_id=approval.key_id,
        decision=approval.decision,
        reason=approval.reason,
        issued_at=str(approval.statement.get("issued_at")),
        recorded_at=approval.created_at,
        counts=current and problem is None and approval.decision is Decision.APPROVE,
        problem=problem,
    )


def _summary(draft: Draft, approvals_received: int, now: datetime) -> DraftSummary:
    return DraftSummary(
        draft_id=draft.id,
        action=draft.action,
        status=status_at(draft, now),
        revision=draft.revision,
        summary=draft.summary,
        amount=amount_of(draft),
        risk=draft.risk,
        approvals=ApprovalProgress(required=draft.approvals_required, received=approvals_received),
        created_at=draft.created_at,
        expires_at=draft.expires_at,
    )


def _position(cursors: CursorCodec, cursor: str) -> tuple[datetime, str]:
    position = cursors.decode(CURSOR_KIND, cursor)
    try:
        created_at, draft_id = position
        return datetime.fromisoformat(created_at), str(draft_id)
    except (TypeError, ValueError):  # pragma: no cover - the MAC says we wrote it
        raise invalid_argument("The cursor is not one this API returned.") from None
