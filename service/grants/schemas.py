"""The signed grant statement (docs/approvals.md, "Standing grants"), the terms an approver
asks for, and how a grant is shown."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.approvals.schemas import (
    ISSUED_AT_PATTERN,
    SignedRequest,
    SignedStatement,
    moment,
    real_moment,
)
from service.canonical import canonical_json, sha256_hex
from service.money import MAX_AMOUNT_MINOR, AmountView, CurrencyCode, render_amount
from service.sql import rfc3339_seconds
from service.validation import StrictInput

GRANT_STATEMENT_TYPE = "draftgate.grant.v1"
SOURCE_REF_PATTERN = r"^[A-Za-z0-9._:@+=/-]{1,128}$"
MOMENT = Field(pattern=ISSUED_AT_PATTERN, description='RFC 3339 UTC with "Z".')


class GrantLimits(StrictInput):
    """What a grant allows, beside its action: each bound present is a constraint."""

    currency: CurrencyCode | None = Field(
        default=None, description="The currency of every amount bound; required with them."
    )
    max_amount_minor: int | None = Field(
        default=None,
        ge=1,
        le=MAX_AMOUNT_MINOR,
        description="The largest amount of one draft. Without it, the grant covers only "
        "drafts that move no amount.",
    )
    cap_minor: int | None = Field(
        default=None,
        ge=1,
        le=MAX_AMOUNT_MINOR,
        description="The most all covered drafts may add up to within cap_window_seconds.",
    )
    cap_window_seconds: int | None = Field(default=None, ge=60, le=30 * 86_400)
    source_ref: str | None = Field(
        default=None,
        pattern=SOURCE_REF_PATTERN,
        description='Only drafts on this source, e.g. "order:ORD-1004".',
    )
    agent: str | None = Field(
        default=None, min_length=1, max_length=128, description="Only drafts of this agent."
    )
    max_uses: int | None = Field(
        default=None, ge=1, le=10_000, description="The most drafts it may cover."
    )

    @model_validator(mode="after")
    def _bounds_need_their_currency(self) -> GrantLimits:
        amounts = self.max_amount_minor is not None or self.cap_minor is not None
        if amounts != (self.currency is not None):
            raise ValueError("amount bounds and currency go together")
        if (self.cap_minor is None) != (self.cap_window_seconds is None):
            raise ValueError("cap_minor and cap_window_seconds go together")
        if self.cap_minor is not None and self.max_amount_minor is None:
            raise ValueError("a cap needs max_amount_minor, the most one draft may move")
        return self


class GrantStatement(SignedStatement, GrantLimits):
    """Exactly the JSON object an approver signs to grant in advance; JCS(statement) are the
    signed bytes."""

    type: Literal["draftgate.grant.v1"]
    tenant: str = Field(min_length=1, max_length=64)
    approver: str = Field(min_length=1, max_length=128)
    key_id: str = Field(min_length=1, max_length=64)
    action: str = Field(min_length=1, max_length=64)
    not_before: str = MOMENT
    expires_at: str = MOMENT
    issued_at: str = MOMENT

    _real_moments = field_validator("not_before", "expires_at", "issued_at")(real_moment)

    @model_validator(mode="after")
    def _window(self) -> GrantStatement:
        if moment(self.expires_at) <= moment(self.not_before):
            raise ValueError("expires_at must be after not_before")
        return self

    @property
    def grant_id(self) -> str:
        return grant_id_of(self.signed_value())

    @property
    def window(self) -> tuple[datetime, datetime]:
        return moment(self.not_before), moment(self.expires_at)

    def words(self) -> str:
        """The grant in plain words, as the approver sees it before signing."""
        start, end = self.window
        if self.max_amount_minor is not None and self.currency is not None:
            bound = f"up to {render_amount(self.max_amount_minor, self.currency)} each"
        else:
            bound = "that move no amount"
        parts = [f"{self.action} drafts {bound}"]
        if self.cap_minor is not None and self.cap_window_seconds is not None:
            assert self.currency is not None
            cap = render_amount(self.cap_minor, self.currency)
            parts.append(f"at most {cap} {per(self.cap_window_seconds)}")
        if self.max_uses is not None:
            parts.append(f"at most {self.max_uses} draft{'s' if self.max_uses > 1 else ''}")
        if self.cap_minor is None and self.max_uses is None:
            parts.append("no limit on how many")
        if self.source_ref is not None:
            parts.append(f"only on {self.source_ref}")
        if self.agent is not None:
            parts.append(f"only proposed by {self.agent}")
        parts.append(f"for {duration(end - start)} from {rfc3339_seconds(start)}")
        return ", ".join(parts)


def grant_id_of(statement: dict[str, Any]) -> str:
    return "grt_" + sha256_hex(canonical_json(statement))[:32]


def per(seconds: int) -> str:
    return "a day" if seconds == 86_400 else f"per {duration(timedelta(seconds=seconds))}"


def duration(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds % size == 0 and seconds >= size and not (unit == "d" and seconds < 2 * size):
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


class GrantRequest(SignedRequest):
    """Body of POST /v1/grants: the grant statement and exactly one of its Ed25519
    ``signature`` or a passkey's ``webauthn`` assertion."""

    statement: GrantStatement


class GrantTerms(GrantLimits):
    """Body of POST /v1/grants/statement: the grant an approver wants, for the server to
    write out as the statement to sign and in plain words."""

    action: str = Field(min_length=1, max_length=64)
    duration_seconds: int = Field(ge=300, le=30 * 86_400)
    not_before: str | None = Field(
        default=None, pattern=ISSUED_AT_PATTERN, description="Default: now."
    )

    _real_moment = field_validator("not_before")(real_moment)


class GrantToSign(BaseModel):
    """The statement to sign for the terms asked, and what it says in words."""

    model_config = ConfigDict(frozen=True)

    statement: dict[str, Any]
    words: str
    grant_id: str | None  # known once key_id is filled in (it names the statement)


class GrantView(BaseModel):
    """A grant as approvers and auditors see it."""

    model_config = ConfigDict(frozen=True)

    grant_id: str
    action: str
    approver: str
    key_id: str
    scheme: str
    words: str
    statement: dict[str, Any]
    not_before: datetime
    expires_at: datetime
    created_at: datetime
    revoked_at: datetime | None
    revoked_by: str | None
    status: Literal["active", "pending", "expired", "revoked"]
    uses: int
    used: AmountView | None  # what its uses add up to, when it bounds amounts
    drafts: list[str]  # the drafts it covered, newest first (at most 50)


class GrantPage(BaseModel):
    model_config = ConfigDict(frozen=True)

    grants: list[GrantView]
