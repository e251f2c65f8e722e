"""Every query on the shop tables. Orders are always looked up through their customer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Select, func
from sqlmodel import Session, col, select

from service.shop.models import (
    AddressChange,
    Cancellation,
    Customer,
    Order,
    OrderItem,
    Refund,
    Shipment,
    TrackingEvent,
)

OrderQuery = TypeVar("OrderQuery", bound=Select[*tuple[Any, ...]])


def _of_customer(
    statement: OrderQuery, tenant: str, customer_ref: str, order_number: str
) -> OrderQuery:
    """``statement`` narrowed to the order of that number of this tenant's customer."""
    return statement.join(Customer, col(Customer.id) == col(Order.customer_id)).where(
        col(Order.tenant) == tenant,
        col(Order.order_number) == order_number,
        col(Customer.tenant) == tenant,
        col(Customer.external_ref) == customer_ref,
    )


def customer_order(
    session: Session,
    tenant: str,
    customer_ref: str | None,
    order_number: str,
    *,
    for_update: bool = False,
) -> Order | None:
    """The order if it exists AND belongs to this tenant's customer; else None (never which)."""
    if customer_ref is None:
        return None
    statement = _of_customer(select(Order), tenant, customer_ref, order_number)
    if for_update:
        statement = statement.with_for_update(of=Order).execution_options(populate_existing=True)
    return session.exec(statement).one_or_none()


@dataclass(frozen=True)
class OrderWithDetails:
    order: Order
    customer: Customer
    shipment: Shipment | None
    refunded_minor: int


def customer_order_with_details(
    session: Session, tenant: str, customer_ref: str | None, order_number: str
) -> OrderWithDetails | None:
    """``customer_order`` with its customer, shipment and refunded sum, in one statement."""
    if customer_ref is None:
        return None
    refunded = (
        select(func.coalesce(func.sum(col(Refund.amount_minor)), 0))
        .where(col(Refund.order_id) == col(Order.id))
        .scalar_subquery()
    )
    statement = _of_customer(
        select(Order, Customer, Shipment, refunded).outerjoin(
            Shipment, col(Shipment.order_id) == col(Order.id)
        ),
        tenant,
        customer_ref,
        order_number,
    )
    row = session.exec(statement).one_or_none()
    if row is None:
        return None
    order, customer, shipment, refunded_minor = row
    return OrderWithDetails(order, customer, shipment, int(refunded_minor))


def recent_orders(
    session: Session, tenant: str, customer_ref: str | None, limit: int
) -> list[Order]:
    if customer_ref is None:
        return []
    statement = (
        select(Order)
        .join(Customer, col(Customer.id) == col(Order.customer_id))
        .where(col(Customer.tenant) == tenant, col(Customer.external_ref) == customer_ref)
        .order_by(col(Order.created_at).desc(), col(Order.id).desc())
        .limit(limit)
    )
    return list(session.exec(statement).all())


def items(session: Session, order_id: int) -> list[OrderItem]:
    statement = (
        select(OrderItem).where(col(OrderItem.order_id) == order_id).order_by(col(OrderItem.id))
    )
    return list(session.exec(statement).all())


def item_counts(session: Session, order_ids: list[int]) -> dict[int, int]:
    statement = (
        select(col(OrderItem.order_id), func.sum(col(OrderItem.quantity)))
        .where(col(OrderItem.order_id).in_(order_ids))
        .group_by(col(OrderItem.order_id))
    )
    return {order_id: int(total) for order_id, total in session.exec(statement)}


def refunded_minor(session: Session, order_id: int) -> int:
    statement = select(func.coalesce(func.sum(col(Refund.amount_minor)), 0)).where(
        col(Refund.order_id) == order_id
    )
    return int(session.exec(statement).one())


def shipment(session: Session, order_id: int) -> Shipment | None:
    statement = select(Shipment).where(col(Shipment.order_id) == order_id)
    return session.exec(statement).one_or_none()


def tracking_events(session: Session, shipment_id: int) -> list[TrackingEvent]:
    statement = (
        select(TrackingEvent)
        .where(col(TrackingEvent.shipment_id) == shipment_id)
        .order_by(col(TrackingEvent.at))
    )
    return list(session.exec(statement).all())


def refund_by_key(session: Session, idempotency_key: str) -> Refund | None:
    statement = select(Refund).where(col(Refund.idempotency_key) == idempotency_key)
    return session.exec(statement).one_or_none()


def cancellation_by_key(session: Session, idempotency_key: str) -> Cancellation | None:
    statement = select(Cancellation).where(col(Cancellation.idempotency_key) == idempotency_key)
    return session.exec(statement).one_or_none()


def address_change_by_key(session: Session, idempotency_key: str) -> AddressChange | None:
    statement = select(AddressChange).where(col(AddressChange.idempotency_key) == idempotency_key)
    return session.exec(statement).one_or_none()
