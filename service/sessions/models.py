"""The console's session table: one row per sign-in, holding only a digest of its secret."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import Column, Index
from sqlmodel import Field, SQLModel

from service.principal import Role
from service.sql import EnumText, UTCDateTime


class SignInMethod(StrEnum):
    """How the person proved who they are. Single sign-on will add its own method; every
    session keeps the credential it rests on, so revoking that ends the session."""

    TOKEN = "token"  # noqa: S105 - a method's name, not a secret


class EndReason(StrEnum):
    SIGNED_OUT = "signed_out"
    IDLE = "idle"
    EXPIRED = "expired"
    CREDENTIAL_REVOKED = "credential_revoked"
    REPLACED = "replaced"  # the browser signed in again


class ConsoleSession(SQLModel, table=True):
    __tablename__ = "console_sessions"
    __table_args__ = (Index("ix_console_sessions_tenant_subject", "tenant", "subject"),)

    # The public id, in audit events and logs; never the secret.
    id: str = Field(primary_key=True, max_length=40)
    # SHA-256 of the cookie's secret (256 random bits, so a fast hash is enough).
    secret_sha256: str = Field(max_length=64, unique=True)
    tenant: str = Field(max_length=64)
    subject: str = Field(max_length=128)
    role: Role = Field(sa_column=Column(EnumText(Role), nullable=False))
    method: SignInMethod = Field(sa_column=Column(EnumText(SignInMethod), nullable=False))
    # The credential the session rests on (an api_tokens id for METHOD token).
    credential_id: str = Field(max_length=64)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    last_seen_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    expires_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    ended_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    end_reason: EndReason | None = Field(default=None, sa_column=Column(EnumText(EndReason, 32)))
