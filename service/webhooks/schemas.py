"""Webhook event types, what announces them, and the shapes admins send and read."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from service.validation import SafeLine
from service.webhooks.models import DeliveryStatus

ENDPOINT_ID_PATTERN = r"^whk_[0-9a-f]{24}$"
DELIVER_TASK = "draftgate.webhooks.deliver"
SWEEP_TASK = "draftgate.webhooks.sweep"
TEST_EVENT = "webhook.test"

# The event types an endpoint can subscribe to, and the audit events that announce each
# (docs/webhooks.md). Each is a change an approver or operator acts on; the others (tool
# calls, single signatures, retries, refusals of requests) are not announced. ``webhook.*``
# audit events never are: a delivery's own outcome must not cause another delivery.
ANNOUNCED_BY: dict[str, tuple[str, ...]] = {
    # A new draft, or a new revision of one (revised by its agent, or rebased on a source
    # that moved): either way approvals must be given (anew).
    "draft.proposed": ("draft.proposed", "draft.revised", "draft.rebased", "draft.narrowed"),
    # The quorum was reached (the last counted signature moved the draft to approved).
    "draft.approved": ("draft.approved",),
    "draft.rejected": ("draft.rejected",),
    # Past its expiry, or its execution never started before the deadline.
    "draft.expired": ("draft.expired",),
    # Still waiting for approval past its policy's escalate_after_seconds (docs/metrics.md,
    # "Oversight"): for a second group of approvers to pick it up.
    "draft.escalated": ("draft.escalated",),
    "execution.succeeded": ("execution.succeeded",),
    # A final failure: a business failure, retries used up, or refused at claim time
    # (its approvals did not verify, or its action or contract changed).
    "execution.failed": ("execution.failed", "execution.refused", "security.execution_refused"),
}
EVENT_TYPES: tuple[str, ...] = tuple(ANNOUNCED_BY)
WEBHOOK_EVENT_FOR: dict[str, str] = {
    audit_type: event for event, audit_types in ANNOUNCED_BY.items() for audit_type in audit_types
}


class EndpointCreate(BaseModel):
    """``POST /v1/webhooks``: where to send, and which events."""

    model_config = ConfigDict(extra="forbid", strict=True)

    url: Annotated[StrictStr, Field(min_length=8, max_length=2048)]
    events: Annotated[list[StrictStr], Field(min_length=1, max_length=len(EVENT_TYPES))]
    description: Annotated[SafeLine, Field(max_length=200)] = ""


class EndpointView(BaseModel):
    endpoint_id: str
    url: str
    events: list[str]
    description: str
    created_by: str
    created_at: datetime
    active: bool
    removed_at: datetime | None


class EndpointCreated(EndpointView):
    secret: str = Field(
        description="The whsec_ signing secret (Standard Webhooks). Shown once, in this answer "
        "only: store it with the receiver."
    )


class EndpointList(BaseModel):
    endpoints: list[EndpointView]


class AttemptView(BaseModel):
    number: int
    started_at: datetime
    latency_ms: int
    status_code: int | None
    ok: bool
    error: str | None = Field(
        description="HTTP <status>, or the class of the network error (never its text)"
    )


class DeliveryView(BaseModel):
    delivery_id: str = Field(description="The webhook-id header: the same on every retry.")
    event_type: str
    draft_id: str | None
    execution_id: str | None
    status: DeliveryStatus
    attempts: list[AttemptView]
    next_attempt_at: datetime | None
    created_at: datetime
    finished_at: datetime | None


class DeliveryList(BaseModel):
    endpoint_id: str
    deliveries: list[DeliveryView]


class TestQueued(BaseModel):
    delivery_id: str
    status: DeliveryStatus
