"""Standing-grant routes: the statement to sign, recording a signed grant, listing and
revoking grants (docs/approvals.md, "Standing grants")."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from service.api.deps import (
    Approver,
    JsonBody,
    ReadUnit,
    RuntimeDep,
    TraceIdDep,
    Unit,
    parse_body,
    principal_with,
    request_body,
)
from service.api.errors import problems
from service.grants import actions as grants
from service.grants.schemas import GrantPage, GrantRequest, GrantTerms, GrantToSign, GrantView
from service.principal import Principal, Role
from service.sql import utcnow

router = APIRouter(prefix="/v1/grants", tags=["grants"])

GrantId = Annotated[str, Path(pattern=r"^grt_[0-9a-f]{32}$", description="grt_ + 32 hex.")]
Revoker = Annotated[Principal, Depends(principal_with(Role.APPROVER, Role.ADMIN))]
Lister = Annotated[Principal, Depends(principal_with(Role.APPROVER, Role.AUDITOR, Role.ADMIN))]


@router.get(
    "",
    summary="Your tenant's standing grants, newest first",
    name="grants.list",
    responses=problems(401, 403),
)
def list_grants(session: ReadUnit, principal: Lister) -> GrantPage:
    return grants.list_grants(session, principal, now=utcnow())


@router.post(
    "/statement",
    summary="The grant statement to sign for the terms asked, and what it says in words",
    openapi_extra=request_body(GrantTerms),
    name="grants.statement",
    responses=problems(400, 401, 403),
)
def grant_statement(
    session: ReadUnit, runtime: RuntimeDep, principal: Approver, body: JsonBody
) -> GrantToSign:
    asked = parse_body(GrantTerms, body)
    return grants.to_sign(session, principal, asked, runtime=runtime, now=utcnow())


@router.post(
    "",
    summary="Record a standing grant you signed",
    openapi_extra=request_body(GrantRequest),
    status_code=201,
    name="grants.create",
    responses=problems(400, 401, 403, 409),
)
def create_grant(
    session: Unit, runtime: RuntimeDep, principal: Approver, trace_id: TraceIdDep, body: JsonBody
) -> GrantView:
    # The body is parsed by the core, not by FastAPI, so its refusal is INVALID_ARGUMENT.
    request = parse_body(GrantRequest, body)
    return grants.create(
        session, principal, request, runtime=runtime, now=utcnow(), trace_id=trace_id
    )


@router.post(
    "/{grant_id}/revoke",
    summary="Revoke a standing grant (its approver or an admin)",
    name="grants.revoke",
    responses=problems(400, 401, 403, 404),
)
def revoke_grant(
    grant_id: GrantId, session: Unit, principal: Revoker, trace_id: TraceIdDep
) -> GrantView:
    return grants.revoke(session, principal, grant_id, now=utcnow(), trace_id=trace_id)
