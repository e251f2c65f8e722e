"""Draft tables: the draft (current revision), its revision history, idempotency keys."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel

from service.sql import BigInt, EnumText, UTCDateTime


class DraftStatus(StrEnum):
    PROPOSED = "proposed"
    APPROVED = "approved"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"
    EXPIRED = "expired"
    WITHDRAWN = "withdrawn"  # its proposer took it back before anyone approved it


# Drafts that may still change the world: an identical proposal returns them.
OPEN_STATUSES = frozenset({DraftStatus.PROPOSED, DraftStatus.APPROVED})
FINAL_STATUSES = frozenset(
    {
        DraftStatus.SUCCEEDED,
        DraftStatus.FAILED,
        DraftStatus.REJECTED,
        DraftStatus.EXPIRED,
        DraftStatus.WITHDRAWN,
    }
)


class Draft(SQLModel, table=True):
    __tablename__ = "drafts"
    __table_args__ = (
        Index("ix_drafts_tenant_status_created", "tenant", "status", "created_at"),
        Index("ix_drafts_tenant_created", "tenant", "created_at"),
        Index("ix_drafts_peers", "tenant", "action", "policy_key", "created_at"),
        Index("ix_drafts_source", "tenant", "source_ref", "status"),
    )

    id: str = Field(primary_key=True, max_length=40)
    tenant: str = Field(max_length=64)
    action: str = Field(max_length=64)
    contract_version: int
    revision: int
    params: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    params_sha256: str = Field(max_length=64)
    summary: str = Field(max_length=2000)
    amount_minor: int | None = Field(default=None, sa_column=Column(BigInt))
    currency: str | None = Field(default=None, max_length=3)
    risk: str = Field(max_length=16)
    policy: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    approvals_required: int
    # The record the change changes (an action's declared source), its revision when this
    # revision was proposed (approvals bind it) and its facts as the approver saw them.
    source_ref: str | None = Field(default=None, max_length=200)
    source_revision: str | None = Field(default=None, max_length=128)
    source: list[dict[str, str]] | None = Field(default=None, sa_column=Column(JSON))
    # Drafts with the same policy_key are peers whose amounts add up against the policy's
    # tiers (a digest of the parameter the policy names, e.g. the order id), or NULL.
    policy_key: str | None = Field(default=None, max_length=64)
    proposed_by: str = Field(max_length=128)  # the agent's subject
    on_behalf_of: str | None = Field(default=None, max_length=128)
    trace_id: str | None = Field(default=None, max_length=32, index=True)
    idempotency_key: str | None = Field(default=None, max_length=255)
    status: DraftStatus = Field(sa_column=Column(EnumText(DraftStatus), nullable=False))
    status_reason: str | None = Field(default=None, max_length=2000)
    # sha256(tenant, proposer, action, params) while the draft is open, else NULL:
    # the unique index makes "no duplicate open proposal" atomic.
    open_dedupe_key: str | None = Field(default=None, max_length=64, unique=True)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    updated_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    expires_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))


class DraftRevision(SQLModel, table=True):
    """Every revision as proposed; approvals are bound to one of these."""

    __tablename__ = "draft_revisions"
    __table_args__ = (UniqueConstraint("draft_id", "revision", name="uq_draft_revisions"),)

    id: int | None = Field(default=None, primary_key=True)
    draft_id: str = Field(foreign_key="drafts.id", max_length=40)
    revision: int
    params: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    params_sha256: str = Field(max_length=64)
    summary: str = Field(max_length=2000)
    amount_minor: int | None = Field(default=None, sa_column=Column(BigInt))
    currency: str | None = Field(default=None, max_length=3)
    risk: str = Field(max_length=16)
    policy: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    source_revision: str | None = Field(default=None, max_length=128)
    source: list[dict[str, str]] | None = Field(default=None, sa_column=Column(JSON))
    trace_id: str | None = Field(default=None, max_length=32)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))


class IdempotencyKey(SQLModel, table=True):
    """A claimed key, scoped to (tenant, agent, end user, action), remembering its use.

    The end user is part of the scope: one agent serving two customers must
    never hand one customer's draft to the other on a replay.
    """

    __tablename__ = "idempotency_keys"

    tenant: str = Field(primary_key=True, max_length=64)
    agent: str = Field(primary_key=True, max_length=128)
    on_behalf_of: str = Field(primary_key=True, max_length=128)
    action: str = Field(primary_key=True, max_length=64)
    key: str = Field(primary_key=True, max_length=255)
    request_sha256: str = Field(max_length=64)
    draft_id: str = Field(max_length=40)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    expires_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False, index=True))
