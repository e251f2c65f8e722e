"""Audit tables: the events, and one head row per tenant that serialises appends."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel

from service.sql import BigInt, UTCDateTime


class AuditEvent(SQLModel, table=True):
    __tablename__ = "audit_events"
    __table_args__ = (
        UniqueConstraint("tenant", "seq", name="uq_audit_events_tenant_seq"),
        Index("ix_audit_events_tenant_type_seq", "tenant", "type", "seq"),
        Index("ix_audit_events_tenant_actor_seq", "tenant", "actor", "seq"),
        Index("ix_audit_events_tenant_draft_seq", "tenant", "draft_id", "seq"),
        Index("ix_audit_events_tenant_execution_seq", "tenant", "execution_id", "seq"),
        Index("ix_audit_events_tenant_trace_seq", "tenant", "trace_id", "seq"),
        Index("ix_audit_events_tenant_at_seq", "tenant", "at", "seq"),
    )

    id: int | None = Field(default=None, sa_column=Column(BigInt, primary_key=True))
    tenant: str = Field(max_length=64)
    seq: int = Field(sa_column=Column(BigInt, nullable=False))
    at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    actor: str = Field(max_length=200)
    type: str = Field(max_length=64)
    draft_id: str | None = Field(default=None, max_length=64)
    execution_id: str | None = Field(default=None, max_length=64)
    trace_id: str | None = Field(default=None, max_length=32)
    data: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    prev_hash: str = Field(max_length=64)
    hash: str = Field(max_length=64)


class AuditHead(SQLModel, table=True):
    """The last event of a tenant's chain. Locking this row orders concurrent appends."""

    __tablename__ = "audit_heads"

    tenant: str = Field(primary_key=True, max_length=64)
    seq: int = Field(default=0, sa_column=Column(BigInt, nullable=False))
    hash: str = Field(max_length=64)
    # The last event's ``at``: the next one is never earlier, whatever the clocks say.
    at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))


class AuditCheckpoint(SQLModel, table=True):
    """A signed statement of a tenant's chain head, made with a key kept outside the database.

    Anyone with write access to the database can recompute a hash chain; nobody
    without the checkpoint key can forge these, so a rewritten or truncated
    history disagrees with an earlier checkpoint.
    """

    __tablename__ = "audit_checkpoints"
    __table_args__ = (UniqueConstraint("tenant", "seq", name="uq_audit_checkpoints_tenant_seq"),)

    id: int | None = Field(default=None, sa_column=Column(BigInt, primary_key=True))
    tenant: str = Field(max_length=64)
    seq: int = Field(sa_column=Column(BigInt, nullable=False))
    hash: str = Field(max_length=64)
    at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    key_id: str = Field(max_length=64)
    signature: str = Field(max_length=200)
