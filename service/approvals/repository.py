from __future__ import annotations

from sqlalchemy import func
from sqlmodel import Session, col, select

from service.approvals.models import Approval


def count_approvals(session: Session, draft_id: str, revision: int) -> int:
    """Recorded approve decisions for one revision (each approver signs a revision once)."""
    statement = select(func.count()).where(
        col(Approval.draft_id) == draft_id,
        col(Approval.revision) == revision,
        col(Approval.decision) == "approve",
    )
    return int(session.exec(statement).one())
