"""Batch approval routes: the statement over several drafts, and recording it signed
(docs/approvals.md, "Batch approval")."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import (
    Approver,
    JsonBody,
    ReadUnit,
    RuntimeDep,
    TraceIdDep,
    Unit,
    parse_body,
    request_body,
)
from service.api.errors import problems
from service.approvals import batches
from service.approvals.schemas import BatchAsk, BatchRequest, BatchResult, BatchToSign
from service.sql import utcnow

router = APIRouter(prefix="/v1/approvals/batch", tags=["approvals"])


@router.post(
    "/statement",
    summary="The batch statement to sign over several drafts, what each is, and the totals",
    openapi_extra=request_body(BatchAsk),
    name="approvals.batch_statement",
    responses=problems(400, 401, 403, 404),
)
def batch_statement(
    session: ReadUnit, runtime: RuntimeDep, principal: Approver, body: JsonBody
) -> BatchToSign:
    ask = parse_body(BatchAsk, body)
    return batches.statement_to_sign(session, principal, ask, runtime=runtime, now=utcnow())


@router.post(
    "",
    summary="Approve several drafts with one signed batch statement (all or nothing)",
    openapi_extra=request_body(BatchRequest),
    status_code=201,
    name="approvals.batch",
    responses=problems(400, 401, 403, 404, 409),
)
def submit_batch(
    session: Unit, runtime: RuntimeDep, principal: Approver, trace_id: TraceIdDep, body: JsonBody
) -> BatchResult:
    # The body is parsed by the core, not by FastAPI, so its refusal is INVALID_ARGUMENT.
    request = parse_body(BatchRequest, body)
    return batches.submit(
        session, principal, request, runtime=runtime, now=utcnow(), trace_id=trace_id
    )
