"""The auditor's pages: the audit log with filters and pages, the chain's state, the export,
and one draft's timeline (issue 20.6). Auditors only; their tenant only."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, StreamingResponse

from service.api.console.deps import FormWriter, PageCaller, PageReadUnit, Unit
from service.api.console.pages import PageRoute, render
from service.api.deps import RuntimeDep
from service.api.routes.audit import FiltersDep
from service.audit import review
from service.db import read_scope
from service.drafts.errors import draft_unavailable
from service.drafts.schemas import DRAFT_ID_PATTERN
from service.principal import Role
from service.sessions import auditing, oversight
from service.sql import utcnow

router = APIRouter(prefix="/console", include_in_schema=False, route_class=PageRoute)


@router.get("/audit", name="console.audit")
def audit_log(
    request: Request,
    session: PageReadUnit,
    runtime: RuntimeDep,
    caller: PageCaller,
    query: FiltersDep,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> HTMLResponse:
    caller.principal.require(Role.AUDITOR)
    filters = query.build()
    page = auditing.log_page(
        session, caller.principal, filters, cursors=runtime.cursors, cursor=cursor
    )
    with read_scope(runtime.engine) as snapshot:  # the whole chain in one snapshot
        chain = auditing.chain_state(snapshot, caller.principal, runtime.settings, now=utcnow())
    return render(
        request,
        "audit.html",
        caller,
        page=page,
        chain=chain,
        filters=filters.active(),
        query=request.url.query,
    )


@router.post("/audit/export", name="console.audit_export")
def audit_export(
    session: Unit, runtime: RuntimeDep, caller: FormWriter, query: FiltersDep
) -> StreamingResponse:
    """The filtered log as NDJSON, exactly as ``GET /v1/audit/export`` gives it (and
    audited as an export the same way); a form post, so it carries the CSRF token."""
    principal = caller.principal
    filters = review.authorize_export(session, principal, query.build())
    return StreamingResponse(
        review.export_lines(runtime.engine, principal.tenant, filters),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="audit-{principal.tenant}.ndjson"'},
    )


@router.get("/audit/drafts/{draft_id}", name="console.audit_draft")
def draft_timeline(
    request: Request, draft_id: str, session: PageReadUnit, caller: PageCaller
) -> HTMLResponse:
    if not re.fullmatch(DRAFT_ID_PATTERN.strip("^$"), draft_id):
        raise draft_unavailable()  # the same answer as a draft that is not there
    timeline = auditing.draft_timeline(session, caller.principal, draft_id)
    return render(request, "audit_draft.html", caller, timeline=timeline)


@router.get("/oversight", name="console.oversight")
def oversight_page(request: Request, session: PageReadUnit, caller: PageCaller) -> HTMLResponse:
    view = oversight.summary(session, caller.principal, now=utcnow())
    return render(request, "oversight.html", caller, view=view)
