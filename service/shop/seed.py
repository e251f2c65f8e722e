"""Demo data for the reference shop: one customer with an order in every state, and a stranger."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session

from service.shop.models import (
    Customer,
    Order,
    OrderItem,
    OrderStatus,
    Shipment,
    TrackingEvent,
)

DEMO_CUSTOMER = "cust-ada"
OTHER_CUSTOMER = "cust-grace"


@dataclass(frozen=True)
class SeedOrder:
    key: str
    number: str
    status: OrderStatus
    currency: str
    items: list[tuple[str, str, int, int]]  # sku, name, quantity, unit price (minor)
    age_days: int
    delivered_days_ago: int | None = None
    shipped: bool = False


DEMO_ORDERS = [
    SeedOrder(
        "pending_payment",
        "ORD-1001",
        OrderStatus.PENDING_PAYMENT,
        "USD",
        [("KB-01", "Mechanical keyboard", 1, 12_999)],
        age_days=0,
    ),
    SeedOrder(
        "paid",
        "ORD-1002",
        OrderStatus.PAID,
        "USD",
        [("HP-02", "Noise-cancelling headphones", 1, 24_900), ("CB-03", "USB-C cable", 2, 1_250)],
        age_days=1,
    ),
    SeedOrder(
        "shipped",
        "ORD-1003",
        OrderStatus.SHIPPED,
        "USD",
        [("MN-04", "27-inch monitor", 1, 38_900)],
        age_days=4,
        shipped=True,
    ),
    SeedOrder(
        "delivered",
        "ORD-1004",
        OrderStatus.DELIVERED,
        "USD",
        [("LT-05", "Laptop stand", 1, 6_500), ("CH-06", "Office chair", 1, 72_000)],
        age_days=10,
        delivered_days_ago=3,
        shipped=True,
    ),
    SeedOrder(
        "delivered_long_ago",
        "ORD-1005",
        OrderStatus.DELIVERED,
        "USD",
        [("MS-07", "Wireless mouse", 1, 4_999)],
        age_days=120,
        delivered_days_ago=90,
        shipped=True,
    ),
    SeedOrder(
        "delivered_jpy",
        "ORD-1006",
        OrderStatus.DELIVERED,
        "JPY",
        [("TE-08", "Tea set", 1, 8_800)],
        age_days=8,
        delivered_days_ago=2,
        shipped=True,
    ),
    SeedOrder(
        "delivered_kwd",
        "ORD-1007",
        OrderStatus.DELIVERED,
        "KWD",
        [("DT-09", "Dates gift box", 2, 12_500)],
        age_days=6,
        delivered_days_ago=1,
        shipped=True,
    ),
]
OTHER_ORDERS = [
    SeedOrder(
        "other_customer",
        "ORD-2001",
        OrderStatus.DELIVERED,
        "USD",
        [("BK-10", "Book", 1, 2_999)],
        age_days=5,
        delivered_days_ago=1,
        shipped=True,
    ),
]


def seed_shop(session: Session, tenant: str, *, now: datetime) -> dict[str, str]:
    """Create the demo customers and orders; returns ``{order key: order id}``."""
    ada = _customer(
        session,
        tenant,
        DEMO_CUSTOMER,
        "Ada Lovelace",
        "+447700900123",
        {
            "recipient": "Ada Lovelace",
            "lines": ["12 St James's Square"],
            "district": "St James's",
            "city": "London",
            "postal_code": "SW1Y 4JH",
            "country": "GB",
            "phone": "+447700900123",
        },
    )
    grace = _customer(
        session,
        tenant,
        OTHER_CUSTOMER,
        "Grace Hopper",
        "+12025550147",
        {
            "recipient": "Grace Hopper",
            "lines": ["1 Navy Yard"],
            "district": "Navy Yard",
            "city": "Washington",
            "postal_code": "20374",
            "country": "US",
        },
    )
    orders: dict[str, str] = {}
    for customer, address, seeds in (
        (ada[0], ada[1], DEMO_ORDERS),
        (grace[0], grace[1], OTHER_ORDERS),
    ):
        for seed in seeds:
            orders[seed.key] = _order(session, tenant, customer, address, seed, now=now)
    session.flush()
    return orders


def _customer(
    session: Session, tenant: str, ref: str, name: str, phone: str, address: dict[str, Any]
) -> tuple[Customer, dict[str, Any]]:
    customer = Customer(
        tenant=tenant, external_ref=ref, name=name, phone=phone, email=f"{ref}@example.com"
    )
    session.add(customer)
    session.flush()
    return customer, address


def _order(
    session: Session,
    tenant: str,
    customer: Customer,
    address: dict[str, Any],
    seed: SeedOrder,
    *,
    now: datetime,
) -> str:
    assert customer.id is not None
    created = now - timedelta(days=seed.age_days, hours=1)
    delivered = (
        now - timedelta(days=seed.delivered_days_ago)
        if seed.delivered_days_ago is not None
        else None
    )
    shipped = (delivered or now) - timedelta(days=2) if seed.shipped else None
    order = Order(
        tenant=tenant,
        order_number=seed.number,
        customer_id=customer.id,
        status=seed.status.value,
        currency=seed.currency,
        total_minor=sum(quantity * price for _, _, quantity, price in seed.items),
        shipping_address=address,
        created_at=created,
        paid_at=None
        if seed.status is OrderStatus.PENDING_PAYMENT
        else created + timedelta(minutes=5),
        shipped_at=shipped,
        delivered_at=delivered,
    )
    session.add(order)
    session.flush()
    assert order.id is not None
    for sku, name, quantity, price in seed.items:
        session.add(
            OrderItem(
                order_id=order.id, sku=sku, name=name, quantity=quantity, unit_price_minor=price
            )
        )
    if shipped is not None:
        _shipment(session, order, address, shipped=shipped, delivered=delivered)
    return seed.number


def _shipment(
    session: Session,
    order: Order,
    address: dict[str, Any],
    *,
    shipped: datetime,
    delivered: datetime | None,
) -> None:
    """The order's parcel and the carrier's tracking events so far."""
    assert order.id is not None
    shipment = Shipment(
        order_id=order.id,
        carrier="ParcelNet",
        tracking_number=f"PN{order.id:08d}{order.order_number[-4:]}",
    )
    session.add(shipment)
    session.flush()
    assert shipment.id is not None
    steps = [
        (shipped, "picked_up", "Warehouse, Rotterdam", "Parcel picked up"),
        (shipped + timedelta(hours=20), "in_transit", "Hub, London", "Arrived at hub"),
    ]
    if delivered is not None:
        steps.append((delivered, "delivered", address["city"], "Delivered to recipient"))
    for at, status, location, description in steps:
        session.add(
            TrackingEvent(
                shipment_id=shipment.id,
                at=at,
                status=status,
                location=location,
                description=description,
            )
        )
