"""The one owner of a webhook delivery row: its creation (pending), its publish bookkeeping,
its attempts and lease, and its status.

Deliveries are registered by whoever announces an event (service.webhooks.announce, called
by the unit of work right after its audit events joined the chain; an admin's test ping),
published by the outbox (service.webhooks.outbox) and attempted by the worker
(service.webhooks.delivery); each of them asks these functions to write the row. Nothing
else writes the columns tests/test_row_owners.py guards.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Table, insert
from sqlmodel import Session

from service import republish
from service.webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint

_DELIVERIES: Table = WebhookDelivery.__table__  # type: ignore[attr-defined]


def new_delivery_id() -> str:
    return "msg_" + secrets.token_hex(12)


def pending(
    endpoint: WebhookEndpoint, event_type: str, facts: dict[str, Any], *, at: datetime
) -> WebhookDelivery:
    """A delivery of ``event_type`` to ``endpoint``, pending and due now (not yet inserted:
    ``register``); the next sweep publishes it. ``facts``: the ids its payload carries."""
    return WebhookDelivery(
        id=new_delivery_id(),
        tenant=endpoint.tenant,
        endpoint_id=endpoint.id,
        event_type=event_type,
        occurred_at=at,
        status=DeliveryStatus.PENDING,
        attempts=0,
        publishes=0,
        next_attempt_at=at,
        republish_at=None,
        created_at=at,
        **facts,
    )


def register(session: Session, deliveries: Sequence[WebhookDelivery]) -> None:
    """Insert new deliveries in the unit of work (one statement, however many)."""
    if deliveries:
        session.execute(insert(_DELIVERIES), [delivery.model_dump() for delivery in deliveries])


def mark_published(
    session: Session, delivery: WebhookDelivery, *, now: datetime, after: float
) -> None:
    """Remember a publish; if this message is lost too, the sweep publishes it again after the
    backoff (service.republish), counted from when it is next due."""
    delivery.publishes += 1
    due = max(delivery.next_attempt_at, now)
    delivery.republish_at = due + republish.backoff(delivery.publishes, after=after)
    session.add(delivery)


def start_attempt(
    session: Session, delivery: WebhookDelivery, *, now: datetime, lease_seconds: float
) -> int:
    """Count the next attempt and lease it to this worker; its number."""
    delivery.attempts += 1
    delivery.lease_expires_at = now + timedelta(seconds=lease_seconds)
    delivery.republish_at = delivery.lease_expires_at  # if this worker dies
    session.add(delivery)
    return delivery.attempts


def end_attempt(
    session: Session, delivery: WebhookDelivery, *, status_code: int | None, error: str | None
) -> None:
    """The attempt is over (its outcome follows: ``finish`` or ``retry_later``)."""
    delivery.lease_expires_at = None
    delivery.last_status_code = status_code
    delivery.last_error = error
    session.add(delivery)


def retry_later(
    session: Session, delivery: WebhookDelivery, *, now: datetime, delay: float, grace: float
) -> None:
    """Make the next attempt due after ``delay`` seconds; the sweep publishes it ``grace``
    seconds after that if the task's own retry did not happen."""
    delivery.next_attempt_at = now + timedelta(seconds=delay)
    delivery.republish_at = delivery.next_attempt_at + timedelta(seconds=grace)
    session.add(delivery)


def finish(
    session: Session,
    delivery: WebhookDelivery,
    status: DeliveryStatus,
    *,
    now: datetime,
    error: str | None = None,
) -> None:
    """End the delivery, delivered or failed (``error``: why it could not be sent at all)."""
    if error is not None:
        delivery.last_error = error
    delivery.status = status
    delivery.finished_at = now
    delivery.lease_expires_at = None
    delivery.republish_at = None
    session.add(delivery)
