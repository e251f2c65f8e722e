from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column
from sqlmodel import Field, SQLModel

from service.principal import Role
from service.sql import EnumText, UTCDateTime


class ApiToken(SQLModel, table=True):
    __tablename__ = "api_tokens"

    id: str = Field(primary_key=True, max_length=40)
    # SHA-256 of the secret. Tokens carry 256 bits of randomness, so a fast
    # hash is enough; the secret itself is shown once and never stored.
    token_sha256: str = Field(max_length=64, unique=True)
    tenant: str = Field(max_length=64, index=True)
    subject: str = Field(max_length=128)
    role: Role = Field(sa_column=Column(EnumText(Role), nullable=False))
    on_behalf_of: str | None = Field(default=None, max_length=128)
    label: str = Field(default="", max_length=200)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    revoked_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
