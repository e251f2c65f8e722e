"""The shop's business rules (DESIGN.md §2), shared by proposal and execution."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session

from service.money import Money, render_amount
from service.shop import errors, repository
from service.shop.models import Order, OrderStatus

REFUNDABLE_STATUSES = frozenset({OrderStatus.PAID, OrderStatus.SHIPPED, OrderStatus.DELIVERED})
CANCELLABLE_STATUSES = frozenset({OrderStatus.PENDING_PAYMENT, OrderStatus.PAID})
READDRESSABLE_STATUSES = CANCELLABLE_STATUSES  # only before shipment


def days_since_delivery(order: Order, now: datetime) -> int | None:
    if order.delivered_at is None:
        return None
    return (now - order.delivered_at).days


def refundable_minor(order: Order, refunded_minor: int, *, now: datetime, window_days: int) -> int:
    """What can still be refunded now: nothing outside the window, else total minus refunds."""
    if OrderStatus(order.status) not in REFUNDABLE_STATUSES:
        return 0
    days = days_since_delivery(order, now)
    if days is not None and days > window_days:
        return 0
    return max(order.total_minor - refunded_minor, 0)


def check_refund(
    session: Session, order: Order, amount: Money, *, now: datetime, window_days: int
) -> None:
    status = OrderStatus(order.status)
    if status not in REFUNDABLE_STATUSES:
        raise errors.order_not_refundable(status.value)
    days = days_since_delivery(order, now)
    if days is not None and days > window_days:
        raise errors.refund_window_closed(days, window_days)
    if amount.currency != order.currency:
        raise errors.currency_mismatch(order.currency, amount.currency)
    assert order.id is not None
    refunded = repository.refunded_minor(session, order.id)
    refundable = refundable_minor(order, refunded, now=now, window_days=window_days)
    if amount.amount_minor > refundable:
        maximum = render_amount(refundable, order.currency)
        raise errors.refund_exceeds_refundable(amount.render(), maximum, refundable, order.currency)


def check_cancellable(order: Order) -> None:
    status = OrderStatus(order.status)
    if status not in CANCELLABLE_STATUSES:
        raise errors.order_not_cancellable(status.value)


def check_readdressable(order: Order) -> None:
    status = OrderStatus(order.status)
    if status not in READDRESSABLE_STATUSES:
        raise errors.address_change_not_allowed(status.value)


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
