"""Request dependencies: the runtime, the caller, and one unit of work per request.

A route declares what it needs, e.g. ``session: Unit, principal: Approver``. The
unit of work commits when the route returns and, when the core refuses, rolls
everything back and audits the refusal as ``<route name>.refused`` in a
transaction of its own: routes hold no transaction code and no refusal code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from sqlalchemy import Engine
from sqlmodel import Session

from service.audit.refusals import Refusal, record_refusal_apart, request_context
from service.db import read_scope, session_scope
from service.errors import DomainError
from service.executions.outbox import Publisher
from service.guards import client_address
from service.principal import Principal, Role
from service.runtime import Runtime
from service.tokens.authentication import authenticate_presented
from service.tracing import trace_id_from
from service.validation import input_schema, load_json, parse

M = TypeVar("M", bound=BaseModel)

DOOR = "http"
_bearer = HTTPBearer(auto_error=False)


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]

# A query parameter of text: bounded, and without control characters (a NUL would reach the
# database as is, and PostgreSQL refuses it: a 5xx instead of a clear 400).
NO_CONTROL = r"^[^\x00-\x1f\x7f]*$"


def text_query(max_length: int, **kwargs: Any) -> Any:
    return Query(max_length=max_length, pattern=NO_CONTROL, **kwargs)


def get_trace_id(request: Request) -> str:
    return trace_id_from(request.headers.get("traceparent"))


TraceIdDep = Annotated[str, Depends(get_trace_id)]


def get_publisher(request: Request) -> Publisher:
    publisher: Publisher = request.app.state.publisher
    return publisher


PublisherDep = Annotated[Publisher, Depends(get_publisher)]


async def read_json_body(request: Request, runtime: RuntimeDep) -> Any:
    """The request body as JSON, bounded in size and depth before anything trusts it.

    Declare it after the unit of work and the role check: a refusal here is audited
    under the route's name, and only a caller with the role learns anything about input.
    """
    settings = runtime.settings
    return load_json(
        await request.body(),
        max_bytes=settings.max_request_bytes,
        max_depth=settings.max_argument_depth,
    )


JsonBody = Annotated[Any, Depends(read_json_body)]


def request_body(model: type[BaseModel] | dict[str, Any]) -> dict[str, Any]:
    """``openapi_extra`` of a route that parses its JSON body itself (``parse``, so a refusal
    is INVALID_ARGUMENT): the body's schema, from a model or as given."""
    schema = model if isinstance(model, dict) else input_schema(model)
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def body_object(body: Any) -> dict[str, Any]:
    """A JSON body as an object for the core to parse: one that is not an object is handed
    on under ``body``, so the core refuses it INVALID_ARGUMENT like any other problem."""
    return body if isinstance(body, dict) else {"body": body}


def parse_body(model: type[M], body: Any) -> M:
    """The JSON body as ``model``, or INVALID_ARGUMENT naming what is wrong (a body that is
    not an object is one)."""
    return parse(model, body_object(body))


def get_principal(
    request: Request,
    runtime: RuntimeDep,
    trace_id: TraceIdDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller, from the bearer token only; a refusal is audited in its own transaction."""
    presented = credentials.credentials if credentials else None
    return authenticate(runtime, presented, trace_id, source=client_address(request.scope))


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]


def authenticate(
    runtime: Runtime, presented: str | None, trace_id: str, *, source: str
) -> Principal:
    """The caller of the API: a draftgate token, or an OAuth access token issued for the API
    (its audience is ``api_public_url``)."""
    return authenticate_presented(
        runtime,
        presented,
        door=DOOR,
        source=source,
        trace_id=trace_id,
        audience=runtime.settings.api_public_url,
    )


def record_request_refusal(
    request: Request, runtime: Runtime, principal: Principal, error: DomainError, trace_id: str
) -> None:
    """Audit a refused request in its own transaction, as ``<route name>.refused``.

    The HTTP door's use of the one recorder (service.audit.refusals): role checks, the unit
    of work and request validation all end here, and a request is recorded once however many
    of them see its refusal. Routes are named after what they do ("approval", "audit.query",
    …); a request refused before routing is a ``request``.
    """
    if getattr(request.state, "refusal_recorded", False):
        return
    request.state.refusal_recorded = True
    operation = getattr(request.scope.get("route"), "name", None) or "request"
    refusal = Refusal.by(
        principal,
        operation,
        error,
        draft_id=request.path_params.get("draft_id"),
        execution_id=request.path_params.get("execution_id"),
        trace_id=trace_id,
        context=request_context(request.method, request.url.path),
    )
    record_refusal_apart(runtime.engine, refusal)


def principal_with(*roles: Role) -> Callable[..., Principal]:
    """A dependency: the caller, who must hold one of ``roles``.

    Dependencies run before query parameters are validated, so a caller without
    the role is refused (403, audited) before anything about their input is said.
    """

    def dependency(
        request: Request, runtime: RuntimeDep, trace_id: TraceIdDep, principal: CurrentPrincipal
    ) -> Principal:
        try:
            principal.require(*roles)
        except DomainError as error:
            record_request_refusal(request, runtime, principal, error, trace_id)
            raise
        return principal

    return dependency


Auditor = Annotated[Principal, Depends(principal_with(Role.AUDITOR))]
Approver = Annotated[Principal, Depends(principal_with(Role.APPROVER))]
Reviewer = Annotated[Principal, Depends(principal_with(Role.APPROVER, Role.AUDITOR))]


def _unit(
    scope: Callable[[Engine], AbstractContextManager[Session]],
) -> Callable[..., Iterator[Session]]:
    def unit_of_work(
        request: Request, runtime: RuntimeDep, trace_id: TraceIdDep, principal: CurrentPrincipal
    ) -> Iterator[Session]:
        try:
            with scope(runtime.engine) as session:
                yield session
        except DomainError as error:
            record_request_refusal(request, runtime, principal, error, trace_id)
            raise

    return unit_of_work


# The request's transaction, committed (audit events appended) when the route returns.
# Function scope: it ends before the response is sent, so nothing is reported done that
# did not commit.
Unit = Annotated[Session, Depends(_unit(session_scope), scope="function")]
# A read-only snapshot for long reads (exports, verification): no write lock taken.
ReadUnit = Annotated[Session, Depends(_unit(read_scope), scope="function")]
