"""The shop's tool inputs (strict) and outputs (masked)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, Field

from service.masking import mask_phone
from service.money import AmountView, Money
from service.shop.models import OrderStatus
from service.validation import SafeLine, SafeText, StrictInput

ORDER_ID_PATTERN = r"^ORD-[0-9]{4,20}$"

OrderId = Annotated[
    str,
    Field(
        pattern=ORDER_ID_PATTERN,
        description="Order id as shown to the customer, e.g. ORD-1001.",
        examples=["ORD-1001"],
    ),
]
Line = Annotated[SafeLine, Field(min_length=1, max_length=100)]


# --- inputs -------------------------------------------------------------------------------


class ListOrdersInput(StrictInput):
    limit: int = Field(default=5, ge=1, le=20, description="How many recent orders (1-20).")


class OrderInput(StrictInput):
    order_id: OrderId


class RefundReason(StrEnum):
    DAMAGED = "damaged"
    NOT_AS_DESCRIBED = "not_as_described"
    NOT_RECEIVED = "not_received"
    WRONG_ITEM = "wrong_item"
    LATE_DELIVERY = "late_delivery"
    GOODWILL = "goodwill"


class RefundInput(StrictInput):
    order_id: OrderId
    amount: Money = Field(description="How much to refund, in the order's currency.")
    reason: RefundReason
    note: SafeText | None = Field(
        default=None,
        min_length=1,
        max_length=500,
        description="Optional context for the approver, in plain words.",
    )


class CancelReason(StrEnum):
    CUSTOMER_REQUEST = "customer_request"
    DUPLICATE_ORDER = "duplicate_order"
    PAYMENT_PROBLEM = "payment_problem"
    OUT_OF_STOCK = "out_of_stock"


class CancelOrderInput(StrictInput):
    order_id: OrderId
    reason: CancelReason


class Address(StrictInput):
    """A postal address. Only district, city and country ever leave the system unmasked."""

    recipient: SafeLine = Field(min_length=1, max_length=100)
    lines: list[Line] = Field(min_length=1, max_length=3, description="Street lines, 1-3.")
    district: SafeLine = Field(min_length=1, max_length=100)
    city: SafeLine = Field(min_length=1, max_length=100)
    postal_code: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9 -]{1,10}$")
    country: str = Field(pattern=r"^[A-Z]{2}$", description="ISO 3166-1 alpha-2 code.")
    phone: str | None = Field(default=None, pattern=r"^\+?[0-9]{6,15}$")

    def masked(self) -> dict[str, Any]:
        return masked_address(self.model_dump(exclude_none=True))


def masked_address(address: dict[str, Any]) -> dict[str, Any]:
    """Keep district, city and country; hide recipient, street, postal code; mask the phone."""
    masked: dict[str, Any] = {
        "recipient": "***",
        "lines": ["***"],
        "district": address["district"],
        "city": address["city"],
        "postal_code": "***",
        "country": address["country"],
    }
    if address.get("phone"):
        masked["phone"] = mask_phone(address["phone"])
    return masked


class ChangeShippingAddressInput(StrictInput):
    order_id: OrderId
    address: Address = Field(description="The complete new shipping address.")


# --- outputs ------------------------------------------------------------------------------


class MaskedAddress(BaseModel):
    recipient: str
    lines: list[str]
    district: str
    city: str
    postal_code: str
    country: str
    phone: str | None = None


class OrderSummary(BaseModel):
    order_id: str
    status: OrderStatus
    placed_at: datetime
    total: AmountView
    item_count: int


class OrderList(BaseModel):
    orders: list[OrderSummary]
    next_action: str


class OrderItemView(BaseModel):
    sku: str
    name: str
    quantity: int
    unit_price: AmountView


class OrderDetails(BaseModel):
    order_id: str
    status: OrderStatus
    placed_at: datetime
    items: list[OrderItemView]
    total: AmountView
    refunded: AmountView
    refundable: AmountView = Field(description="The most that can still be refunded now.")
    carrier: str | None = None
    tracking_number: str | None = None
    days_since_delivery: int | None = None
    customer_phone: str = Field(description="Masked: first 3 and last 4 characters.")
    shipping_address: MaskedAddress
    source_revision: str = Field(
        description="The version of the order this answer shows. A draft records the version "
        "it was proposed against; if the order changes before execution, the change is "
        "refused (SOURCE_CHANGED) and must be approved again."
    )
    next_action: str


class TrackingEventView(BaseModel):
    at: datetime
    status: str
    location: str
    description: str


class Logistics(BaseModel):
    order_id: str
    carrier: str
    tracking_number: str
    events: list[TrackingEventView]
    next_action: str
