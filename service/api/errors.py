"""Domain errors as RFC 9457 problem+json, with our ``code`` and ``retryable``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from service.errors import Category, DomainError, invalid_argument

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
            f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}"
            for item in error.errors()
        ]
        return problem_response(
            invalid_argument(
                "Invalid request: " + "; ".join(problems), details={"problems": problems}
            ),
            instance=request.url.path,
        )

    app.add_exception_handler(DomainError, on_domain_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
