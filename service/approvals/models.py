from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, String, Text, UniqueConstraint
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
