"""Domain errors: what went wrong, in words a model or a person can act on.

Each front door maps these once: HTTP problem+json, an MCP tool error, or a
Celery retry-or-fail decision. No transport type appears here.
"""

from __future__ import annotations

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

    def to_dict(self) -> dict[str, Any]:
        """The structured error object of DESIGN.md §6."""
        body: dict[str, Any] = {
            "code": self.code,
            "category": self.category.value,
            "message": self.message,
            "retryable": self.retryable,
            "suggested_action": self.suggested_action,
        }
        if self.details:
            body["details"] = self.details
        return body


def invalid_argument(
    message: str, *, details: dict[str, Any] | None = None, code: str = "INVALID_ARGUMENT"
) -> DomainError:
    return DomainError(
        code,
        Category.INVALID_ARGUMENT,
        message,
        suggested_action="Fix the arguments as described and call again; "
        "do not repeat the same arguments.",
        details=details,
    )


def unauthenticated(message: str) -> DomainError:
    return DomainError(
        "UNAUTHENTICATED",
        Category.UNAUTHENTICATED,
        message,
        suggested_action="Present a valid bearer token; this is a configuration problem, "
        "not something a retry fixes.",
    )


def permission_denied(message: str) -> DomainError:
    return DomainError(
        "PERMISSION_DENIED",
        Category.PERMISSION_DENIED,
        message,
        suggested_action="Use a credential whose role allows this operation.",
    )
