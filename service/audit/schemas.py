"""How auditors see the log: events, filters, pages, checkpoints, traces."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_PAGE = 500


class EventView(BaseModel):
    """An event exactly as hashed (plus nothing): what exports contain, line by line."""

    seq: int
    at: str = Field(description="RFC 3339 UTC with microseconds, exactly as hashed.")
    tenant: str
    actor: str
    type: str
    draft_id: str | None
    execution_id: str | None
    trace_id: str | None
    data: dict[str, Any]
    prev_hash: str
    hash: str


class EventFilter(BaseModel):
    """Filters shared by the events query and the export."""

    model_config = ConfigDict(frozen=True)

    type: str | None = Field(default=None, max_length=64)
    actor: str | None = Field(default=None, max_length=200)
    draft_id: str | None = Field(default=None, max_length=64)
    execution_id: str | None = Field(default=None, max_length=64)
    trace_id: str | None = Field(default=None, max_length=32)
    since: datetime | None = None
    until: datetime | None = None
    # Not a query parameter: the export sets it to the head read before its own
    # ``audit.exported`` event, so an export is a prefix of the chain (docs/audit.md).
    through_seq: int | None = Field(default=None, ge=0)

    @field_validator("since", "until")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("give a timezone (RFC 3339), e.g. 2026-11-30T10:00:00Z")
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise ValueError("the time is out of range once converted to UTC") from None

    def active(self) -> dict[str, Any]:
        return {
            k: (v.isoformat() if isinstance(v, datetime) else v)
            for k, v in self.model_dump().items()
            if v is not None
        }


class EventPage(BaseModel):
    events: list[EventView]
    next_cursor: str | None = Field(
        description="Opaque; pass it back to continue after the last event of this page. "
        "Stable while new events are appended."
    )


class ChainHead(BaseModel):
    seq: int
    hash: str


class VerificationReport(BaseModel):
    """The result of verifying a tenant's chain (and its signed checkpoints)."""

    ok: bool
    events_checked: int
    head: ChainHead
    first_bad_seq: int | None = Field(description="The first event that does not verify.")
    problem: str | None
    checkpoints_checked: int
    anchored: bool = Field(
        description="Whether a verified signed checkpoint covers the head: if not, the events "
        "after anchored_seq could be deleted without verification noticing."
    )
    anchored_seq: int
    checkpoint_problem: str | None = Field(
        description="Why the chain is not being anchored (e.g. checkpoints overdue), if so."
    )


class CheckpointList(BaseModel):
    tenant: str
    public_key: str | None = Field(description="The checkpoint key's public half (pin it).")
    key_id: str | None
    checkpoints: list[dict[str, Any]]


class TraceStep(BaseModel):
    seq: int
    at: str
    type: str
    actor: str
    draft_id: str | None
    execution_id: str | None
    summary: str
    data: dict[str, Any]


class TraceView(BaseModel):
    trace_id: str
    drafts: list[dict[str, Any]]
    steps: list[TraceStep]
    diagnosis: str = Field(
        description="Where this interaction ended (its last outcome): success, or the kind of "
        "failure (tool choice, arguments, business rule, timeout, human decision, downstream "
        "system)."
    )
