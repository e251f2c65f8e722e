"""Orders of the demo customer made for one run of a bench or a drill, one per flow.

A refund binds the state of its order (docs/approvals.md, "Source-bound approvals"): two
refunds approved on one order cannot both run, the second is refused SOURCE_CHANGED. Load
that means "many independent changes" therefore gives each flow an order of its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import col, select

from service.db import session_scope
from service.shop.models import Customer, Order, OrderItem, OrderStatus
from service.shop.seed import DEMO_CUSTOMER
from service.sql import utcnow

TENANT = "demo"
ORDER_TOTAL_MINOR = 10_000  # 100.00 USD each


class Orders:
    """Delivered USD orders of the demo customer, handed out in order. ``prefix`` keeps the
    numbers of several series in one database apart (ORD-<prefix><7 digits>)."""

    def __init__(self, engine: Any, prefix: int) -> None:
        self._engine = engine
        self._prefix = prefix
        self._next = 0

    def take(self, count: int) -> list[str]:
        numbers = [f"ORD-{self._prefix}{self._next + i:07d}" for i in range(count)]
        self._next += count
        seed_orders(self._engine, numbers)
        return numbers


def flow_order(engine: Any, label: str, index: int) -> str:
    """The order of flow ``index`` of the series ``label``, made unless it exists (so a
    retried flow, e.g. through a database outage, finds the one it made)."""
    series = int(hashlib.sha256(label.encode()).hexdigest(), 16) % 10**6  # ids are digits
    number = f"ORD-{series:06d}{index:07d}"
    with session_scope(engine) as session:
        found = session.exec(
            select(Order).where(col(Order.tenant) == TENANT, col(Order.order_number) == number)
        ).first()
    if found is None:
        seed_orders(engine, [number])
    return number


def seed_orders(engine: Any, numbers: Sequence[str]) -> None:
    now = utcnow()
    with session_scope(engine) as session:
        customer = session.exec(
            select(Customer).where(
                col(Customer.tenant) == TENANT, col(Customer.external_ref) == DEMO_CUSTOMER
            )
        ).one()
        orders = [_order(customer, number, now) for number in numbers]
        session.add_all(orders)
        session.flush()
        for order in orders:
            assert order.id is not None
            session.add(
                OrderItem(
                    order_id=order.id,
                    sku="BENCH-1",
                    name="Bench item",
                    quantity=1,
                    unit_price_minor=ORDER_TOTAL_MINOR,
                )
            )


def _order(customer: Customer, number: str, now: datetime) -> Order:
    assert customer.id is not None
    return Order(
        tenant=TENANT,
        order_number=number,
        customer_id=customer.id,
        status=OrderStatus.DELIVERED.value,
        currency="USD",
        total_minor=ORDER_TOTAL_MINOR,
        shipping_address={"district": "Camden", "city": "London", "country": "GB"},
        created_at=now - timedelta(days=4),
        paid_at=now - timedelta(days=4),
        shipped_at=now - timedelta(days=3),
        delivered_at=now - timedelta(days=1),
    )
