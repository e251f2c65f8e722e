from __future__ import annotations

from collections.abc import Collection

from sqlmodel import Session, col, select

from service.approvals.models import Approval


def for_draft(session: Session, draft_id: str) -> list[Approval]:
    """Every decision recorded on the draft (all revisions), oldest first."""
    return for_drafts(session, [draft_id])[draft_id]


def for_drafts(session: Session, draft_ids: Collection[str]) -> dict[str, list[Approval]]:
    """Every decision recorded on each of the drafts (all revisions), oldest first, in one
    query for a whole page of drafts."""
    found: dict[str, list[Approval]] = {draft_id: [] for draft_id in draft_ids}
    if not found:
        return found
    statement = (
        select(Approval)
        .where(col(Approval.draft_id).in_(sorted(found)))
        .order_by(col(Approval.created_at), col(Approval.id))
    )
    for approval in session.exec(statement).all():
        found[approval.draft_id].append(approval)
    return found


def decided_by(session: Session, tenant: str, approver: str, *, limit: int) -> set[str]:
    """The drafts ``approver`` signed a decision on (any revision), the latest ``limit``."""
    statement = (
        select(col(Approval.draft_id))
        .where(col(Approval.tenant) == tenant, col(Approval.approver) == approver)
        .order_by(col(Approval.created_at).desc())
        .limit(limit)
    )
    return set(session.exec(statement).all())
