from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column
from sqlmodel import Field, SQLModel

from service.sql import UTCDateTime


class ApproverKey(SQLModel, table=True):
    __tablename__ = "approver_keys"

    key_id: str = Field(primary_key=True, max_length=64)
    tenant: str = Field(max_length=64, index=True)
    approver: str = Field(max_length=128)
    public_key: str = Field(max_length=64, unique=True)  # raw Ed25519, base64url
    label: str = Field(default="", max_length=200)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    revoked_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
