"""Every error a standing grant can be refused with (docs/approvals.md, "Standing grants")."""

from __future__ import annotations

from service.errors import Category, DomainError, ErrorCode

GRANT_NOT_ALLOWED = ErrorCode(
    "GRANT_NOT_ALLOWED",
    Category.PERMISSION_DENIED,
    "The action's policy does not let approvers grant it in advance, or not for that long.",
    "Approve its drafts one by one, or ask an operator to allow grants in the policy.",
)
GRANT_EXISTS = ErrorCode(
    "GRANT_EXISTS",
    Category.CONFLICT,
    "This signed grant statement has been recorded already (the grant id names it).",
    "List your grants; sign a new statement (a new issued_at) for another grant.",
)
GRANT_UNAVAILABLE = ErrorCode(
    "GRANT_UNAVAILABLE",
    Category.UNAVAILABLE,
    "No grant with this id in your tenant, or not one you may revoke.",
    "List the grants to find its id.",
)
GRANT_EXPIRED = ErrorCode(
    "GRANT_EXPIRED",
    Category.INVALID_ARGUMENT,
    "The grant statement's expires_at has passed.",
    "Sign a grant that stands from now on.",
)


def grant_not_allowed(action: str) -> DomainError:
    return GRANT_NOT_ALLOWED(f"The policy of {action} does not let it be granted in advance.")


def grant_too_long(problem: str) -> DomainError:
    return GRANT_NOT_ALLOWED(
        f"Not recorded: {problem}.", suggested_action="Sign a grant that stands less long."
    )


def grant_exists(grant_id: str) -> DomainError:
    return GRANT_EXISTS(f"The grant {grant_id} has been recorded already.")


def grant_unavailable() -> DomainError:
    return GRANT_UNAVAILABLE("No such grant that you may revoke.")


def grant_expired(expires_at: str) -> DomainError:
    return GRANT_EXPIRED(f"The grant expired at {expires_at}; nothing was recorded.")
