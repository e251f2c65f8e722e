from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, UniqueConstraint
from sqlmodel import Field, SQLModel

from service.approvals.schemas import Decision
from service.sql import EnumText, UTCDateTime


class Approval(SQLModel, table=True):
    """One approver's signed decision on one revision of a draft."""

    __tablename__ = "approvals"
    __table_args__ = (
        UniqueConstraint("draft_id", "revision", "approver", name="uq_approvals_one_per_approver"),
    )

    id: str = Field(primary_key=True, max_length=40)
    tenant: str = Field(max_length=64, index=True)
    draft_id: str = Field(foreign_key="drafts.id", max_length=40, index=True)
    revision: int
    approver: str = Field(max_length=128)
    key_id: str = Field(max_length=64)
    decision: Decision = Field(sa_column=Column(EnumText(Decision), nullable=False))
    reason: str | None = Field(default=None, max_length=2000)
    params_sha256: str = Field(max_length=64)
    # The statement exactly as signed, and its signature, so the worker can re-verify.
    statement: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    signature: str = Field(max_length=200)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
