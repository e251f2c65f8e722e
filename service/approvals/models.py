from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, Index, String, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from service.approvals.schemas import Decision
from service.sql import BigInt, EnumText, UTCDateTime


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
    # Ed25519: 86 characters; WebAuthn: the assertion's signature (ECDSA DER, EdDSA, RSA up
    # to 4096 bits), base64url.
    signature: str = Field(max_length=700)
    # How ``signature`` signs the statement: "ed25519" over JCS(statement), or "webauthn"
    # over authenticatorData || SHA-256(clientDataJSON) whose challenge is SHA-256(JCS(statement)).
    scheme: str = Field(
        default="ed25519", sa_column=Column(String(16), nullable=False, server_default="ed25519")
    )
    # WebAuthn only: the signed authenticator data and client data (base64url), kept so the
    # worker re-verifies the assertion exactly as it re-verifies an Ed25519 signature.
    authenticator_data: str | None = Field(default=None, sa_column=Column(Text))
    client_data_json: str | None = Field(default=None, sa_column=Column(Text))
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))


class DraftReview(SQLModel, table=True):
    """What one approver did with one revision of a draft, for oversight (docs/metrics.md,
    "Oversight"): when they first saw it, whether they looked at its params and its source,
    and when they decided. Not evidence of anything the approvals prove: a measure of care."""

    __tablename__ = "draft_reviews"
    __table_args__ = (Index("ix_draft_reviews_approver", "tenant", "approver", "decided_at"),)

    draft_id: str = Field(primary_key=True, foreign_key="drafts.id", max_length=40)
    revision: int = Field(primary_key=True)
    approver: str = Field(primary_key=True, max_length=128)
    tenant: str = Field(max_length=64)
    action: str = Field(max_length=64)
    first_viewed_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    params_seen_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    source_seen_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    decided_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    decision: str | None = Field(default=None, max_length=16)
    # From the first view to the signature; None: the decision came without a recorded view.
    dwell_ms: int | None = Field(default=None, sa_column=Column(BigInt))
    # From the draft's proposal to this decision.
    latency_ms: int | None = Field(default=None, sa_column=Column(BigInt))
    # Decided faster than the policy's min_dwell_seconds, or without a recorded view.
    hasty: bool = False
