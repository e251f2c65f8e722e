"""The console's JSON endpoints for its JavaScript: decide, execute, follow an execution.

Each calls exactly the use case its /v1 twin calls — the /v1 route function itself, so an
approval variant added there (a passkey assertion beside the Ed25519 signature) is accepted
here the same day — with the session's principal, which is built from the credential the
session rests on exactly as a bearer request's is.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Path, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from service.api.console.deps import Caller, ReadUnit, Unit, Writer
from service.api.deps import JsonBody, PublisherDep, RuntimeDep, TraceIdDep
from service.api.errors import problem_response
from service.api.routes import batches as v1_batches
from service.api.routes import drafts as v1_drafts
from service.api.routes import grants as v1_grants
from service.drafts.schemas import DRAFT_ID_PATTERN
from service.errors import invalid_argument
from service.executions import review as executions_review
from service.executions.schemas import EXECUTION_ID_PATTERN, ExecutionView


class JsonRoute(APIRoute):
    """Request validation answered as problem+json here, without the API's bearer-token
    authentication of invalid requests (a console request has a cookie, not a token)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def json_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as invalid:
                problems = [
                    f"{'.'.join(str(part) for part in item['loc'])[:100]}: {item['msg']}"
                    for item in invalid.errors()
                ]
                error = invalid_argument("Invalid request: " + "; ".join(problems))
                return problem_response(error, instance=request.url.path)

        return json_handler


router = APIRouter(prefix="/console", include_in_schema=False, route_class=JsonRoute)

DraftId = Annotated[str, Path(pattern=DRAFT_ID_PATTERN)]
ExecutionId = Annotated[str, Path(pattern=EXECUTION_ID_PATTERN)]


@router.post("/drafts/{draft_id}/approvals", name="console.approval")
def submit_approval(
    draft_id: DraftId,
    session: Unit,
    runtime: RuntimeDep,
    caller: Writer,
    trace_id: TraceIdDep,
    body: JsonBody,
) -> JSONResponse:
    """Approve or reject, signed in the browser: the body of POST /v1/drafts/{id}/approvals."""
    detail = v1_drafts.submit_approval(
        draft_id=draft_id,
        session=session,
        runtime=runtime,
        principal=caller.principal,
        trace_id=trace_id,
        body=body,
    )
    return JSONResponse({"draft": detail.model_dump(mode="json")})


@router.post("/drafts/{draft_id}/views", status_code=204, name="console.draft_view")
def record_view(draft_id: DraftId, session: Unit, caller: Writer, body: JsonBody) -> Response:
    """The card is on screen (and which sections were read): POST /v1/drafts/{id}/views."""
    return v1_drafts.record_view(
        draft_id=draft_id, session=session, principal=caller.principal, body=body
    )


@router.post("/drafts/{draft_id}/narrow", name="console.narrowing")
def narrow(
    draft_id: DraftId,
    session: Unit,
    runtime: RuntimeDep,
    caller: Writer,
    trace_id: TraceIdDep,
    body: JsonBody,
) -> JSONResponse:
    """Narrowed params and their approval, signed in the browser (POST /v1/drafts/{id}/narrow)."""
    detail = v1_drafts.narrow(
        draft_id=draft_id,
        session=session,
        runtime=runtime,
        principal=caller.principal,
        trace_id=trace_id,
        body=body,
    )
    return JSONResponse({"draft": detail.model_dump(mode="json")})


@router.post("/drafts/{draft_id}/execute", status_code=202, name="console.execution")
def execute(
    draft_id: DraftId,
    session: Unit,
    runtime: RuntimeDep,
    caller: Writer,
    publisher: PublisherDep,
    trace_id: TraceIdDep,
    background: BackgroundTasks,
) -> JSONResponse:
    accepted = v1_drafts.execute(
        draft_id=draft_id,
        session=session,
        runtime=runtime,
        principal=caller.principal,
        publisher=publisher,
        trace_id=trace_id,
        background=background,
    )
    return JSONResponse(accepted.model_dump(mode="json"), status_code=202, background=background)


@router.post("/approvals/batch/statement", name="console.batch_statement")
def batch_statement(
    session: ReadUnit, runtime: RuntimeDep, caller: Writer, body: JsonBody
) -> JSONResponse:
    """The batch statement over the drafts picked (POST /v1/approvals/batch/statement)."""
    offered = v1_batches.batch_statement(
        session=session, runtime=runtime, principal=caller.principal, body=body
    )
    return JSONResponse(offered.model_dump(mode="json"))


@router.post("/approvals/batch", status_code=201, name="console.batch")
def submit_batch(
    session: Unit, runtime: RuntimeDep, caller: Writer, trace_id: TraceIdDep, body: JsonBody
) -> JSONResponse:
    """A batch signed in the browser: the body of POST /v1/approvals/batch."""
    result = v1_batches.submit_batch(
        session=session, runtime=runtime, principal=caller.principal, trace_id=trace_id, body=body
    )
    return JSONResponse(result.model_dump(mode="json"), status_code=201)


@router.post("/grants/statement", name="console.grant_statement")
def grant_statement(
    session: ReadUnit, runtime: RuntimeDep, caller: Writer, body: JsonBody
) -> JSONResponse:
    """The statement to sign for the terms asked, in words (POST /v1/grants/statement)."""
    offered = v1_grants.grant_statement(
        session=session, runtime=runtime, principal=caller.principal, body=body
    )
    return JSONResponse(offered.model_dump(mode="json"))


@router.post("/grants", status_code=201, name="console.grant")
def create_grant(
    session: Unit, runtime: RuntimeDep, caller: Writer, trace_id: TraceIdDep, body: JsonBody
) -> JSONResponse:
    """A grant signed in the browser: the body of POST /v1/grants."""
    created = v1_grants.create_grant(
        session=session, runtime=runtime, principal=caller.principal, trace_id=trace_id, body=body
    )
    return JSONResponse(created.model_dump(mode="json"), status_code=201)


@router.get("/executions/{execution_id}", name="console.execution.read")
def get_execution(execution_id: ExecutionId, session: ReadUnit, caller: Caller) -> ExecutionView:
    return executions_review.get(session, caller.principal, execution_id)
