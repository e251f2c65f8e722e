"""Execution tables: one execution per draft revision, its attempts, its outbox."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel

from service.sql import BigInt, EnumText, UTCDateTime
from service.tracing import current_traceparent


class ExecutionStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    EXPIRED = "expired"  # never started before its deadline: it will not run late


FINISHED = frozenset({ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED, ExecutionStatus.EXPIRED})


class AttemptResult(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRY = "retry"  # failed transiently; another attempt follows
    LOST = "lost"  # the worker stopped before recording an outcome


class Execution(SQLModel, table=True):
    __tablename__ = "executions"
    __table_args__ = (
        Index("ix_executions_status_updated", "status", "updated_at"),
        # One execution per revision: a draft re-approved against a moved source (a new
        # revision) is executed anew under a new idempotency key.
        UniqueConstraint("draft_id", "revision", name="uq_executions_draft_revision"),
    )

    id: str = Field(primary_key=True, max_length=40)
    tenant: str = Field(max_length=64, index=True)
    draft_id: str = Field(foreign_key="drafts.id", max_length=40, index=True)
    revision: int
    action: str = Field(max_length=64)
    # The key the downstream system deduplicates on: "<draft_id>:<revision>".
    idempotency_key: str = Field(max_length=100)
    status: ExecutionStatus = Field(sa_column=Column(EnumText(ExecutionStatus), nullable=False))
    attempts: int = 0
    requested_by: str = Field(max_length=200)
    trace_id: str | None = Field(default=None, max_length=32)
    # The W3C traceparent of the request that asked for it (tracing on), so that its task,
    # however often and by whom it is published, runs as a child of that request's span.
    traceparent: str | None = Field(default_factory=current_traceparent, max_length=55)
    outcome: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    error: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    # While running: when another delivery may take over (the worker died).
    lease_expires_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    # While queued for a retry: not before this moment (early deliveries wait).
    next_attempt_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    # How often its task was published, and when the sweeper may publish it again if nothing
    # happened by then (backing off, so a backlog is not multiplied by re-publishing).
    publishes: int = 0
    republish_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    updated_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    finished_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))


class ExecutionAttempt(SQLModel, table=True):
    __tablename__ = "execution_attempts"
    __table_args__ = (UniqueConstraint("execution_id", "number", name="uq_execution_attempts"),)

    id: int | None = Field(default=None, sa_column=Column(BigInt, primary_key=True))
    execution_id: str = Field(foreign_key="executions.id", max_length=40, index=True)
    number: int
    started_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    finished_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    result: AttemptResult = Field(sa_column=Column(EnumText(AttemptResult), nullable=False))
    detail: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))


class OutboxMessage(SQLModel, table=True):
    """A task to publish after the transaction that created it commits."""

    __tablename__ = "outbox_messages"
    __table_args__ = (Index("ix_outbox_unpublished", "published_at", "created_at"),)

    id: int | None = Field(default=None, sa_column=Column(BigInt, primary_key=True))
    task: str = Field(max_length=100)
    execution_id: str = Field(foreign_key="executions.id", max_length=40, index=True)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    published_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    publish_count: int = 0
