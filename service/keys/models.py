from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, String, Text
from sqlmodel import Field, SQLModel

from service.sql import EnumText, UTCDateTime


class ApproverKey(SQLModel, table=True):
    __tablename__ = "approver_keys"

    key_id: str = Field(primary_key=True, max_length=64)
    tenant: str = Field(max_length=64, index=True)
    approver: str = Field(max_length=128)
    public_key: str = Field(max_length=64, unique=True)  # raw Ed25519, base64url
    label: str = Field(default="", max_length=200)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    revoked_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))


class ApproverPasskey(SQLModel, table=True):
    """A WebAuthn credential an admin accepted as an approver's signing credential.

    The second signature scheme (docs/approvals.md): the approver's authenticator signs
    ``authenticatorData || SHA-256(clientDataJSON)`` where the client data's challenge is
    SHA-256(JCS(statement)). Only the public half is stored, as the authenticator's COSE key.
    """

    __tablename__ = "approver_passkeys"

    key_id: str = Field(primary_key=True, max_length=64)  # passkey- + 16 hex
    tenant: str = Field(max_length=64, index=True)
    approver: str = Field(max_length=128)
    # The credential id (base64url); authenticators may make them up to 1023 bytes long.
    credential_id: str = Field(sa_column=Column(String(1400), nullable=False, unique=True))
    public_key: str = Field(sa_column=Column(Text, nullable=False))  # COSE_Key, base64url
    algorithm: int  # its COSE algorithm (-7 ES256, -8 EdDSA, -257 RS256)
    # The authenticator's signature counter as last seen; 2^32 - 1 at most, so not an INT4.
    sign_count: int = Field(sa_column=Column(BigInteger, nullable=False))
    transports: list[str] = Field(sa_column=Column(JSON, nullable=False))
    aaguid: str = Field(max_length=36)
    # The relying party and origin it was registered at (checked against the settings then).
    rp_id: str = Field(max_length=253)
    origin: str = Field(max_length=2048)
    label: str = Field(default="", max_length=200)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    last_used_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    revoked_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))


class CredentialKind(StrEnum):
    ED25519 = "ed25519"
    PASSKEY = "passkey"


class EnrolmentStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"


class KeyEnrolment(SQLModel, table=True):
    """An approver's request to have a credential they made themselves accepted.

    A bearer token alone must never be enough to sign (DESIGN.md §4: token AND key), so a
    key generated in the browser or a passkey is usable only once an admin approved it.
    ``material`` is what the credential becomes: the Ed25519 public key, or the verified
    passkey (its credential id, COSE public key, counter, transports, …).
    """

    __tablename__ = "key_enrolments"

    id: str = Field(primary_key=True, max_length=40)
    tenant: str = Field(max_length=64, index=True)
    approver: str = Field(max_length=128)
    kind: CredentialKind = Field(sa_column=Column(EnumText(CredentialKind), nullable=False))
    key_id: str = Field(max_length=64, index=True)
    label: str = Field(default="", max_length=200)
    material: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    status: EnrolmentStatus = Field(sa_column=Column(EnumText(EnrolmentStatus), nullable=False))
    reason: str | None = Field(default=None, max_length=2000)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    decided_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    decided_by: str | None = Field(default=None, max_length=200)


class WebAuthnChallenge(SQLModel, table=True):
    """A registration challenge handed to one approver: single use, short-lived.

    Approvals need none (their challenge is the statement's digest); registering a passkey
    does, or an attestation made for someone else could be replayed.
    """

    __tablename__ = "webauthn_challenges"

    challenge: str = Field(primary_key=True, max_length=100)  # base64url of 32 random bytes
    tenant: str = Field(max_length=64)
    subject: str = Field(max_length=128)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    expires_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False, index=True))
