"""The shop's business rules (DESIGN.md §2), shared by proposal and execution."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session

from service.errors import Category, DomainError
from service.money import Money, render_amount
from service.shop import repository
from service.shop.models import Order, OrderStatus

REFUNDABLE_STATUSES = frozenset({OrderStatus.PAID, OrderStatus.SHIPPED, OrderStatus.DELIVERED})
CANCELLABLE_STATUSES = frozenset({OrderStatus.PENDING_PAYMENT, OrderStatus.PAID})
READDRESSABLE_STATUSES = CANCELLABLE_STATUSES  # only before shipment


def order_unavailable() -> DomainError:
    # One error for "does not exist" and "not yours": errors must not reveal existence.
    return DomainError(
        "ORDER_UNAVAILABLE",
        Category.UNAVAILABLE,
        "No order with that id is available to this customer.",
        suggested_action="Ask the user to confirm the order id; do not retry with the same "
        "arguments. list_orders shows the customer's recent orders.",
    )


def days_since_delivery(order: Order, now: datetime) -> int | None:
    if order.delivered_at is None:
        return None
    return (now - order.delivered_at).days


def refundable_minor(session: Session, order: Order, *, now: datetime, window_days: int) -> int:
    """What can still be refunded now: nothing outside the window, else total minus refunds."""
    if OrderStatus(order.status) not in REFUNDABLE_STATUSES:
        return 0
    days = days_since_delivery(order, now)
    if days is not None and days > window_days:
        return 0
    assert order.id is not None
    return max(order.total_minor - repository.refunded_minor(session, order.id), 0)


def check_refund(
    session: Session, order: Order, amount: Money, *, now: datetime, window_days: int
) -> None:
    status = OrderStatus(order.status)
    if status not in REFUNDABLE_STATUSES:
        raise _precondition(
            "ORDER_NOT_REFUNDABLE",
            f"The order is {status.value}; only paid, shipped or delivered orders can be refunded.",
            "Tell the user this order cannot be refunded in its current state.",
        )
    days = days_since_delivery(order, now)
    if days is not None and days > window_days:
        raise _precondition(
            "REFUND_WINDOW_CLOSED",
            f"The order was delivered {days} days ago; refunds are possible for "
            f"{window_days} days after delivery.",
            "Tell the user the refund window has closed; do not propose this refund.",
            details={"days_since_delivery": days, "window_days": window_days},
        )
    if amount.currency != order.currency:
        raise _precondition(
            "CURRENCY_MISMATCH",
            f"The order is in {order.currency}; a refund must be in the order's currency, "
            f"not {amount.currency}.",
            f"Propose the refund again with currency {order.currency}.",
            details={"order_currency": order.currency},
        )
    refundable = refundable_minor(session, order, now=now, window_days=window_days)
    if amount.amount_minor > refundable:
        maximum = render_amount(refundable, order.currency)
        raise _precondition(
            "REFUND_EXCEEDS_REFUNDABLE",
            f"The refund of {amount.render()} exceeds what can still be refunded: at most "
            f"{maximum} (amount_minor {refundable}).",
            f"Propose at most {maximum}, or tell the user the larger refund is not possible.",
            details={"max_amount_minor": refundable, "currency": order.currency},
        )


def check_cancellable(order: Order) -> None:
    status = OrderStatus(order.status)
    if status not in CANCELLABLE_STATUSES:
        raise _precondition(
            "ORDER_NOT_CANCELLABLE",
            f"The order is {status.value}; only orders that are pending payment or paid "
            "(not yet shipped) can be cancelled.",
            "Tell the user the order can no longer be cancelled; a refund may be possible "
            "once it is delivered.",
        )


def check_readdressable(order: Order) -> None:
    status = OrderStatus(order.status)
    if status not in READDRESSABLE_STATUSES:
        raise _precondition(
            "ADDRESS_CHANGE_NOT_ALLOWED",
            f"The order is {status.value}; the shipping address can only change before shipment.",
            "Tell the user the parcel has already left; the address can no longer be changed.",
        )


def next_action(order: Order, refundable: int) -> str:
    status = OrderStatus(order.status)
    hints = {
        OrderStatus.PENDING_PAYMENT: "It can be cancelled (propose_cancel_order) or its address "
        "changed (propose_change_shipping_address).",
        OrderStatus.PAID: "It can be cancelled (propose_cancel_order) or its address changed "
        "(propose_change_shipping_address) until it ships.",
        OrderStatus.SHIPPED: "It is on its way; get_logistics shows tracking.",
        OrderStatus.DELIVERED: "It was delivered.",
        OrderStatus.CANCELLED: "It was cancelled; nothing more can be done with it.",
    }
    hint = hints[status]
    if refundable > 0:
        hint += (
            f" Up to {render_amount(refundable, order.currency)} can be refunded with "
            "propose_refund, which creates a draft for human approval."
        )
    return hint


def _precondition(
    code: str, message: str, suggested_action: str, *, details: dict[str, object] | None = None
) -> DomainError:
    return DomainError(
        code,
        Category.PRECONDITION_FAILED,
        message,
        suggested_action=suggested_action,
        details=dict(details or {}),
    )
