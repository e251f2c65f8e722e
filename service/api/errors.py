"""Domain errors as RFC 9457 problem+json, with our ``code`` and ``retryable``."""

from __future__ import annotations

from functools import partial
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Message, Scope, Send

from service.api.deps import authenticate, record_request_refusal
from service.db import unavailable
from service.errors import (
    INTERNAL_ERROR,
    METHOD_NOT_ALLOWED,
    RATE_LIMITED,
    REQUEST_TOO_LARGE,
    ROUTE_NOT_FOUND,
    Category,
    DomainError,
    internal_error,
    invalid_argument,
)
from service.guards import client_address
from service.tokens.authentication import refuse_credential
from service.tracing import trace_id_from
from service.validation import MAX_LOCATION

PROBLEM_JSON = "application/problem+json"

STATUS_BY_CATEGORY = {
    Category.INVALID_ARGUMENT: 400,
    Category.UNAUTHENTICATED: 401,
    Category.PERMISSION_DENIED: 403,
    Category.UNAVAILABLE: 404,
    Category.CONFLICT: 409,
    Category.PRECONDITION_FAILED: 409,
    Category.TRANSIENT: 503,
}


class Problem(BaseModel):
    """An RFC 9457 problem, extended with draftgate's structured error (DESIGN.md §6)."""

    type: str = Field(description="A URI naming the kind of problem.")
    title: str
    status: int
    detail: str
    instance: str | None = Field(default=None, description="The request path.")
    code: str = Field(description="Stable error code; see docs/errors.md.")
    category: Category
    message: str
    retryable: bool
    suggested_action: str
    details: dict[str, Any] | None = None


DESCRIPTIONS = {
    400: "Invalid request (INVALID_ARGUMENT and friends).",
    401: "No, an unknown or a revoked bearer token.",
    403: "The token's role does not allow this, or a signature rule refused it.",
    404: "Not found or not yours (deliberately the same answer).",
    409: "The request conflicts with the current state.",
    413: "The request body is larger than the server accepts.",
    429: "Too many requests; retry after the given delay.",
    503: "A dependency is unavailable; retry later.",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the problem+json answers a route can give."""
    return {
        status: {
            "model": Problem,
            "description": DESCRIPTIONS[status],
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


# Codes whose HTTP status is more specific than their category's.
STATUS_BY_CODE = {
    INTERNAL_ERROR.code: 500,
    REQUEST_TOO_LARGE.code: 413,
    RATE_LIMITED.code: 429,
    METHOD_NOT_ALLOWED.code: 405,
}


def problem_response(error: DomainError, *, instance: str | None = None) -> JSONResponse:
    status = STATUS_BY_CODE.get(error.code) or STATUS_BY_CATEGORY[error.category]
    body: dict[str, Any] = {
        "type": f"https://draftgate.dev/problems/{error.code.lower().replace('_', '-')}",
        "title": error.code.replace("_", " ").capitalize(),
        "status": status,
        "detail": error.message,
        **error.to_dict(),
    }
    if instance:
        body["instance"] = instance
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
    if "retry_after_seconds" in error.details:
        headers["Retry-After"] = str(error.details["retry_after_seconds"])
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    async def on_domain_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, DomainError)
        return problem_response(error, instance=request.url.path)

    async def on_validation_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        problems = [
            f"{'.'.join(str(part) for part in item['loc'])[:MAX_LOCATION]}: {item['msg']}"
            for item in error.errors()
        ]
        refusal = invalid_argument(
            "Invalid request: " + "; ".join(problems), details={"problems": problems}
        )
        outcome = await run_in_threadpool(_audit_invalid_request, request, refusal)
        return problem_response(outcome, instance=request.url.path)

    async def on_unrouted(request: Request, error: Exception) -> Response:
        """Starlette's own 404/405 (no route, or not with this method), in the same shape."""
        assert isinstance(error, StarletteHTTPException)
        if error.status_code == 405:
            response = problem_response(
                METHOD_NOT_ALLOWED(f"{request.method} is not served at this path."),
                instance=request.url.path,
            )
            response.headers.update(error.headers or {})  # Allow: the methods that are
            return response
        if error.status_code == 404:
            return problem_response(
                ROUTE_NOT_FOUND("Nothing is served at this path."), instance=request.url.path
            )
        return await http_exception_handler(request, error)  # none is raised today

    async def on_crash(request: Request, error: Exception) -> JSONResponse:
        """The last resort (Starlette still logs the exception): a database that went away is
        a retryable 503; anything else a 500, both problem+json and never the exception."""
        refusal = unavailable(error) or internal_error()
        return problem_response(refusal, instance=request.url.path)

    app.add_exception_handler(DomainError, on_domain_error)
    app.add_exception_handler(DBAPIError, on_crash)  # answered here, not re-raised
    app.add_exception_handler(Exception, on_crash)  # the server's last resort (re-raised)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_unrouted)


async def refuse_request(scope: Scope, send: Send, error: DomainError) -> None:
    """Answer a request the guards refused before routing (a flood from one address, a body
    over the limit), audited like every refusal (a bad token is still a 401)."""
    request = Request(scope)
    if error.code == RATE_LIMITED.code:  # a flood: counted, not one event per request
        runtime = request.app.state.runtime
        await run_in_threadpool(
            partial(
                refuse_credential,
                runtime,
                error,
                door="http",
                source=client_address(scope),
                trace_id=trace_id_from(request.headers.get("traceparent")),
            )
        )
        outcome = error
    else:
        outcome = await run_in_threadpool(_audit_invalid_request, request, error)
    response = problem_response(outcome, instance=request.url.path)
    await response(scope, _nothing_to_receive, send)


async def _nothing_to_receive() -> Message:
    return {"type": "http.disconnect"}


def _audit_invalid_request(request: Request, refusal: DomainError) -> DomainError:
    """Audit a request refused by FastAPI's own validation.

    A body that is not JSON is refused before any dependency runs, so authentication
    happens here too: a bad token still answers 401, and every refusal is an event.
    """
    runtime = request.app.state.runtime
    trace_id = trace_id_from(request.headers.get("traceparent"))
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    presented = credentials.strip() if scheme.lower() == "bearer" else None
    try:
        principal = authenticate(runtime, presented, trace_id, source=client_address(request.scope))
    except DomainError as unauthenticated:
        return unauthenticated
    record_request_refusal(request, runtime, principal, refusal, trace_id)
    return refusal
