"""The standing grants page (issue 21.1): the tenant's grants with what each covered, a form
for an approver to write one, read it in words and sign it in the browser, and a revoke
button on their own. Signing and recording go through the console's JSON endpoints
(``service.api.console.api``), which call the /v1 grant routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from service.api.console.deps import FormWriter, PageCaller, PageReadUnit, Unit
from service.api.console.pages import PageRoute, render
from service.api.deps import RuntimeDep, TraceIdDep
from service.grants import actions as grants
from service.principal import Role
from service.sql import utcnow

router = APIRouter(prefix="/console", include_in_schema=False, route_class=PageRoute)

GrantId = Annotated[str, Path(pattern=r"^grt_[0-9a-f]{32}$")]


@router.get("/grants", name="console.grants")
def grants_page(
    request: Request, session: PageReadUnit, runtime: RuntimeDep, caller: PageCaller
) -> HTMLResponse:
    principal = caller.principal
    page = grants.list_grants(session, principal, now=utcnow())
    grantable = sorted(
        name
        for name, policy in runtime.policies.items()
        if policy.grants is not None and runtime.registry.write(name) is not None
    )
    data = {"tenant": principal.tenant, "subject": principal.subject, "role": principal.role.value}
    return render(
        request,
        "grants.html",
        caller,
        page=page,
        grantable=grantable if principal.role is Role.APPROVER else [],
        console_data=data,
    )


@router.post("/grants/{grant_id}/revoke", name="console.grant_revoke")
def revoke_grant(
    grant_id: GrantId, session: Unit, caller: FormWriter, trace_id: TraceIdDep
) -> RedirectResponse:
    grants.revoke(session, caller.principal, grant_id, now=utcnow(), trace_id=trace_id)
    return RedirectResponse("/console/grants", status_code=303)
