"""Grant tables: the signed grant, and the draft revisions it covered."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, Index, String, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from service.sql import BigInt, UTCDateTime


class Grant(SQLModel, table=True):
    """An approver's signed standing grant, exactly as signed (the worker re-verifies it)."""

    __tablename__ = "grants"
    __table_args__ = (Index("ix_grants_tenant_action", "tenant", "action"),)

    # "grt_" and the first 32 hex digits of SHA-256(JCS(statement)): the id names the signed
    # terms, so the same signed grant cannot be recorded twice.
    id: str = Field(primary_key=True, max_length=40)
    tenant: str = Field(max_length=64)
    action: str = Field(max_length=64)
    approver: str = Field(max_length=128)
    key_id: str = Field(max_length=64)
    statement: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    signature: str = Field(max_length=700)
    scheme: str = Field(sa_column=Column(String(16), nullable=False))
    authenticator_data: str | None = Field(default=None, sa_column=Column(Text))
    client_data_json: str | None = Field(default=None, sa_column=Column(Text))
    # Copies of the signed window, for finding the grants standing now; the statement rules.
    not_before: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    expires_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    revoked_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    revoked_by: str | None = Field(default=None, max_length=200)


class GrantUse(SQLModel, table=True):
    """The revision of a draft a grant covered: one grant per draft (its latest revision),
    so two standing grants never approve a draft between them without a person signing."""

    __tablename__ = "grant_uses"
    __table_args__ = (UniqueConstraint("grant_id", "seq", name="uq_grant_uses_grant_seq"),)

    draft_id: str = Field(primary_key=True, foreign_key="drafts.id", max_length=40)
    grant_id: str = Field(foreign_key="grants.id", max_length=40)
    # The use's place among its grant's uses, given under the grant's row lock: the caps
    # count the uses before it in this order (not by clock, which concurrent requests and
    # hosts do not share).
    seq: int
    tenant: str = Field(max_length=64)
    revision: int
    params_sha256: str = Field(max_length=64)
    # What the use counts against the grant's caps (the signed params' amount).
    amount_minor: int | None = Field(default=None, sa_column=Column(BigInt))
    currency: str | None = Field(default=None, max_length=3)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
