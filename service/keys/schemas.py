from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class KeyInfo(BaseModel):
    key_id: str
    tenant: str
    approver: str
    public_key: str
    label: str
    created_at: datetime
    revoked_at: datetime | None
    active: bool
