from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from service.principal import Role


class IssuedToken(BaseModel):
    """Returned once, at issue time: the only moment the secret exists outside its holder."""

    token_id: str
    token: str
    tenant: str
    subject: str
    role: Role
    on_behalf_of: str | None


class TokenInfo(BaseModel):
    token_id: str
    tenant: str
    subject: str
    role: Role
    on_behalf_of: str | None
    label: str
    created_at: datetime
    revoked_at: datetime | None
