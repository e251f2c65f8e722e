from __future__ import annotations

from sqlalchemy import func
from sqlmodel import Session, col, select

from service.approvals.models import Approval
from service.approvals.schemas import Decision


def count_approvals(session: Session, draft_id: str, revision: int) -> int:
    """Recorded approve decisions for one revision (each approver signs a revision once)."""
    statement = select(func.count()).where(
        col(Approval.draft_id) == draft_id,
        col(Approval.revision) == revision,
        col(Approval.decision) == Decision.APPROVE,
    )
    return int(session.exec(statement).one())


def for_draft(session: Session, draft_id: str, revision: int | None = None) -> list[Approval]:
    statement = select(Approval).where(col(Approval.draft_id) == draft_id)
    if revision is not None:
        statement = statement.where(col(Approval.revision) == revision)
    return list(session.exec(statement.order_by(col(Approval.created_at), col(Approval.id))).all())


def by_approver(session: Session, draft_id: str, revision: int, approver: str) -> Approval | None:
    statement = select(Approval).where(
        col(Approval.draft_id) == draft_id,
        col(Approval.revision) == revision,
        col(Approval.approver) == approver,
    )
    return session.exec(statement).one_or_none()


def approval_counts(session: Session, drafts: dict[str, int]) -> dict[str, int]:
    """Recorded approve decisions of each draft's given revision, for many drafts at once."""
    if not drafts:
        return {}
    statement = (
        select(Approval.draft_id, Approval.revision, func.count())
        .where(
            col(Approval.draft_id).in_(sorted(drafts)), col(Approval.decision) == Decision.APPROVE
        )
        .group_by(col(Approval.draft_id), col(Approval.revision))
    )
    counts = dict.fromkeys(drafts, 0)
    for draft_id, revision, count in session.exec(statement).all():
        if drafts.get(draft_id) == revision:
            counts[draft_id] = int(count)
    return counts
