"""Every error of the reference shop (its reads, its business rules, its downstream systems)."""

from __future__ import annotations

from typing import Any

from service.errors import Category, DomainError, ErrorCode

ORDER_UNAVAILABLE = ErrorCode(
    "ORDER_UNAVAILABLE",
    Category.UNAVAILABLE,
    "No such order for the customer the agent acts for: it does not exist, or belongs to "
    "someone else (deliberately the same error, so ids cannot be probed).",
    "Ask the user to confirm the order id; do not retry with the same arguments. list_orders "
    "shows the customer's recent orders.",
)
ORDER_NOT_SHIPPED = ErrorCode(
    "ORDER_NOT_SHIPPED",
    Category.PRECONDITION_FAILED,
    "Tracking was asked for an order that has not shipped.",
    "Tell the user the order has not shipped yet.",
)
ORDER_NOT_REFUNDABLE = ErrorCode(
    "ORDER_NOT_REFUNDABLE",
    Category.PRECONDITION_FAILED,
    "Only paid, shipped or delivered orders can be refunded.",
    "Tell the user this order cannot be refunded in its current state.",
)
REFUND_WINDOW_CLOSED = ErrorCode(
    "REFUND_WINDOW_CLOSED",
    Category.PRECONDITION_FAILED,
    "The order was delivered longer ago than the refund window allows.",
    "Tell the user the refund window has closed; do not propose this refund.",
)
CURRENCY_MISMATCH = ErrorCode(
    "CURRENCY_MISMATCH",
    Category.PRECONDITION_FAILED,
    "A refund must be in the order's own currency.",
    "Propose the refund again in the order's currency.",
)
REFUND_EXCEEDS_REFUNDABLE = ErrorCode(
    "REFUND_EXCEEDS_REFUNDABLE",
    Category.PRECONDITION_FAILED,
    "The refund is larger than what can still be refunded on the order.",
    "Propose at most the refundable amount, or tell the user the larger refund is not possible.",
)
ORDER_NOT_CANCELLABLE = ErrorCode(
    "ORDER_NOT_CANCELLABLE",
    Category.PRECONDITION_FAILED,
    "Only orders that are pending payment or paid (not yet shipped) can be cancelled.",
    "Tell the user the order can no longer be cancelled. If it was delivered, propose_refund "
    "may still be possible; if it is on its way, a refund becomes possible once it arrives.",
)
ADDRESS_CHANGE_NOT_ALLOWED = ErrorCode(
    "ADDRESS_CHANGE_NOT_ALLOWED",
    Category.PRECONDITION_FAILED,
    "The shipping address can only change before the order ships.",
    "Tell the user the parcel has already left; the address can no longer be changed.",
)
UPSTREAM_TIMEOUT = ErrorCode(
    "UPSTREAM_TIMEOUT",
    Category.TRANSIENT,
    "The carrier did not answer within the configured timeout.",
    "Retry get_logistics in a little while; tell the user tracking is temporarily unavailable "
    "if it keeps failing.",
)
PAYMENT_PROVIDER_UNAVAILABLE = ErrorCode(
    "PAYMENT_PROVIDER_UNAVAILABLE",
    Category.TRANSIENT,
    "The payment provider did not accept a refund for now; the worker retries it.",
    "Retry later; nothing was charged back yet.",
)


def order_unavailable() -> DomainError:
    return ORDER_UNAVAILABLE("No order with that id is available to this customer.")


def order_not_shipped(status: str) -> DomainError:
    return ORDER_NOT_SHIPPED(
        f"The order is {status} and has not shipped, so there is no tracking yet."
    )


def order_not_refundable(status: str) -> DomainError:
    return ORDER_NOT_REFUNDABLE(
        f"The order is {status}; only paid, shipped or delivered orders can be refunded."
    )


def refund_window_closed(days: int, window_days: int) -> DomainError:
    return REFUND_WINDOW_CLOSED(
        f"The order was delivered {days} days ago; refunds are possible for {window_days} days "
        "after delivery.",
        details={"days_since_delivery": days, "window_days": window_days},
    )


def currency_mismatch(order_currency: str, currency: str) -> DomainError:
    return CURRENCY_MISMATCH(
        f"The order is in {order_currency}; a refund must be in the order's currency, "
        f"not {currency}.",
        suggested_action=f"Propose the refund again with currency {order_currency}.",
        details={"order_currency": order_currency},
    )


def refund_exceeds_refundable(
    requested: str, maximum: str, refundable: int, currency: str
) -> DomainError:
    return REFUND_EXCEEDS_REFUNDABLE(
        f"The refund of {requested} exceeds what can still be refunded: at most {maximum} "
        f"(amount_minor {refundable}).",
        suggested_action=f"Propose at most {maximum}, or tell the user the larger refund is "
        "not possible.",
        details={"max_amount_minor": refundable, "currency": currency},
    )


def order_not_cancellable(status: str) -> DomainError:
    return ORDER_NOT_CANCELLABLE(
        f"The order is {status}; only orders that are pending payment or paid (not yet "
        "shipped) can be cancelled."
    )


def address_change_not_allowed(status: str) -> DomainError:
    return ADDRESS_CHANGE_NOT_ALLOWED(
        f"The order is {status}; the shipping address can only change before shipment."
    )


def upstream_timeout(carrier: str, timeout_ms: int) -> DomainError:
    return UPSTREAM_TIMEOUT(
        f"The carrier {carrier} did not answer within {timeout_ms} ms.",
        details={"timeout_ms": timeout_ms},
    )


def payment_provider_unavailable(
    order_number: str, attempt: int, details: dict[str, Any]
) -> DomainError:
    return PAYMENT_PROVIDER_UNAVAILABLE(
        f"The payment provider did not accept the refund for order {order_number} "
        f"(attempt {attempt}); it is temporarily unavailable.",
        details=details,
    )
