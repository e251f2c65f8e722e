from __future__ import annotations

from sqlmodel import Session, col, select

from service.tokens.models import ApiToken


def by_digest(session: Session, token_sha256: str) -> ApiToken | None:
    statement = select(ApiToken).where(ApiToken.token_sha256 == token_sha256)
    return session.exec(statement).one_or_none()


def get(session: Session, tenant: str, token_id: str) -> ApiToken | None:
    token = session.get(ApiToken, token_id)
    return token if token is not None and token.tenant == tenant else None


def list_for(session: Session, tenant: str) -> list[ApiToken]:
    statement = (
        select(ApiToken)
        .where(col(ApiToken.tenant) == tenant)
        .order_by(col(ApiToken.created_at), col(ApiToken.id))
    )
    return list(session.exec(statement).all())
