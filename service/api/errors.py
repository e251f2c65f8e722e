"""Domain errors as RFC 9457 problem+json, with our ``code`` and ``retryable``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from service.errors import Category, DomainError, invalid_argument
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


def problem_response(error: DomainError, *, instance: str | None = None) -> JSONResponse:
    status = STATUS_BY_CATEGORY[error.category]
    body: dict[str, Any] = {
        "type": f"https://draftgate.dev/problems/{error.code.lower().replace('_', '-')}",
        "title": error.code.replace("_", " ").capitalize(),
        "status": status,
        "detail": error.message,
        **error.to_dict(),
    }
    if instance:
        body["instance"] = instance
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
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
        # A body that is not JSON is refused before any dependency runs, so authentication
        # and the audit record happen here too: a bad token still answers 401, and every
        # refusal is an event.
        outcome = await run_in_threadpool(_audit_invalid_request, request, refusal)
        return problem_response(outcome, instance=request.url.path)

    app.add_exception_handler(DomainError, on_domain_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)


def _audit_invalid_request(request: Request, refusal: DomainError) -> DomainError:
    from service.api.deps import authenticate, record_request_refusal

    runtime = request.app.state.runtime
    trace_id = trace_id_from(request.headers.get("traceparent"))
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    presented = credentials.strip() if scheme.lower() == "bearer" else None
    try:
        principal = authenticate(runtime, presented, trace_id)
    except DomainError as unauthenticated:
        return unauthenticated
    record_request_refusal(request, runtime, principal, refusal, trace_id)
    return refusal
