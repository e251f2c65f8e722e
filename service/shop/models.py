"""The shop's own tables. Its mutations carry an idempotency key with a unique
constraint, exactly as a payment provider deduplicates requests."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Column, UniqueConstraint
from sqlmodel import Field, SQLModel

from service.sql import BigInt, UTCDateTime


class OrderStatus(StrEnum):
    PENDING_PAYMENT = "pending_payment"
    PAID = "paid"
    SHIPPED = "shipped"
    DELIVERED = "delivered"
    CANCELLED = "cancelled"


class Customer(SQLModel, table=True):
    __tablename__ = "shop_customers"
    __table_args__ = (UniqueConstraint("tenant", "external_ref", name="uq_shop_customers_ref"),)

    id: int | None = Field(default=None, primary_key=True)
    tenant: str = Field(max_length=64)
    # The end user an agent acts for (a token's on_behalf_of).
    external_ref: str = Field(max_length=128)
    name: str = Field(max_length=200)
    phone: str = Field(max_length=32)
    email: str = Field(max_length=200)


class Order(SQLModel, table=True):
    __tablename__ = "shop_orders"
    __table_args__ = (UniqueConstraint("tenant", "order_number", name="uq_shop_orders_number"),)

    id: int | None = Field(default=None, primary_key=True)
    tenant: str = Field(max_length=64)
    order_number: str = Field(max_length=32)  # ORD-1001
    customer_id: int = Field(foreign_key="shop_customers.id", index=True)
    status: str = Field(max_length=20)
    currency: str = Field(max_length=3)
    total_minor: int = Field(sa_column=Column(BigInt, nullable=False))
    shipping_address: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    paid_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    shipped_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    delivered_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))
    cancelled_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime()))


class OrderItem(SQLModel, table=True):
    __tablename__ = "shop_order_items"

    id: int | None = Field(default=None, primary_key=True)
    order_id: int = Field(foreign_key="shop_orders.id", index=True)
    sku: str = Field(max_length=64)
    name: str = Field(max_length=200)
    quantity: int
    unit_price_minor: int = Field(sa_column=Column(BigInt, nullable=False))


class Shipment(SQLModel, table=True):
    __tablename__ = "shop_shipments"

    id: int | None = Field(default=None, primary_key=True)
    order_id: int = Field(foreign_key="shop_orders.id", unique=True)
    carrier: str = Field(max_length=64)
    tracking_number: str = Field(max_length=64)


class TrackingEvent(SQLModel, table=True):
    __tablename__ = "shop_tracking_events"

    id: int | None = Field(default=None, primary_key=True)
    shipment_id: int = Field(foreign_key="shop_shipments.id", index=True)
    at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    status: str = Field(max_length=32)
    location: str = Field(max_length=200)
    description: str = Field(max_length=500)


class Refund(SQLModel, table=True):
    __tablename__ = "shop_refunds"

    id: str = Field(primary_key=True, max_length=40)
    tenant: str = Field(max_length=64)
    idempotency_key: str = Field(max_length=300, unique=True)
    order_id: int = Field(foreign_key="shop_orders.id", index=True)
    amount_minor: int = Field(sa_column=Column(BigInt, nullable=False))
    currency: str = Field(max_length=3)
    reason: str = Field(max_length=64)
    note: str | None = Field(default=None, max_length=1000)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))


class Cancellation(SQLModel, table=True):
    __tablename__ = "shop_cancellations"

    id: str = Field(primary_key=True, max_length=40)
    tenant: str = Field(max_length=64)
    idempotency_key: str = Field(max_length=300, unique=True)
    order_id: int = Field(foreign_key="shop_orders.id", unique=True)
    reason: str = Field(max_length=64)
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))


class AddressChange(SQLModel, table=True):
    __tablename__ = "shop_address_changes"

    id: str = Field(primary_key=True, max_length=40)
    tenant: str = Field(max_length=64)
    idempotency_key: str = Field(max_length=300, unique=True)
    order_id: int = Field(foreign_key="shop_orders.id", index=True)
    previous_address: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    new_address: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
