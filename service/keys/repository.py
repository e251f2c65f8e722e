from __future__ import annotations

from sqlmodel import Session, col, select

from service.keys.models import ApproverKey


def get(session: Session, tenant: str, key_id: str) -> ApproverKey | None:
    key = session.get(ApproverKey, key_id)
    return key if key is not None and key.tenant == tenant else None


def by_public_key(session: Session, public_key: str) -> ApproverKey | None:
    statement = select(ApproverKey).where(col(ApproverKey.public_key) == public_key)
    return session.exec(statement).one_or_none()


def list_for(session: Session, tenant: str, approver: str | None = None) -> list[ApproverKey]:
    statement = select(ApproverKey).where(col(ApproverKey.tenant) == tenant)
    if approver is not None:
        statement = statement.where(col(ApproverKey.approver) == approver)
    return list(session.exec(statement.order_by(col(ApproverKey.created_at))).all())


def by_ids(session: Session, tenant: str, key_ids: set[str]) -> dict[str, ApproverKey]:
    """The tenant's keys among ``key_ids``, by id (one query for a whole quorum)."""
    if not key_ids:
        return {}
    statement = select(ApproverKey).where(
        col(ApproverKey.tenant) == tenant, col(ApproverKey.key_id).in_(sorted(key_ids))
    )
    return {key.key_id: key for key in session.exec(statement).all()}
