from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from service.tokens.schemas import SUBJECT_PATTERN, TENANT_PATTERN
from service.validation import SafeText, StrictInput


class KeyRegistration(StrictInput):
    tenant: str = Field(pattern=TENANT_PATTERN)
    approver: str = Field(pattern=SUBJECT_PATTERN)
    public_key: str = Field(pattern=r"^[A-Za-z0-9_-]{43}$", description="Raw key, base64url.")
    label: SafeText = Field(default="", max_length=200)


class KeyInfo(BaseModel):
    key_id: str
    tenant: str
    approver: str
    public_key: str
    label: str
    created_at: datetime
    revoked_at: datetime | None
    active: bool
