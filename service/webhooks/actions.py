"""Webhook use cases for admins: add an endpoint, list, remove, ping it, read its delivery log.

Every change is audited in its own unit of work; the secret is returned once, by ``create``,
and is never written to the audit log, a log line or any answer after that.
"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

from sqlmodel import Session

from service.audit import actions as audit
from service.principal import Principal, Role
from service.runtime import Runtime
from service.validation import parse
from service.webhooks import crypto, errors, repository, state
from service.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from service.webhooks.schemas import (
    EVENT_TYPES,
    TEST_EVENT,
    AttemptView,
    DeliveryList,
    DeliveryView,
    EndpointCreate,
    EndpointCreated,
    EndpointList,
    EndpointView,
    TestQueued,
)
from service.webhooks.urls import checked_addresses, origin

MAX_DELIVERIES_LISTED = 100


def create(
    session: Session, principal: Principal, *, runtime: Runtime, body: Any, now: datetime
) -> EndpointCreated:
    """Register an endpoint for the caller's tenant; the answer holds its secret, once."""
    principal.require(Role.ADMIN)
    request = parse(EndpointCreate, body if isinstance(body, dict) else {"body": body})
    url = checked_addresses(
        request.url, allow_private=runtime.settings.webhook_allow_private_addresses
    )
    unknown = sorted(set(request.events) - set(EVENT_TYPES))
    if unknown:
        raise errors.event_unknown(unknown, EVENT_TYPES)
    events = [event for event in EVENT_TYPES if event in request.events]  # one order, no repeats
    endpoint_id = "whk_" + secrets.token_hex(12)
    secret = crypto.new_secret()
    endpoint = WebhookEndpoint(
        id=endpoint_id,
        tenant=principal.tenant,
        url=url,
        events=events,
        description=request.description,
        sealed_secret=crypto.seal(
            secret,
            key=crypto.sealing_key(runtime.settings.resolved_secret_key_file()),
            tenant=principal.tenant,
            endpoint_id=endpoint_id,
        ),
        created_by=principal.actor,
        created_at=now,
    )
    session.add(endpoint)
    session.flush()
    _audit(session, principal, "webhook.created", endpoint, events=events)
    return EndpointCreated(**view(endpoint).model_dump(), secret=secret)


def list_endpoints(session: Session, principal: Principal) -> EndpointList:
    principal.require(Role.ADMIN)
    endpoints = repository.active_endpoints(session, principal.tenant)
    return EndpointList(endpoints=[view(endpoint) for endpoint in endpoints])


def remove(
    session: Session, principal: Principal, *, endpoint_id: str, now: datetime
) -> EndpointView:
    """Stop sending to an endpoint. Deliveries still pending are not attempted again."""
    principal.require(Role.ADMIN)
    endpoint = repository.endpoint(session, principal.tenant, endpoint_id)
    if endpoint is None:
        raise errors.webhook_unavailable(endpoint_id)
    endpoint.removed_at = now
    session.add(endpoint)
    _audit(session, principal, "webhook.removed", endpoint)
    return view(endpoint)


def send_test(
    session: Session, principal: Principal, *, endpoint_id: str, now: datetime
) -> TestQueued:
    """Queue a ``webhook.test`` ping to one endpoint (delivered, retried and logged like any
    other delivery)."""
    principal.require(Role.ADMIN)
    endpoint = repository.endpoint(session, principal.tenant, endpoint_id)
    if endpoint is None:
        raise errors.webhook_unavailable(endpoint_id)
    facts = {"subject_status": "test", "draft_id": None, "execution_id": None}
    delivery = state.pending(endpoint, TEST_EVENT, facts, at=now)
    state.register(session, [delivery])
    _audit(session, principal, "webhook.test_requested", endpoint, delivery_id=delivery.id)
    return TestQueued(delivery_id=delivery.id, status=delivery.status)


def deliveries(
    session: Session, principal: Principal, *, endpoint_id: str, limit: int = 20
) -> DeliveryList:
    """An endpoint's newest deliveries with every attempt (also of a removed endpoint)."""
    principal.require(Role.ADMIN)
    endpoint = repository.endpoint(session, principal.tenant, endpoint_id, active_only=False)
    if endpoint is None:
        raise errors.webhook_unavailable(endpoint_id)
    found = repository.deliveries_for(session, endpoint.id, limit=min(limit, MAX_DELIVERIES_LISTED))
    attempts = repository.attempts_for(session, [delivery.id for delivery in found])
    return DeliveryList(
        endpoint_id=endpoint.id,
        deliveries=[delivery_view(d, attempts.get(d.id, [])) for d in found],
    )


def view(endpoint: WebhookEndpoint) -> EndpointView:
    return EndpointView(
        endpoint_id=endpoint.id,
        url=endpoint.url,
        events=list(endpoint.events),
        description=endpoint.description,
        created_by=endpoint.created_by,
        created_at=endpoint.created_at,
        active=endpoint.removed_at is None,
        removed_at=endpoint.removed_at,
    )


def delivery_view(delivery: WebhookDelivery, attempts: list[WebhookAttempt]) -> DeliveryView:
    return DeliveryView(
        delivery_id=delivery.id,
        event_type=delivery.event_type,
        draft_id=delivery.draft_id,
        execution_id=delivery.execution_id,
        status=delivery.status,
        attempts=[
            AttemptView(
                number=a.number,
                started_at=a.started_at,
                latency_ms=a.latency_ms,
                status_code=a.status_code,
                ok=a.ok,
                error=a.error,
            )
            for a in attempts
        ],
        next_attempt_at=delivery.next_attempt_at if delivery.finished_at is None else None,
        created_at=delivery.created_at,
        finished_at=delivery.finished_at,
    )


def _audit(
    session: Session,
    principal: Principal,
    type_: str,
    endpoint: WebhookEndpoint,
    **data: object,
) -> None:
    # The origin only: a URL's path or query may itself be a credential.
    audit.record(
        session,
        tenant=endpoint.tenant,
        actor=principal.actor,
        type=type_,
        data={"endpoint_id": endpoint.id, "origin": origin(endpoint.url), **data},
    )
