"""Every error of the webhook use cases."""

from __future__ import annotations

from service.errors import Category, DomainError, ErrorCode

WEBHOOK_URL_REFUSED = ErrorCode(
    "WEBHOOK_URL_REFUSED",
    Category.INVALID_ARGUMENT,
    "A webhook URL that draftgate will not send to: not https (plain http only to a loopback "
    "address), with user info or a fragment, without a host, or longer than 2048 characters.",
    "Give an https:// URL of the receiver (http:// only for 127.0.0.1, ::1 or localhost).",
)
WEBHOOK_EVENT_UNKNOWN = ErrorCode(
    "WEBHOOK_EVENT_UNKNOWN",
    Category.INVALID_ARGUMENT,
    "A webhook subscription named an event type that is not announced (see docs/webhooks.md).",
    "Subscribe to some of: draft.proposed, draft.approved, draft.rejected, draft.expired, "
    "execution.succeeded, execution.failed.",
)
WEBHOOK_UNAVAILABLE = ErrorCode(
    "WEBHOOK_UNAVAILABLE",
    Category.UNAVAILABLE,
    "No active webhook endpoint with that id exists in the caller's tenant.",
    "List the tenant's webhooks (GET /v1/webhooks) and use one of their ids.",
)


def url_refused(problem: str) -> DomainError:
    return WEBHOOK_URL_REFUSED(f"The webhook URL is refused: {problem}.")


def event_unknown(names: list[str], known: tuple[str, ...]) -> DomainError:
    return WEBHOOK_EVENT_UNKNOWN(
        f"Unknown webhook event types: {', '.join(names)}. Known: {', '.join(known)}.",
        details={"unknown": names},
    )


def webhook_unavailable(endpoint_id: str) -> DomainError:
    return WEBHOOK_UNAVAILABLE(f"No active webhook endpoint {endpoint_id} in this tenant.")
