"""Deliveries are created where audit events join the chain: in the same transaction.

``service.audit.chain`` calls ``announce`` with the events it has just appended, so every
announced change (a draft proposed, approved, …) gets its delivery rows exactly when it
commits, whichever door or process made it, and a rolled-back change announces nothing.
The cost on the hot path: a set lookup per event, and one indexed query on
``webhook_endpoints`` only for units that append an announced event.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlmodel import Session

from service.drafts.models import Draft
from service.executions.models import Execution
from service.webhooks import repository
from service.webhooks.models import DeliveryStatus, WebhookEndpoint
from service.webhooks.schemas import WEBHOOK_EVENT_FOR


def new_delivery_id() -> str:
    return "msg_" + secrets.token_hex(12)


def announce(session: Session, tenant: str, events: Sequence[dict[str, Any]]) -> None:
    """Create a pending delivery for each announced event and each endpoint subscribed to it."""
    announced = [event for event in events if event["type"] in WEBHOOK_EVENT_FOR]
    if not announced:
        return
    endpoints = repository.active_endpoints(session, tenant)
    if not endpoints:
        return
    rows = []
    for event in announced:
        event_type = WEBHOOK_EVENT_FOR[event["type"]]
        facts = _facts(session, event_type, event)
        rows += [
            delivery_row(endpoint, event_type, facts, at=event["at"])
            for endpoint in endpoints
            if event_type in endpoint.events
        ]
    if rows:
        repository.insert_deliveries(session, rows)


def delivery_row(
    endpoint: WebhookEndpoint, event_type: str, facts: dict[str, Any], *, at: datetime
) -> dict[str, Any]:
    return {
        "id": new_delivery_id(),
        "tenant": endpoint.tenant,
        "endpoint_id": endpoint.id,
        "event_type": event_type,
        "occurred_at": at,
        "status": DeliveryStatus.PENDING,
        "attempts": 0,
        "publishes": 0,
        "next_attempt_at": at,
        "republish_at": None,  # the next sweep publishes it
        "created_at": at,
        **facts,
    }


def _facts(session: Session, event_type: str, event: dict[str, Any]) -> dict[str, Any]:
    """The ids a payload carries, from the event and the rows it is about (already loaded in
    this unit of work: it just changed them)."""
    draft_id, execution_id = event["draft_id"], event["execution_id"]
    revision, action = event["data"].get("revision"), None
    if execution_id is not None and event_type.startswith("execution."):
        execution = session.get(Execution, execution_id)
        if execution is not None:
            revision, action = execution.revision, execution.action
    if action is None and draft_id is not None:
        draft = session.get(Draft, draft_id)
        if draft is not None:
            action = draft.action
            revision = revision if isinstance(revision, int) else draft.revision
    return {
        "draft_id": draft_id,
        "execution_id": execution_id,
        "revision": revision if isinstance(revision, int) else None,
        "action": action,
        "subject_status": event_type.split(".", 1)[1],
        "audit_seq": event["seq"],
    }
