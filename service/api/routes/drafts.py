"""Approver routes: the queue, one draft, signed decisions, and execution requests."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Path, Query, Response

from service.api.deps import (
    Approver,
    JsonBody,
    PublisherDep,
    ReadUnit,
    Reviewer,
    RuntimeDep,
    TraceIdDep,
    Unit,
    parse_body,
    request_body,
    text_query,
)
from service.api.errors import problems
from service.approvals import actions as approvals
from service.approvals import narrowing, oversight
from service.approvals.oversight import ViewReport
from service.approvals.schemas import ApprovalRequest, NarrowRequest
from service.drafts import review
from service.drafts.models import DraftStatus
from service.drafts.schemas import DRAFT_ID_PATTERN, DraftDetail, DraftPage
from service.executions import actions as executions
from service.executions.outbox import publish_pending
from service.executions.schemas import ExecutionAccepted
from service.sql import utcnow

router = APIRouter(prefix="/v1/drafts", tags=["drafts"])

DraftId = Annotated[str, Path(pattern=DRAFT_ID_PATTERN, description="dft_ + 32 hex digits.")]


@router.get(
    "",
    summary="List drafts of your tenant, newest first",
    name="drafts.list",
    responses=problems(400, 401, 403),
)
def list_drafts(
    session: ReadUnit,
    runtime: RuntimeDep,
    principal: Reviewer,
    status: DraftStatus | None = None,
    action: Annotated[str | None, text_query(64)] = None,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> DraftPage:
    return review.list_drafts(
        session,
        principal,
        runtime=runtime,
        status=status,
        action=action,
        cursor=cursor,
        limit=limit,
        now=utcnow(),
    )


@router.get(
    "/{draft_id}",
    summary="One draft: params, summary, policy, approvals, statement to sign",
    name="drafts.read",
    responses=problems(400, 401, 403, 404),
)
def get_draft(
    draft_id: DraftId, session: ReadUnit, runtime: RuntimeDep, principal: Reviewer
) -> DraftDetail:
    return review.get_detail(session, principal, draft_id, runtime=runtime, now=utcnow())


@router.post(
    "/{draft_id}/approvals",
    summary="Approve or reject the current revision with a signed statement",
    openapi_extra=request_body(ApprovalRequest),
    status_code=201,
    name="approval",
    responses=problems(400, 401, 403, 404, 409),
)
def submit_approval(
    draft_id: DraftId,
    session: Unit,
    runtime: RuntimeDep,
    principal: Approver,
    trace_id: TraceIdDep,
    body: JsonBody,
) -> DraftDetail:
    # The body is parsed by the core, not by FastAPI, so its refusal is INVALID_ARGUMENT.
    request = parse_body(ApprovalRequest, body)
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
    return review.get_detail(session, principal, draft_id, runtime=runtime, now=now)


@router.post(
    "/{draft_id}/views",
    summary="Say that the current revision is in front of you (and which sections you read)",
    openapi_extra=request_body(ViewReport),
    status_code=204,
    name="draft_view",
    responses=problems(400, 401, 403, 404),
)
def record_view(draft_id: DraftId, session: Unit, principal: Approver, body: JsonBody) -> Response:
    report = parse_body(ViewReport, body)
    oversight.record_view(session, principal, draft_id, report, now=utcnow())
    return Response(status_code=204)


@router.post(
    "/{draft_id}/narrow",
    summary="Narrow the current revision (a lower amount) and approve the narrowed revision",
    openapi_extra=request_body(NarrowRequest),
    status_code=201,
    name="narrowing",
    responses=problems(400, 401, 403, 404, 409),
)
def narrow(
    draft_id: DraftId,
    session: Unit,
    runtime: RuntimeDep,
    principal: Approver,
    trace_id: TraceIdDep,
    body: JsonBody,
) -> DraftDetail:
    request = parse_body(NarrowRequest, body)
    now = utcnow()
    narrowing.narrow(
        session,
        principal,
        runtime=runtime,
        draft_id=draft_id,
        request=request,
        now=now,
        trace_id=trace_id,
    )
    return review.get_detail(session, principal, draft_id, runtime=runtime, now=now)


@router.post(
    "/{draft_id}/execute",
    summary="Execute an approved draft (once; repeated calls return the same execution)",
    status_code=202,
    name="execution",
    responses=problems(400, 401, 403, 404, 409),
)
def execute(
    draft_id: DraftId,
    session: Unit,
    runtime: RuntimeDep,
    principal: Approver,
    publisher: PublisherDep,
    trace_id: TraceIdDep,
    background: BackgroundTasks,
) -> ExecutionAccepted:
    execution, created = executions.request(
        session, principal, draft_id=draft_id, runtime=runtime, now=utcnow(), trace_id=trace_id
    )
    if created:
        # Background tasks run after the unit of work committed: a request that rolls
        # back never sends a message (and a lost publish is the sweeper's to redo).
        background.add_task(
            publish_pending,
            runtime.engine,
            publisher,
            execution_id=execution.id,
            republish_after=runtime.settings.republish_after_seconds,
        )
    return ExecutionAccepted(execution_id=execution.id, status=execution.status)
