"""Webhook tables: a tenant's endpoints, the deliveries announcing events, and their attempts."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import JSON, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel

from service.sql import BigInt, EnumText, UTCDateTime


class DeliveryStatus(StrEnum):
    PENDING = "pending"  # due now or after a backoff; an attempt may be in flight (leased)
    DELIVERED = "delivered"
    FAILED = "failed"  # every attempt failed, or it could not be sent at all


class WebhookEndpoint(SQLModel, table=True):
    """Where a tenant wants to be told about events, and the secret that signs what it gets."""

    __tablename__ = "webhook_endpoints"
    __table_args__ = (Index("ix_webhook_endpoints_tenant_removed", "tenant", "removed_at"),)

    id: str = Field(primary_key=True, max_length=40)
    tenant: str = Field(max_length=64)
    url: str = Field(max_length=2048)
    events: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    description: str = Field(default="", max_length=200)
    # The whsec_ signing secret, encrypted with a key derived from the server's secret key
    # file (service.webhooks.crypto): the database alone cannot sign a forged delivery.
    sealed_secret: str = Field(max_length=200)
    created_by: str = Field(max_length=200)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    # Removed endpoints are kept (their delivery log stays readable); nothing new is sent.
    removed_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))


class WebhookDelivery(SQLModel, table=True):
    """One event announced to one endpoint. Its id is the Standard Webhooks ``webhook-id``:
    the same on every retry, so a receiver deduplicates by it."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_status_republish", "status", "republish_at"),
        Index("ix_webhook_deliveries_endpoint_created", "endpoint_id", "created_at"),
    )

    id: str = Field(primary_key=True, max_length=40)
    tenant: str = Field(max_length=64)
    endpoint_id: str = Field(foreign_key="webhook_endpoints.id", max_length=40)
    event_type: str = Field(max_length=64)
    # What the payload says (ids only: never params, summaries, reasons or PII).
    draft_id: str | None = Field(default=None, max_length=64)
    execution_id: str | None = Field(default=None, max_length=64)
    revision: int | None = None
    action: str | None = Field(default=None, max_length=64)
    subject_status: str | None = Field(default=None, max_length=32)
    audit_seq: int | None = Field(default=None, sa_column=Column(BigInt))
    occurred_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    status: DeliveryStatus = Field(sa_column=Column(EnumText(DeliveryStatus), nullable=False))
    attempts: int = 0
    # Not before this moment (a backoff after a failed attempt).
    next_attempt_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    # While an attempt is in flight: when another worker may take over (this one died).
    lease_expires_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    # When the sweeper publishes it (again) if nothing happened by then; null once final.
    republish_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    publishes: int = 0
    last_status_code: int | None = None
    last_error: str | None = Field(default=None, max_length=300)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    finished_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))


class WebhookAttempt(SQLModel, table=True):
    """The delivery log: one row per attempt. No secrets, no headers, no request body, and of
    the response only its status: a log that read back answers would make the endpoint a
    way to read internal services (docs/decisions/webhook-destinations-public-and-pinned.md)."""

    __tablename__ = "webhook_attempts"
    __table_args__ = (UniqueConstraint("delivery_id", "number", name="uq_webhook_attempts"),)

    id: int | None = Field(default=None, sa_column=Column(BigInt, primary_key=True))
    delivery_id: str = Field(foreign_key="webhook_deliveries.id", max_length=40, index=True)
    number: int
    started_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    latency_ms: int
    status_code: int | None = None
    ok: bool
    error: str | None = Field(default=None, max_length=300)
