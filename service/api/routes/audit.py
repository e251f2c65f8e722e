"""Auditor routes: query, export and verify the log; checkpoints; traces."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from service.api.deps import Auditor, ReadUnit, RuntimeDep, Unit, text_query
from service.api.errors import problems
from service.audit import review, traces
from service.audit.schemas import (
    MAX_PAGE,
    CheckpointList,
    EventFilter,
    EventPage,
    TraceView,
    VerificationReport,
)
from service.errors import invalid_argument
from service.sql import utcnow
from service.tracing import TRACE_ID_PATTERN
from service.validation import MAX_LOCATION

router = APIRouter(tags=["audit"])

TimeQuery = Annotated[datetime | None, Query(description="RFC 3339 with a timezone")]


@dataclass
class FilterQuery:
    """The filters shared by the events query and the export, as query parameters."""

    type: Annotated[str | None, text_query(64, description="e.g. tool.called")] = None
    actor: Annotated[str | None, text_query(200, description="e.g. agent:bot")] = None
    draft_id: Annotated[str | None, text_query(64)] = None
    execution_id: Annotated[str | None, text_query(64)] = None
    trace_id: Annotated[str | None, text_query(32)] = None
    since: TimeQuery = None
    until: TimeQuery = None

    def build(self) -> EventFilter:
        """The filter, or INVALID_ARGUMENT (raised inside the unit, so it is audited)."""
        # An empty value filters nothing (a form sends its empty fields along).
        given = {name: value for name, value in asdict(self).items() if value != ""}
        try:
            return EventFilter(**given)
        except ValidationError as exc:
            problems = [
                f"{'.'.join(map(str, e['loc']))[:MAX_LOCATION]}: {e['msg']}" for e in exc.errors()
            ]
            raise invalid_argument("Invalid filters: " + "; ".join(problems)) from None


FiltersDep = Annotated[FilterQuery, Depends()]


@router.get(
    "/v1/audit/events",
    summary="Filtered, cursor-paginated audit events (auditors)",
    name="audit.query",
    responses=problems(400, 401, 403),
)
def list_events(
    session: ReadUnit,
    runtime: RuntimeDep,
    principal: Auditor,
    query: FiltersDep,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> EventPage:
    return review.list_events(
        session, principal, query.build(), cursors=runtime.cursors, cursor=cursor, limit=limit
    )


@router.get(
    "/v1/audit/export",
    summary="The log as NDJSON, streamed (auditors); same filters as /v1/audit/events",
    response_class=StreamingResponse,
    name="audit.export",
    responses={
        200: {"content": {"application/x-ndjson": {}}, "description": "One event per line."},
        **problems(400, 401, 403),
    },
)
def export(
    session: Unit, runtime: RuntimeDep, principal: Auditor, query: FiltersDep
) -> StreamingResponse:
    filters = review.authorize_export(session, principal, query.build())
    # The stream reads its own snapshot after this unit (and its audit event) committed;
    # the returned filters stop it at the head before that event.
    return StreamingResponse(
        review.export_lines(runtime.engine, principal.tenant, filters),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="audit-{principal.tenant}.ndjson"'},
    )


@router.get(
    "/v1/audit/verify",
    summary="Verify the tenant's chain and checkpoints (auditors)",
    name="audit.verify",
    responses=problems(401, 403),
)
def verify(session: ReadUnit, runtime: RuntimeDep, principal: Auditor) -> VerificationReport:
    report = review.verify(session, principal, runtime.settings, now=utcnow()).report()
    return VerificationReport.model_validate(report)


@router.get(
    "/v1/audit/checkpoints",
    summary="Signed checkpoints of the chain head (auditors)",
    name="audit.checkpoints",
    responses=problems(401, 403),
)
def checkpoints(session: ReadUnit, runtime: RuntimeDep, principal: Auditor) -> CheckpointList:
    return review.list_checkpoints(session, principal, runtime.settings)


@router.get(
    "/v1/traces/{trace_id}",
    summary="One agent interaction, end to end (auditors)",
    name="trace",
    responses=problems(400, 401, 403, 404),
)
def trace(
    trace_id: Annotated[str, Path(pattern=TRACE_ID_PATTERN)], session: ReadUnit, principal: Auditor
) -> TraceView:
    return traces.trace(session, principal, trace_id)
