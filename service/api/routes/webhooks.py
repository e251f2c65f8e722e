"""Admin routes for outgoing webhooks: add, list, remove, ping, and read the delivery log."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, Path, Query, Response

from service.api.deps import (
    JsonBody,
    PublisherDep,
    ReadUnit,
    RuntimeDep,
    Unit,
    principal_with,
    request_body,
)
from service.api.errors import problems
from service.principal import Principal, Role
from service.sql import utcnow
from service.webhooks import actions as webhooks
from service.webhooks.outbox import publish_due
from service.webhooks.schemas import (
    ENDPOINT_ID_PATTERN,
    DeliveryList,
    EndpointCreate,
    EndpointCreated,
    EndpointList,
    EndpointView,
    TestQueued,
)

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])

Admin = Annotated[Principal, Depends(principal_with(Role.ADMIN))]
EndpointId = Annotated[str, Path(pattern=ENDPOINT_ID_PATTERN, description="whk_ + 24 hex digits.")]


@router.post(
    "",
    summary="Add a webhook endpoint; the answer shows its signing secret, once",
    status_code=201,
    openapi_extra=request_body(EndpointCreate),
    name="webhooks.create",
    responses=problems(400, 401, 403),
)
def create_webhook(
    session: Unit, runtime: RuntimeDep, principal: Admin, body: JsonBody, response: Response
) -> EndpointCreated:
    created = webhooks.create(session, principal, runtime=runtime, body=body, now=utcnow())
    response.headers["Cache-Control"] = "no-store"  # the answer holds the signing secret
    return created


@router.get(
    "",
    summary="List the tenant's active webhook endpoints (never their secrets)",
    name="webhooks.list",
    responses=problems(401, 403),
)
def list_webhooks(session: ReadUnit, principal: Admin) -> EndpointList:
    return webhooks.list_endpoints(session, principal)


@router.delete(
    "/{endpoint_id}",
    summary="Remove a webhook endpoint: nothing more is sent to it",
    name="webhooks.remove",
    responses=problems(400, 401, 403, 404),
)
def remove_webhook(endpoint_id: EndpointId, session: Unit, principal: Admin) -> EndpointView:
    return webhooks.remove(session, principal, endpoint_id=endpoint_id, now=utcnow())


@router.post(
    "/{endpoint_id}/test",
    summary="Send a webhook.test ping to the endpoint (delivered by the worker)",
    status_code=202,
    name="webhooks.test",
    responses=problems(400, 401, 403, 404),
)
def test_webhook(
    endpoint_id: EndpointId,
    session: Unit,
    runtime: RuntimeDep,
    principal: Admin,
    publisher: PublisherDep,
    background: BackgroundTasks,
) -> TestQueued:
    queued = webhooks.send_test(session, principal, endpoint_id=endpoint_id, now=utcnow())
    # After the commit (a background task): a lost publish is the sweeper's to redo.
    background.add_task(
        publish_due,
        runtime.engine,
        publisher,
        delivery_id=queued.delivery_id,
        republish_after=runtime.settings.republish_after_seconds,
    )
    return queued


@router.get(
    "/{endpoint_id}/deliveries",
    summary="The endpoint's newest deliveries and every attempt (status, latency, error)",
    name="webhooks.deliveries",
    responses=problems(400, 401, 403, 404),
)
def list_deliveries(
    endpoint_id: EndpointId,
    session: ReadUnit,
    principal: Admin,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> DeliveryList:
    return webhooks.deliveries(session, principal, endpoint_id=endpoint_id, limit=limit)
