"""Domain errors: what went wrong, in words a model or a person can act on.

Each front door maps these once: HTTP problem+json, an MCP tool error, or a
Celery retry-or-fail decision. No transport type appears here.

Every code is declared once, as an ``ErrorCode`` in its domain's ``errors.py``
(this module holds the ones every domain shares); ``docs/errors.md`` is
generated from those declarations (``service.catalogue``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Category(StrEnum):
    INVALID_ARGUMENT = "invalid_argument"
    UNAVAILABLE = "unavailable"  # not found and not allowed, deliberately merged
    PRECONDITION_FAILED = "precondition_failed"
    CONFLICT = "conflict"
    TRANSIENT = "transient"
    UNAUTHENTICATED = "unauthenticated"
    PERMISSION_DENIED = "permission_denied"


class DomainError(Exception):
    """A refusal with a stable ``code`` and advice on what to do next."""

    def __init__(
        self,
        code: str,
        category: Category,
        message: str,
        *,
        suggested_action: str,
        retryable: bool | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.category = category
        self.message = message
        self.suggested_action = suggested_action
        self.retryable = category is Category.TRANSIENT if retryable is None else retryable
        self.details = details or {}

    def audit_form(self) -> dict[str, Any]:
        """What the audit log and a failed execution keep of this error: its code, category and
        message. Not the advice (the catalogue holds it) and not the details (they may echo
        what was sent)."""
        return {"code": self.code, "category": self.category.value, "message": self.message}

    def to_dict(self) -> dict[str, Any]:
        """The structured error object of DESIGN.md §6 (the wire form): the audit form, and
        what the caller should do next."""
        body: dict[str, Any] = {
            **self.audit_form(),
            "retryable": self.retryable,
            "suggested_action": self.suggested_action,
        }
        if self.details:
            body["details"] = self.details
        return body


@dataclass(frozen=True)
class ErrorCode:
    """One entry of the error catalogue: a stable code, its category and default advice."""

    code: str
    category: Category
    meaning: str  # when it happens, for docs/errors.md
    suggested_action: str
    retryable: bool | None = None  # None: retryable exactly when the category is transient

    @property
    def is_retryable(self) -> bool:
        return self.category is Category.TRANSIENT if self.retryable is None else self.retryable

    def __call__(
        self,
        message: str,
        *,
        suggested_action: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> DomainError:
        """The error, with this call's message (and, where it helps, more specific advice)."""
        return DomainError(
            self.code,
            self.category,
            message,
            suggested_action=suggested_action or self.suggested_action,
            retryable=self.is_retryable,
            details=details,
        )


INVALID_ARGUMENT = ErrorCode(
    "INVALID_ARGUMENT",
    Category.INVALID_ARGUMENT,
    "The arguments or request body do not match the published schema (wrong type, unknown "
    "field, pattern, bounds, size or nesting depth). The message names every problem.",
    "Fix the arguments as described and call again; do not repeat the same arguments.",
)
UNAUTHENTICATED = ErrorCode(
    "UNAUTHENTICATED",
    Category.UNAUTHENTICATED,
    "No bearer token, an unknown or revoked one, or a token of a role this door does not serve; "
    "or an OAuth access token that failed a check, named in `details.check` (see "
    "docs/authorization.md).",
    "Present a valid bearer token; this is a configuration problem, not something a retry fixes.",
)
PERMISSION_DENIED = ErrorCode(
    "PERMISSION_DENIED",
    Category.PERMISSION_DENIED,
    "The caller's role does not allow this operation.",
    "Use a credential whose role allows this operation.",
)
INTERNAL_ERROR = ErrorCode(
    "INTERNAL_ERROR",
    Category.TRANSIENT,
    "The server failed unexpectedly; nothing was changed by the failed call.",
    "Retry once; if it fails again, tell the user the system has a problem.",
)


def invalid_argument(message: str, *, details: dict[str, Any] | None = None) -> DomainError:
    return INVALID_ARGUMENT(message, details=details)


def unauthenticated(message: str) -> DomainError:
    return UNAUTHENTICATED(message)


def permission_denied(message: str) -> DomainError:
    return PERMISSION_DENIED(message)


def internal_error() -> DomainError:
    return INTERNAL_ERROR("The server failed to handle this call. Nothing was changed.")


REQUEST_TOO_LARGE = ErrorCode(
    "REQUEST_TOO_LARGE",
    Category.INVALID_ARGUMENT,
    "The HTTP request body is larger than the server reads (DRAFTGATE_MAX_REQUEST_BYTES); "
    "it was refused before parsing (HTTP 413).",
    "Send a smaller request; arguments have their own, smaller bounds.",
)


def request_too_large(size: int | None, limit: int) -> DomainError:
    said = f"{size} bytes" if size is not None else "more than that"
    return REQUEST_TOO_LARGE(
        f"The request body is too large ({said}; at most {limit} bytes).",
        details={"max_bytes": limit},
    )


RATE_LIMITED = ErrorCode(
    "RATE_LIMITED",
    Category.TRANSIENT,
    "Too many requests from this client address or with this token in the current window "
    "(HTTP 429, with Retry-After).",
    "Wait the number of seconds in details.retry_after_seconds, then retry.",
)


def rate_limited(scope: str, retry_after: int) -> DomainError:
    return RATE_LIMITED(
        f"Too many requests {scope}; retry in {retry_after} s.",
        details={"retry_after_seconds": retry_after},
    )


ROUTE_NOT_FOUND = ErrorCode(
    "ROUTE_NOT_FOUND",
    Category.UNAVAILABLE,
    "The HTTP API serves nothing at this path (HTTP 404).",
    "Check the path against the OpenAPI document at /openapi.json.",
)
METHOD_NOT_ALLOWED = ErrorCode(
    "METHOD_NOT_ALLOWED",
    Category.INVALID_ARGUMENT,
    "The path exists but not with this HTTP method (HTTP 405, with Allow).",
    "Use one of the methods in the Allow header.",
)


DATABASE_UNAVAILABLE = ErrorCode(
    "DATABASE_UNAVAILABLE",
    Category.TRANSIENT,
    "The database could not be reached or dropped the connection (a restart, a failover); "
    "the call's transaction did not commit, so nothing was changed (HTTP 503).",
    "Retry after a short delay with the same arguments (and the same idempotency key).",
)
