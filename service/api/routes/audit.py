"""Auditor routes: query, export and verify the log; checkpoints; traces."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from service.api.deps import Auditor, RuntimeDep, TraceIdDep, refusal_recorder
from service.audit import review, traces
from service.audit.schemas import MAX_PAGE, CheckpointList, EventFilter, EventPage, TraceView
from service.db import run_read, run_unit
from service.errors import invalid_argument
from service.tracing import TRACE_ID_PATTERN
from service.validation import MAX_LOCATION

router = APIRouter(tags=["audit"])

TimeQuery = Annotated[datetime | None, Query(description="RFC 3339 with a timezone")]


@dataclass
class FilterQuery:
    """The filters shared by the events query and the export, as query parameters."""

    type: Annotated[str | None, Query(max_length=64, description="e.g. tool.called")] = None
    actor: Annotated[str | None, Query(max_length=200, description="e.g. agent:bot")] = None
    draft_id: Annotated[str | None, Query(max_length=64)] = None
    execution_id: Annotated[str | None, Query(max_length=64)] = None
    trace_id: Annotated[str | None, Query(max_length=32)] = None
    since: TimeQuery = None
    until: TimeQuery = None

    def build(self) -> EventFilter:
        """The filter, or INVALID_ARGUMENT (raised inside the unit, so it is audited)."""
        try:
            return EventFilter(**asdict(self))
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
)
def list_events(
    runtime: RuntimeDep,
    principal: Auditor,
    trace_id_header: TraceIdDep,
    query: FiltersDep,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
) -> EventPage:
    def work(session: Any) -> EventPage:
        return review.list_events(session, principal, query.build(), cursor=cursor, limit=limit)

    return run_read(
        runtime.engine,
        work,
        on_refusal=refusal_recorder(principal, "audit.query", trace_id=trace_id_header),
    )


@router.get(
    "/v1/audit/export",
    summary="The log as NDJSON, streamed (auditors); same filters as /v1/audit/events",
    response_class=StreamingResponse,
    name="audit.export",
)
def export(
    runtime: RuntimeDep, principal: Auditor, trace_id_header: TraceIdDep, query: FiltersDep
) -> StreamingResponse:
    def authorize(session: Any) -> EventFilter:
        filters = query.build()
        review.authorize_export(session, principal, filters)
        return filters

    filters = run_unit(
        runtime.engine,
        authorize,
        on_refusal=refusal_recorder(principal, "audit.export", trace_id=trace_id_header),
    )
    return StreamingResponse(
        review.export_lines(runtime.engine, principal.tenant, filters),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="audit-{principal.tenant}.ndjson"'},
    )


@router.get(
    "/v1/audit/verify",
    summary="Verify the tenant's chain and checkpoints (auditors)",
    name="audit.verify",
)
def verify(runtime: RuntimeDep, principal: Auditor, trace_id_header: TraceIdDep) -> dict[str, Any]:
    return run_read(
        runtime.engine,
        lambda session: review.verify(session, principal, runtime.settings).report(),
        on_refusal=refusal_recorder(principal, "audit.verify", trace_id=trace_id_header),
    )


@router.get(
    "/v1/audit/checkpoints",
    summary="Signed checkpoints of the chain head (auditors)",
    name="audit.checkpoints",
)
def checkpoints(
    runtime: RuntimeDep, principal: Auditor, trace_id_header: TraceIdDep
) -> CheckpointList:
    return run_read(
        runtime.engine,
        lambda session: review.list_checkpoints(session, principal, runtime.settings),
        on_refusal=refusal_recorder(principal, "audit.checkpoints", trace_id=trace_id_header),
    )


@router.get(
    "/v1/traces/{trace_id}", summary="One agent interaction, end to end (auditors)", name="trace"
)
def trace(
    trace_id: Annotated[str, Path(pattern=TRACE_ID_PATTERN)],
    runtime: RuntimeDep,
    principal: Auditor,
    trace_id_header: TraceIdDep,
) -> TraceView:
    return run_read(
        runtime.engine,
        lambda session: traces.trace(session, principal, trace_id),
        on_refusal=refusal_recorder(principal, "trace", trace_id=trace_id_header),
    )
