"""What approvers and auditors read about drafts: the queue, and one draft in full."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session

from service.approvals import progress
from service.approvals.actions import statement_to_sign
from service.drafts import repository, world
from service.drafts.errors import draft_unavailable
from service.drafts.models import Draft, DraftStatus
from service.drafts.schemas import (
    DraftApproval,
    DraftDetail,
    DraftPage,
    DraftSummary,
    ExecutionRef,
    ProgressDetail,
    ProposedBy,
    RevisionView,
    amount_of,
)
from service.drafts.state import reason_at, status_at
from service.executions import repository as executions_repository
from service.principal import Principal, Role
from service.runtime import Runtime

MAX_PAGE = 100
CURSOR_KIND = "drafts"


def list_drafts(
    session: Session,
    principal: Principal,
    *,
    runtime: Runtime,
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
        after=repository.newest_first_after(runtime.cursors, CURSOR_KIND, cursor)
        if cursor
        else None,
        limit=limit + 1,
        now=now,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    standings = progress.of_drafts(session, progress.Rules.of(runtime), rows)
    return DraftPage(
        drafts=[_summary(draft, standings[draft.id], now) for draft in rows],
        next_cursor=(
            repository.newest_first_cursor(runtime.cursors, CURSOR_KIND, rows[-1])
            if more and rows
            else None
        ),
    )


def get_detail(
    session: Session, principal: Principal, draft_id: str, *, runtime: Runtime, now: datetime
) -> DraftDetail:
    """One draft in full, with its approval progress as the execute gate counts it."""
    return detail_and_progress(session, principal, draft_id, runtime=runtime, now=now)[0]


def detail_and_progress(
    session: Session, principal: Principal, draft_id: str, *, runtime: Runtime, now: datetime
) -> tuple[DraftDetail, progress.ApprovalProgress]:
    """``get_detail``, and the progress owner's answer it was built from."""
    principal.require(Role.APPROVER, Role.AUDITOR)
    draft = repository.get(session, principal.tenant, draft_id)
    if draft is None:
        raise draft_unavailable()
    status = status_at(draft, now)
    execution = executions_repository.for_draft(session, draft.id)
    standing = progress.of_draft(session, progress.Rules.of(runtime), draft)
    detail = DraftDetail(
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
        source_revision=draft.source_revision,
        source=world.source_view(session, runtime, draft, now),
        policy=draft.policy,
        approvals_required=standing.required,
        progress=ProgressDetail.of(standing),
        proposed_by=ProposedBy(agent=draft.proposed_by, on_behalf_of=draft.on_behalf_of),
        trace_id=draft.trace_id,
        created_at=draft.created_at,
        updated_at=draft.updated_at,
        expires_at=draft.expires_at,
        approvals=[_approval_view(verdict) for verdict in standing.verdicts],
        revisions=[
            RevisionView(
                revision=r.revision,
                params_sha256=r.params_sha256,
                summary=r.summary,
                created_at=r.created_at,
            )
            for r in repository.revisions(session, draft.id)
        ],
        execution=ExecutionRef(
            execution_id=execution.id,
            revision=execution.revision,
            status=execution.status,
            attempts=execution.attempts,
            error=execution.error,
        )
        if execution
        else None,
        statement_to_sign=(
            statement_to_sign(session, principal, draft, now=now)
            if principal.role is Role.APPROVER and status is DraftStatus.PROPOSED
            else None
        ),
    )
    return detail, standing


def _approval_view(verdict: progress.Verdict) -> DraftApproval:
    signed = verdict.signed
    return DraftApproval(
        approval_id=signed.reference,
        revision=signed.revision,
        approver=signed.approver,
        key_id=signed.key_id,
        decision=signed.decision,
        reason=signed.reason,
        issued_at=signed.issued_at,
        recorded_at=signed.signed_at,
        counts=verdict.counts,
        problem=verdict.problem,
        grant_id=signed.grant_id,
    )


def _summary(draft: Draft, standing: progress.ApprovalProgress, now: datetime) -> DraftSummary:
    return DraftSummary(
        draft_id=draft.id,
        action=draft.action,
        status=status_at(draft, now),
        revision=draft.revision,
        summary=draft.summary,
        amount=amount_of(draft),
        risk=draft.risk,
        approvals=ProgressDetail.of(standing),
        created_at=draft.created_at,
        expires_at=draft.expires_at,
    )
