from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from service.keys.models import CredentialKind, EnrolmentStatus
from service.tokens.schemas import SUBJECT_PATTERN, TENANT_PATTERN
from service.validation import SafeLine, SafeText, StrictInput


class KeyRegistration(StrictInput):
    tenant: str = Field(pattern=TENANT_PATTERN)
    approver: str = Field(pattern=SUBJECT_PATTERN)
    public_key: str = Field(pattern=r"^[A-Za-z0-9_-]{43}$", description="Raw key, base64url.")
    label: SafeLine = Field(default="", max_length=200)


class KeyInfo(BaseModel):
    key_id: str
    tenant: str
    approver: str
    public_key: str
    label: str
    created_at: datetime
    revoked_at: datetime | None
    active: bool


class KeyEnrolmentRequest(StrictInput):
    """Body of POST /v1/me/key-enrolments: a public key the approver made (in a browser)."""

    public_key: str = Field(pattern=r"^[A-Za-z0-9_-]{43}$", description="Raw key, base64url.")
    label: SafeLine = Field(default="", max_length=200)


class PasskeyRegistrationRequest(StrictInput):
    """Body of POST /v1/me/passkeys: what ``navigator.credentials.create()`` returned, in its
    JSON form (``PublicKeyCredential.toJSON()``), and a label."""

    credential: dict[str, Any] = Field(
        description="The RegistrationResponseJSON: id, rawId, type, response "
        "(clientDataJSON, attestationObject, transports), base64url."
    )
    label: SafeLine = Field(default="", max_length=200)


class EnrolmentDecision(StrictInput):
    """Body of POST /v1/admin/key-enrolments/{id}/reject."""

    reason: SafeText = Field(min_length=1, max_length=2000)


class AdminKeyRegistration(StrictInput):
    """Body of POST /v1/admin/keys: register an approver's Ed25519 public key directly."""

    approver: str = Field(pattern=SUBJECT_PATTERN)
    public_key: str = Field(pattern=r"^[A-Za-z0-9_-]{43}$", description="Raw key, base64url.")
    label: SafeLine = Field(default="", max_length=200)


class PasskeyInfo(BaseModel):
    key_id: str
    tenant: str
    approver: str
    credential_id: str
    algorithm: int
    sign_count: int
    transports: list[str]
    aaguid: str
    rp_id: str
    label: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    active: bool


class EnrolmentInfo(BaseModel):
    enrolment_id: str
    tenant: str
    approver: str
    kind: CredentialKind
    key_id: str
    label: str
    status: EnrolmentStatus
    # Ed25519: the public key; passkey: its credential id, algorithm, aaguid, transports.
    public_key: str | None
    credential_id: str | None
    reason: str | None
    created_at: datetime
    decided_at: datetime | None
    decided_by: str | None


class ApproverCredentials(BaseModel):
    """One approver's signing credentials: keys, passkeys and enrolments awaiting an admin."""

    approver: str
    keys: list[KeyInfo]
    passkeys: list[PasskeyInfo]
    enrolments: list[EnrolmentInfo]


class ApproverInfo(ApproverCredentials):
    """An approver as an admin sees them: ``status`` is ``active`` when they hold an
    approver token and an active credential, ``no_token`` / ``no_credential`` otherwise."""

    status: str
    active_tokens: int


class RegistrationOptions(BaseModel):
    """``options`` for ``navigator.credentials.create({publicKey: ...})``, JSON-encoded
    (``PublicKeyCredential.parseCreationOptionsFromJSON(options)`` reads them as they are)."""

    options: dict[str, Any] = Field(description="PublicKeyCredentialCreationOptionsJSON.")
    expires_at: datetime


class EnrolmentList(BaseModel):
    enrolments: list[EnrolmentInfo]


class ApproverList(BaseModel):
    approvers: list[ApproverInfo]
