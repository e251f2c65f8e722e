"""Approver routes: the queue, one draft, signed decisions, and execution requests."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from fastapi.responses import JSONResponse

from service.api.deps import (
    Approver,
    PublisherDep,
    Reviewer,
    RuntimeDep,
    TraceIdDep,
    refusal_recorder,
)
from service.approvals import actions as approvals
from service.approvals.schemas import ApprovalRequest
from service.db import run_unit
from service.drafts import review
from service.drafts.models import DraftStatus
from service.drafts.schemas import DraftDetail, DraftPage
from service.executions import actions as executions
from service.executions.outbox import publish_pending
from service.executions.schemas import ExecutionAccepted
from service.sql import utcnow
from service.validation import input_schema, parse

router = APIRouter(prefix="/v1/drafts", tags=["drafts"])

APPROVAL_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": input_schema(ApprovalRequest)}},
    }
}


@router.get("", summary="List drafts of your tenant, newest first", name="drafts.list")
def list_drafts(
    runtime: RuntimeDep,
    principal: Reviewer,
    trace_id: TraceIdDep,
    status: DraftStatus | None = None,
    action: Annotated[str | None, Query(max_length=64)] = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> DraftPage:
    return run_unit(
        runtime.engine,
        lambda session: review.list_drafts(
            session,
            principal,
            status=status,
            action=action,
            cursor=cursor,
            limit=limit,
            now=utcnow(),
        ),
        on_refusal=refusal_recorder(principal, "drafts.list", trace_id=trace_id),
    )


@router.get(
    "/{draft_id}",
    summary="One draft: params, summary, policy, approvals, statement to sign",
    name="drafts.read",
)
def get_draft(
    draft_id: str, runtime: RuntimeDep, principal: Reviewer, trace_id: TraceIdDep
) -> DraftDetail:
    return run_unit(
        runtime.engine,
        lambda session: review.get_detail(session, principal, draft_id, now=utcnow()),
        on_refusal=refusal_recorder(principal, "drafts.read", trace_id=trace_id, draft_id=draft_id),
    )


@router.post(
    "/{draft_id}/approvals",
    summary="Approve or reject the current revision with a signed statement",
    openapi_extra=APPROVAL_BODY,
    status_code=201,
    name="approval",
)
def submit_approval(
    draft_id: str,
    body: Annotated[Any, Body()],
    runtime: RuntimeDep,
    principal: Approver,
    trace_id: TraceIdDep,
) -> DraftDetail:
    def work(session: Any) -> DraftDetail:
        request = parse(ApprovalRequest, body if isinstance(body, dict) else {"body": body})
        now = utcnow()
        approvals.submit(
            session,
            principal,
            draft_id=draft_id,
            request=request,
            runtime=runtime,
            now=now,
            trace_id=trace_id,
        )
        return review.get_detail(session, principal, draft_id, now=now)

    return run_unit(
        runtime.engine,
        work,
        on_refusal=refusal_recorder(principal, "approval", trace_id=trace_id, draft_id=draft_id),
    )


@router.post(
    "/{draft_id}/execute",
    summary="Execute an approved draft (once; repeated calls return the same execution)",
    status_code=202,
    response_model=ExecutionAccepted,
    name="execution",
)
def execute(
    draft_id: str,
    runtime: RuntimeDep,
    principal: Approver,
    publisher: PublisherDep,
    trace_id: TraceIdDep,
) -> JSONResponse:
    execution, created = run_unit(
        runtime.engine,
        lambda session: executions.request(
            session,
            principal,
            draft_id=draft_id,
            runtime=runtime,
            now=utcnow(),
            trace_id=trace_id,
        ),
        on_refusal=refusal_recorder(principal, "execution", trace_id=trace_id, draft_id=draft_id),
    )
    if created:
        publish_pending(runtime.engine, publisher, execution_id=execution.id)
    accepted = ExecutionAccepted(execution_id=execution.id, status=execution.status)
    return JSONResponse(accepted.model_dump(mode="json"), status_code=202)
