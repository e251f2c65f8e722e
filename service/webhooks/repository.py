"""Every query on the webhook tables (each scoped by tenant where a caller names rows)."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session, col, or_, select

from service.webhooks.models import (
    DeliveryStatus,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)


def active_endpoints(session: Session, tenant: str) -> list[WebhookEndpoint]:
    statement = select(WebhookEndpoint).where(
        col(WebhookEndpoint.tenant) == tenant, col(WebhookEndpoint.removed_at).is_(None)
    )
    return list(session.exec(statement.order_by(col(WebhookEndpoint.created_at))).all())


def endpoint(
    session: Session, tenant: str, endpoint_id: str, *, active_only: bool = True
) -> WebhookEndpoint | None:
    found = session.get(WebhookEndpoint, endpoint_id)
    if found is None or found.tenant != tenant:
        return None
    if active_only and found.removed_at is not None:
        return None
    return found


def endpoint_by_id(session: Session, endpoint_id: str) -> WebhookEndpoint | None:
    """For the worker, which acts on a delivery's own endpoint (no caller's tenant)."""
    return session.get(WebhookEndpoint, endpoint_id)


def delivery(
    session: Session, delivery_id: str, *, for_update: bool = False
) -> WebhookDelivery | None:
    statement = select(WebhookDelivery).where(col(WebhookDelivery.id) == delivery_id)
    if for_update:
        statement = statement.with_for_update()
    return session.exec(statement).first()


def due_for_publishing(session: Session, *, now: datetime, limit: int) -> list[str]:
    """Pending deliveries whose publish is due: new ones, retries whose message was lost, and
    attempts whose worker died (the lease ran out). Oldest first."""
    statement = (
        select(WebhookDelivery.id)
        .where(
            col(WebhookDelivery.status) == DeliveryStatus.PENDING,
            or_(
                col(WebhookDelivery.republish_at).is_(None),
                col(WebhookDelivery.republish_at) <= now,
            ),
        )
        .order_by(col(WebhookDelivery.created_at))
        .limit(limit)
    )
    return list(session.exec(statement).all())


def deliveries_for(session: Session, endpoint_id: str, *, limit: int) -> list[WebhookDelivery]:
    statement = (
        select(WebhookDelivery)
        .where(col(WebhookDelivery.endpoint_id) == endpoint_id)
        .order_by(col(WebhookDelivery.created_at).desc(), col(WebhookDelivery.id).desc())
        .limit(limit)
    )
    return list(session.exec(statement).all())


def attempts_for(session: Session, delivery_ids: list[str]) -> dict[str, list[WebhookAttempt]]:
    if not delivery_ids:
        return {}
    statement = (
        select(WebhookAttempt)
        .where(col(WebhookAttempt.delivery_id).in_(delivery_ids))
        .order_by(col(WebhookAttempt.delivery_id), col(WebhookAttempt.number))
    )
    found: dict[str, list[WebhookAttempt]] = {}
    for attempt in session.exec(statement).all():
        found.setdefault(attempt.delivery_id, []).append(attempt)
    return found
