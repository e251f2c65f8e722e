"""The console's pages: sign in and out, the inbox, one draft's card, the keys page shell."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import date
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from service.api.console.deps import (
    COOKIE,
    SIGN_IN_COOKIE,
    ConsoleCaller,
    FormWriter,
    PageCaller,
    PageReadUnit,
    SignInRequired,
    get_caller,
    signed_in,
)
from service.api.console.guard import is_loopback_http
from service.api.console.templating import build_templates
from service.api.deps import RuntimeDep, TraceIdDep, text_query
from service.api.errors import STATUS_BY_CATEGORY, STATUS_BY_CODE, problem_response
from service.db import session_scope
from service.drafts.errors import draft_unavailable
from service.drafts.schemas import DRAFT_ID_PATTERN
from service.errors import DomainError, invalid_argument
from service.guards import client_address
from service.principal import Role
from service.runtime import Runtime
from service.sessions import actions as sessions
from service.sessions import card as cards
from service.sessions import errors
from service.sessions import inbox as inboxes
from service.sessions.models import EndReason, SignInMethod
from service.sql import utcnow
from service.tokens.authentication import authenticate_presented

templates = build_templates()
NEXT_PATTERN = re.compile(r"^/console/[A-Za-z0-9/_\-?=&.%]*$")
STATUS_LABELS = [
    ("proposed", "waiting for approval"),
    ("approved", "approved"),
    ("open", "both"),
    ("decided", "history: every decided draft"),
    ("succeeded", "history: executed"),
    ("failed", "history: failed"),
    ("rejected", "history: rejected"),
    ("expired", "history: expired"),
    ("withdrawn", "history: withdrawn"),
]
SORT_LABELS = [("age", "age"), ("amount", "amount"), ("risk", "risk"), ("expiry", "expiry")]


class PageRoute(APIRoute):
    """A page answers a refusal as an HTML page with the problem's status (the unit of work
    has already audited it), and a missing session with a redirect to the sign-in form."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except SignInRequired as missing:
                return RedirectResponse(
                    f"/console/sign-in?next={_quoted(missing.next_path)}", status_code=303
                )
            except DomainError as error:
                return problem_page(request, error)
            except RequestValidationError as invalid:
                return problem_page(request, invalid_request(invalid))

        return page_handler


router = APIRouter(prefix="/console", include_in_schema=False, route_class=PageRoute)


def invalid_request(error: RequestValidationError) -> DomainError:
    problems = [
        f"{'.'.join(str(part) for part in item['loc'])[:100]}: {item['msg']}"
        for item in error.errors()
    ]
    return invalid_argument("Invalid request: " + "; ".join(problems))


def problem_page(request: Request, error: DomainError) -> HTMLResponse:
    status = STATUS_BY_CODE.get(error.code) or STATUS_BY_CATEGORY[error.category]
    caller = signed_in(request)  # the page keeps its navigation and Sign out
    return templates.TemplateResponse(
        request,
        "error.html",
        {
            "caller": caller,
            "csrf_token": caller.csrf_token if caller else None,
            "status": status,
            "title": error.code.replace("_", " ").capitalize(),
            "code": error.code,
            "message": error.message,
            "suggested_action": error.suggested_action,
        },
        status_code=status,
    )


def render(
    request: Request, name: str, caller: ConsoleCaller | None, **context: Any
) -> HTMLResponse:
    return templates.TemplateResponse(
        request,
        name,
        {"caller": caller, "csrf_token": caller.csrf_token if caller else None, **context},
    )


def _quoted(path: str) -> str:
    return quote(path, safe="/")


def _safe_next(value: str | None) -> str:
    """Where to go after signing in: a console path, never another site (no open redirect)."""
    if value and NEXT_PATTERN.match(value) and "//" not in value and "\\" not in value:
        return value
    return "/console/"


@router.get("", name="console.root")
def root() -> RedirectResponse:
    return RedirectResponse("/console/", status_code=308)


# --- sign in and out ------------------------------------------------------------------------


@router.get("/sign-in", name="console.sign_in_form")
def sign_in_form(
    request: Request, runtime: RuntimeDep, trace_id: TraceIdDep, next: str | None = None
) -> Response:
    try:
        get_caller(request, runtime, trace_id)
        return RedirectResponse(_safe_next(next), status_code=303)  # already signed in
    except DomainError:
        pass
    return _sign_in_page(request, next_path=_safe_next(next))


def _sign_in_page(
    request: Request, *, next_path: str, problem: str | None = None, status: int = 200
) -> HTMLResponse:
    # Login CSRF: the form carries a random token that must come back with the same value in
    # a cookie only this origin can set (double submit), on top of the Origin check.
    token = secrets.token_urlsafe(24)
    response = templates.TemplateResponse(
        request,
        "sign_in.html",
        {
            "caller": None,
            "csrf_token": None,
            "sign_in_csrf": token,
            "next_path": next_path,
            "problem": problem,
        },
        status_code=status,
    )
    _set_cookie(request, response, SIGN_IN_COOKIE, token)
    return response


@router.post("/sign-in", name="console.sign_in")
async def sign_in(
    request: Request,
    runtime: RuntimeDep,
    trace_id: TraceIdDep,
    token: Annotated[str, Form(max_length=4096)] = "",
    csrf_token: Annotated[str, Form(max_length=200)] = "",
    next: Annotated[str, Form(max_length=2000)] = "/console/",
) -> Response:
    expected = request.cookies.get(SIGN_IN_COOKIE)
    if not expected or not secrets.compare_digest(expected.encode(), csrf_token.encode()):
        return problem_response(errors.csrf_refused(), instance=request.url.path)
    started = await run_in_threadpool(_start_session, runtime, request, token, trace_id)
    if isinstance(started, DomainError):
        return _sign_in_page(
            request, next_path=_safe_next(next), problem=started.message, status=401
        )
    response = RedirectResponse(_safe_next(next), status_code=303)
    _set_cookie(request, response, COOKIE, started.secret)
    response.delete_cookie(SIGN_IN_COOKIE, path="/console")
    return response


def _start_session(
    runtime: Runtime, request: Request, token: str, trace_id: str
) -> sessions.StartedSession | DomainError:
    try:
        # Draftgate tokens only for now (no audience: no OAuth access tokens); a refusal is
        # audited as auth.refused at door "console", throttled like the API's.
        principal = authenticate_presented(
            runtime,
            token.strip() or None,
            door="console",
            source=client_address(request.scope),
            trace_id=trace_id,
            allowed_roles=sessions.CONSOLE_ROLES,
        )
    except DomainError as error:
        return error
    with session_scope(runtime.engine) as session:
        return sessions.sign_in(
            session,
            principal,
            method=SignInMethod.TOKEN,
            now=utcnow(),
            lifetime_seconds=runtime.settings.console_session_lifetime_seconds,
            trace_id=trace_id,
            replacing=request.cookies.get(COOKIE),
        )


def _set_cookie(request: Request, response: Response, name: str, value: str) -> None:
    response.set_cookie(
        name,
        value,
        path="/console",
        httponly=True,
        samesite="strict",
        secure=not is_loopback_http(request.scope),
    )


@router.post("/sign-out", name="console.sign_out")
def sign_out(
    request: Request, runtime: RuntimeDep, trace_id: TraceIdDep, caller: FormWriter
) -> Response:
    with session_scope(runtime.engine) as session:
        sessions.end(
            session, caller.session_id, reason=EndReason.SIGNED_OUT, now=utcnow(), trace_id=trace_id
        )
    response = RedirectResponse("/console/sign-in", status_code=303)
    response.delete_cookie(COOKIE, path="/console")
    return response


# --- the inbox ----------------------------------------------------------------------------


Order = Annotated[str, Query(pattern="^(asc|desc)$")]
ActionFilter = Annotated[str | None, text_query(64)]
# A day, or empty (the form sends its empty date input along: no filter).
SinceFilter = Annotated[
    str | None,
    Query(pattern=r"^(\d{4}-\d{2}-\d{2})?$", description="Created on or after (UTC day)."),
]
ApproverFilter = Annotated[str | None, text_query(128)]


@dataclass(frozen=True)
class InboxQuery:
    """The inbox's filters, as the page and its rows both read them."""

    status: inboxes.InboxStatus = inboxes.InboxStatus.PROPOSED
    action: str | None = None
    sort: inboxes.Sort = inboxes.Sort.AGE
    order: str = "asc"
    since: date | None = None
    approver: str | None = None

    def arguments(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "action": self.action or None,
            "sort": self.sort,
            "descending": self.order == "desc",
            "since": self.since,
            "approver": self.approver or None,
        }


def inbox_query(
    status: inboxes.InboxStatus = inboxes.InboxStatus.PROPOSED,
    action: ActionFilter = None,
    sort: inboxes.Sort = inboxes.Sort.AGE,
    order: Order = "asc",
    since: SinceFilter = None,
    approver: ApproverFilter = None,
) -> InboxQuery:
    try:
        day = date.fromisoformat(since) if since else None
    except ValueError:
        raise invalid_argument(f"since: not a day of the calendar: {since}") from None
    return InboxQuery(status, action, sort, order, day, approver)


InboxQueryDep = Annotated[InboxQuery, Depends(inbox_query)]


@router.get("/", name="console.inbox")
def inbox(
    request: Request,
    session: PageReadUnit,
    runtime: RuntimeDep,
    caller: PageCaller,
    query: InboxQueryDep,
) -> HTMLResponse:
    if caller.principal.role is Role.ADMIN:
        admins = (
            "Admins decide no drafts: manage keys, passkeys and enrolments from Keys & passkeys."
        )
        return render(request, "inbox.html", caller, items=[], filters=None, note=admins)
    items = inboxes.inbox(
        session, caller.principal, runtime=runtime, now=utcnow(), **query.arguments()
    )
    filters = {
        "status": query.status.value,
        "action": query.action or "",
        "sort": query.sort.value,
        "order": query.order,
        "since": query.since.isoformat() if query.since else "",
        "approver": query.approver or "",
        "statuses": STATUS_LABELS,
        "sorts": SORT_LABELS,
        "actions": sorted(runtime.registry.writes),
    }
    note: str | None = (
        "You are an auditor: you see every open draft; only approvers decide."
        if caller.principal.role is Role.AUDITOR
        else None
    )
    return render(request, "inbox.html", caller, items=items, filters=filters, note=note)


@router.get("/inbox/rows", name="console.inbox_rows")
def inbox_rows(
    request: Request,
    session: PageReadUnit,
    runtime: RuntimeDep,
    caller: PageCaller,
    query: InboxQueryDep,
) -> HTMLResponse:
    """The inbox's rows alone (htmx swaps them in on a filter change or a live update)."""
    items = inboxes.inbox(
        session, caller.principal, runtime=runtime, now=utcnow(), **query.arguments()
    )
    return render(request, "_rows.html", caller, items=items)


# --- one draft ------------------------------------------------------------------------------


@router.get("/drafts/{draft_id}", name="console.card")
def card(
    request: Request,
    draft_id: str,
    session: PageReadUnit,
    runtime: RuntimeDep,
    caller: PageCaller,
) -> HTMLResponse:
    if not re.fullmatch(DRAFT_ID_PATTERN.strip("^$"), draft_id):
        raise draft_unavailable()  # the same answer as a draft that is not there
    view = cards.card(session, caller.principal, draft_id, runtime=runtime, now=utcnow())
    d = view.detail
    draft_data = {
        "draft_id": d.draft_id,
        "tenant": d.tenant,
        "revision": d.revision,
        "action": d.action,
        "contract_version": d.contract_version,
        "params": d.params,
        "params_sha256": d.params_sha256,
        "source_revision": d.source_revision,
        "approver": caller.principal.subject,
        "status": d.status.value,
        "policy": {"required": view.progress.required, "approved": view.progress.received},
        "execution_id": d.execution.execution_id if d.execution else None,
        "execution_status": d.execution.status.value if d.execution else None,
    }
    return render(request, "card.html", caller, card=view, draft_data=draft_data)


@router.get("/keys", name="console.keys")
def keys(request: Request, caller: PageCaller) -> HTMLResponse:
    principal = caller.principal
    data = {"tenant": principal.tenant, "subject": principal.subject, "role": principal.role.value}
    return render(request, "keys.html", caller, console_data=data)
