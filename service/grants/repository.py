from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlmodel import Session, col, select

from service.grants.models import Grant, GrantUse
from service.sql import insert_or_ignore


def get(session: Session, tenant: str, grant_id: str, *, for_update: bool = False) -> Grant | None:
    statement = select(Grant).where(col(Grant.id) == grant_id, col(Grant.tenant) == tenant)
    if for_update:
        statement = statement.with_for_update()
    return session.exec(statement).first()


def standing(session: Session, tenant: str, action: str, now: datetime) -> list[Grant]:
    """The tenant's unrevoked grants of ``action`` standing at ``now``, oldest first, locked
    (PostgreSQL) so two proposals cannot both take a grant's last room."""
    statement = (
        select(Grant)
        .where(
            col(Grant.tenant) == tenant,
            col(Grant.action) == action,
            col(Grant.revoked_at).is_(None),
            col(Grant.not_before) <= now,
            col(Grant.expires_at) > now,
        )
        .order_by(col(Grant.created_at), col(Grant.id))
        .with_for_update()
    )
    return list(session.exec(statement).all())


def listed(session: Session, tenant: str, *, limit: int) -> list[Grant]:
    """The tenant's grants, newest first."""
    statement = (
        select(Grant)
        .where(col(Grant.tenant) == tenant)
        .order_by(col(Grant.created_at).desc(), col(Grant.id).desc())
        .limit(limit)
    )
    return list(session.exec(statement).all())


def listed_all(session: Session, *, tenant: str | None) -> list[Grant]:
    """Every grant (of ``tenant``, or of all tenants), oldest first."""
    statement = select(Grant).order_by(col(Grant.created_at), col(Grant.id))
    if tenant is not None:
        statement = statement.where(col(Grant.tenant) == tenant)
    return list(session.exec(statement).all())


def by_ids(session: Session, grant_ids: Collection[str]) -> dict[str, Grant]:
    if not grant_ids:
        return {}
    statement = select(Grant).where(col(Grant.id).in_(sorted(grant_ids)))
    return {grant.id: grant for grant in session.exec(statement).all()}


def uses_of_drafts(session: Session, draft_ids: Collection[str]) -> dict[str, GrantUse]:
    """The grant use of each of the drafts that has one, by draft id."""
    if not draft_ids:
        return {}
    statement = select(GrantUse).where(col(GrantUse.draft_id).in_(sorted(draft_ids)))
    return {use.draft_id: use for use in session.exec(statement).all()}


def uses_of_grants(session: Session, grant_ids: Collection[str]) -> dict[str, list[GrantUse]]:
    """Every use of each grant, in the order they were given (``seq``)."""
    found: dict[str, list[GrantUse]] = {grant_id: [] for grant_id in grant_ids}
    if not found:
        return found
    statement = (
        select(GrantUse)
        .where(col(GrantUse.grant_id).in_(sorted(found)))
        .order_by(col(GrantUse.seq))
    )
    for use in session.exec(statement).all():
        found[use.grant_id].append(use)
    return found


def insert_unless_recorded(session: Session, grant: Grant) -> bool:
    """Insert the grant unless its id (its statement) is recorded already, by a concurrent
    request too; True if inserted."""
    return insert_or_ignore(session, Grant.__table__, grant.model_dump())  # type: ignore[attr-defined]


def add_use(session: Session, use: GrantUse) -> None:
    session.add(use)
    session.flush()


def release(session: Session, draft_id: str) -> None:
    """Forget the draft's grant use: a new revision is covered afresh (or not at all)."""
    use = session.get(GrantUse, draft_id)
    if use is not None:
        session.delete(use)
        session.flush()
