"""Every error of the console's sessions and requests."""

from __future__ import annotations

from service.errors import Category, DomainError, ErrorCode

SESSION_REQUIRED = ErrorCode(
    "SESSION_REQUIRED",
    Category.UNAUTHENTICATED,
    "A console request came without a live session: none, unknown, signed out, idle past "
    "the timeout, past its lifetime, or its token was revoked.",
    "Sign in to the console again (/console/sign-in) with your bearer token.",
)
CSRF_REFUSED = ErrorCode(
    "CSRF_REFUSED",
    Category.PERMISSION_DENIED,
    "A state-changing console request did not carry the session's CSRF token.",
    "Reload the page (it carries the token) and try again; never replay a request from "
    "another site.",
)
CROSS_ORIGIN_REFUSED = ErrorCode(
    "CROSS_ORIGIN_REFUSED",
    Category.PERMISSION_DENIED,
    "A console request came from another origin, or a state-changing one could not show "
    "it came from the console's own origin (Origin, Referer or Sec-Fetch-Site).",
    "Use the console from its own address; other sites cannot act in it.",
)
TOO_MANY_STREAMS = ErrorCode(
    "TOO_MANY_STREAMS",
    Category.CONFLICT,
    "The session already holds as many live-update streams as one session may.",
    "Close other console tabs, or wait: a closed tab's stream ends within seconds.",
    retryable=True,
)


def session_required(why: str) -> DomainError:
    return SESSION_REQUIRED(f"No live console session: {why}.", details={"why": why})


def csrf_refused() -> DomainError:
    return CSRF_REFUSED(
        "The request did not carry this session's CSRF token "
        "(X-CSRF-Token header or csrf_token form field)."
    )


def cross_origin_refused(why: str) -> DomainError:
    return CROSS_ORIGIN_REFUSED(f"Cross-origin request refused: {why}.")


def too_many_streams(limit: int) -> DomainError:
    return TOO_MANY_STREAMS(
        f"This session already holds {limit} live-update streams.", details={"limit": limit}
    )
