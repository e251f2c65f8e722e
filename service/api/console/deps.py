"""The console's request dependencies: the signed-in caller, CSRF, one unit of work.

A console route declares ``caller: Caller`` (JSON: an unauthenticated request is a 401
problem) or ``caller: PageCaller`` (a page: it redirects to the sign-in form), and
``Writer`` (JSON) or ``FormWriter`` (a form) on every state-changing route (the session's
CSRF token, on top of the origin check of service.api.console.guard). The unit of work is
the API's, keyed to the session's principal: it commits when the route returns and audits a
refusal as ``<route>.refused``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine
from sqlmodel import Session

from service.api.deps import RuntimeDep, TraceIdDep, record_request_refusal
from service.db import lookup_scope, read_scope, session_scope
from service.errors import Category, DomainError
from service.guards import client_address
from service.principal import Principal
from service.runtime import Runtime
from service.sessions import actions as sessions
from service.sessions import errors
from service.sql import utcnow
from service.tokens.authentication import refuse_credential

COOKIE = "dg_session"
SIGN_IN_COOKIE = "dg_sign_in"  # the sign-in form's own CSRF token (no session exists yet)
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf_token"
REFRESH_HEADER = "x-console-refresh"  # set by inbox.js on a live refresh
DOOR = "console"


@dataclass(frozen=True)
class ConsoleCaller:
    principal: Principal
    session_id: str
    csrf_token: str
    secret: str

    @classmethod
    def of(cls, principal: Principal, session_id: str, secret: str) -> ConsoleCaller:
        """The caller of a live session, with the CSRF token its secret derives."""
        return cls(principal, session_id, sessions.csrf_token_for(secret), secret)


class SignInRequired(Exception):
    """A page was asked for without a live session: answered with a redirect to sign in."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


def get_caller(request: Request, runtime: RuntimeDep, trace_id: TraceIdDep) -> ConsoleCaller:
    """The person behind the session cookie, re-checked against their credential now.

    A request without a cookie is simply not signed in; one whose cookie names no live
    session is refused and audited (auth.refused at door "console", throttled)."""
    secret = request.cookies.get(COOKIE)
    now = utcnow()
    verdict = session_verdict(runtime, secret, now=now)
    touch_due = verdict.touch_due and not _unattended(request)
    if verdict.session_id is not None and (verdict.ending is not None or touch_due):
        with session_scope(runtime.engine) as session:
            if verdict.ending is not None:
                sessions.end(
                    session, verdict.session_id, reason=verdict.ending, now=now, trace_id=trace_id
                )
            else:
                sessions.touch(session, verdict.session_id, now=now)
    if verdict.principal is None or secret is None or verdict.session_id is None:
        error = errors.session_required(verdict.why)
        if secret:
            refuse_credential(
                runtime,
                error,
                door=DOOR,
                source=client_address(request.scope),
                trace_id=trace_id,
            )
        raise error
    runtime.limiter.check_token(verdict.principal.token_id)
    return ConsoleCaller.of(verdict.principal, verdict.session_id, secret)


def session_verdict(runtime: Runtime, secret: str | None, *, now: datetime) -> sessions.Verdict:
    """What the session cookie's ``secret`` stands for now (a lookup: it writes nothing)."""
    with lookup_scope(runtime.engine) as session:
        return sessions.check(
            session, secret, now=now, idle_seconds=runtime.settings.console_idle_timeout_seconds
        )


def _unattended(request: Request) -> bool:
    """A request the page makes by itself (a stream, a live refresh of the inbox): not the
    person's activity, so it does not extend the idle timeout (a client can only decline
    to extend its own session this way, never extend it)."""
    return request.headers.get(REFRESH_HEADER) == "1" or request.url.path.endswith("/events")


def signed_in(request: Request) -> ConsoleCaller | None:
    """Who is signed in, for an error page's navigation only: a lookup that writes, refuses
    and audits nothing (the refusal the page shows was audited already), and None when
    nobody is or it cannot be told (the database may be why this page is an error)."""
    secret = request.cookies.get(COOKIE)
    if not secret:
        return None
    try:
        verdict = session_verdict(request.app.state.runtime, secret, now=utcnow())
    except Exception:
        return None
    if verdict.principal is None or verdict.session_id is None or verdict.ending is not None:
        return None
    return ConsoleCaller.of(verdict.principal, verdict.session_id, secret)


Caller = Annotated[ConsoleCaller, Depends(get_caller)]


def get_page_caller(request: Request, runtime: RuntimeDep, trace_id: TraceIdDep) -> ConsoleCaller:
    try:
        return get_caller(request, runtime, trace_id)
    except DomainError as error:
        if error.category is Category.UNAUTHENTICATED:
            path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            raise SignInRequired(path) from None
        raise


PageCaller = Annotated[ConsoleCaller, Depends(get_page_caller)]


def _require_csrf(
    request: Request,
    runtime: Runtime,
    trace_id: str,
    caller: ConsoleCaller,
    presented: str | None,
) -> ConsoleCaller:
    if not sessions.csrf_matches(caller.secret, presented):
        error = errors.csrf_refused()
        record_request_refusal(request, runtime, caller.principal, error, trace_id)
        raise error
    return caller


def check_csrf(
    request: Request, runtime: RuntimeDep, trace_id: TraceIdDep, caller: Caller
) -> ConsoleCaller:
    """A JSON route's CSRF check: the header only. Its body is read once, by the route (a
    form body there is not JSON and is refused as such)."""
    presented = request.headers.get(CSRF_HEADER)
    return _require_csrf(request, runtime, trace_id, caller, presented)


async def check_form_csrf(
    request: Request, runtime: RuntimeDep, trace_id: TraceIdDep, caller: Caller
) -> ConsoleCaller:
    """A form route's CSRF check: the header, or the urlencoded form's field (the route
    reads nothing else from the body; Starlette keeps the parsed form for it)."""
    presented = request.headers.get(CSRF_HEADER)
    if not presented and request.headers.get("content-type", "").startswith(
        "application/x-www-form-urlencoded"
    ):
        value = (await request.form()).get(CSRF_FIELD)
        presented = value if isinstance(value, str) else None
    return _require_csrf(request, runtime, trace_id, caller, presented)


# On every state-changing JSON route / form route.
Writer = Annotated[ConsoleCaller, Depends(check_csrf)]
FormWriter = Annotated[ConsoleCaller, Depends(check_form_csrf)]


def _unit(
    scope: Callable[[Engine], AbstractContextManager[Session]],
) -> Callable[..., Iterator[Session]]:
    def unit_of_work(
        request: Request, runtime: RuntimeDep, trace_id: TraceIdDep, caller: Caller
    ) -> Iterator[Session]:
        with (
            _refusals_recorded(request, runtime, trace_id, caller),
            scope(runtime.engine) as session,
        ):
            yield session

    return unit_of_work


def _page_unit(
    scope: Callable[[Engine], AbstractContextManager[Session]],
) -> Callable[..., Iterator[Session]]:
    def unit_of_work(
        request: Request, runtime: RuntimeDep, trace_id: TraceIdDep, caller: PageCaller
    ) -> Iterator[Session]:
        with (
            _refusals_recorded(request, runtime, trace_id, caller),
            scope(runtime.engine) as session,
        ):
            yield session

    return unit_of_work


@contextmanager
def _refusals_recorded(
    request: Request, runtime: Runtime, trace_id: str, caller: ConsoleCaller
) -> Iterator[None]:
    try:
        yield
    except DomainError as error:
        record_request_refusal(request, runtime, caller.principal, error, trace_id)
        raise


# The request's transaction, committed (audit events appended) when the route returns.
Unit = Annotated[Session, Depends(_unit(session_scope), scope="function")]
ReadUnit = Annotated[Session, Depends(_unit(read_scope), scope="function")]
# A page's read: without a session it redirects to sign in instead of answering 401.
PageReadUnit = Annotated[Session, Depends(_page_unit(read_scope), scope="function")]
