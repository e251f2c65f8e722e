from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from service.principal import Role
from service.validation import SafeLine, StrictInput

TENANT_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
SUBJECT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,127}$"


class TokenRequest(StrictInput):
    """What an operator may ask for; identities are plain, bounded, never empty."""

    tenant: str = Field(pattern=TENANT_PATTERN)
    subject: str = Field(pattern=SUBJECT_PATTERN)
    role: Role
    on_behalf_of: str | None = Field(default=None, pattern=SUBJECT_PATTERN)
    label: SafeLine = Field(default="", max_length=200)


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
