"""The shop's actions: three reads the agent calls directly, three writes it can only propose."""

from __future__ import annotations

import secrets
from typing import Any

from service.masking import mask_phone
from service.money import AmountView, Money, render_amount
from service.registry.base import (
    ActionContext,
    Outcome,
    Preview,
    ReadAction,
    Risk,
    SourceFact,
    SourceState,
    WriteAction,
    digest_revision,
)
from service.shop import carrier, errors, payments, repository, rules
from service.shop.models import AddressChange, Cancellation, Order, OrderStatus, Refund
from service.shop.schemas import (
    CancelOrderInput,
    ChangeShippingAddressInput,
    ListOrdersInput,
    Logistics,
    MaskedAddress,
    OrderDetails,
    OrderInput,
    OrderItemView,
    OrderList,
    OrderSummary,
    RefundInput,
    TrackingEventView,
    masked_address,
)

HIGH_RISK_REFUND_SHARE = 0.5  # refunding more than half of an order is high risk


def _order(ctx: ActionContext, order_id: str, *, for_update: bool = False) -> Order:
    order = repository.customer_order(
        ctx.session,
        ctx.principal.tenant,
        ctx.principal.on_behalf_of,
        order_id,
        for_update=for_update,
    )
    if order is None:
        raise errors.order_unavailable()
    return order


def order_revision(order: Order, refunded_minor: int) -> str:
    """The order's source revision: a digest of everything stored that a change of it can
    move (status, money, refunds, address, milestones). A digest rather than a counter, so
    a change made by anyone, even a database writer outside the shop's code, moves it
    (docs/decisions/approvals-bind-the-source-state.md)."""
    state = {
        "status": order.status,
        "currency": order.currency,
        "total_minor": order.total_minor,
        "refunded_minor": refunded_minor,
        "shipping_address": order.shipping_address,
        "milestones": [
            moment.isoformat() if moment else None
            for moment in (order.paid_at, order.shipped_at, order.delivered_at, order.cancelled_at)
        ],
    }
    return digest_revision(state)


def order_source(
    ctx: ActionContext, order_id: str, *, lock: bool = False, limited: bool = False
) -> SourceState:
    """The order a change is proposed against, as the approver should see it
    (ORDER_UNAVAILABLE if it is not this customer's). ``lock``: under the order's row lock,
    as the worker compares it; ``limited``: what is refundable now is its limit."""
    if lock:
        _order(ctx, order_id, for_update=True)
    principal = ctx.principal
    found = repository.customer_order_with_details(
        ctx.session, principal.tenant, principal.on_behalf_of, order_id
    )
    if found is None:
        raise errors.order_unavailable()
    order = found.order
    refundable = rules.refundable_minor(
        order, found.refunded_minor, now=ctx.now, window_days=ctx.settings.shop_refund_window_days
    )
    address = order.shipping_address
    facts = [
        ("Order", order.order_number),
        ("Customer", f"{found.customer.external_ref} ({mask_phone(found.customer.phone)})"),
        ("Status", order.status.replace("_", " ")),
        ("Order total", render_amount(order.total_minor, order.currency)),
        ("Refunded so far", render_amount(found.refunded_minor, order.currency)),
        ("Refundable now", render_amount(refundable, order.currency)),
        ("Delivered", order.delivered_at.date().isoformat() if order.delivered_at else "not yet"),
        (
            "Ships to",
            ", ".join(str(address[k]) for k in ("district", "city", "country") if k in address),
        ),
    ]
    return SourceState(
        ref=f"order:{order.order_number}",
        revision=order_revision(order, found.refunded_minor),
        facts=tuple(SourceFact(label=label, value=value) for label, value in facts),
        limit=AmountView.of(refundable, order.currency) if limited else None,
    )


class _OrderChange(WriteAction):
    """A change of one order: the order is its source."""

    def source(self, ctx: ActionContext, params: Any, *, lock: bool = False) -> SourceState:
        return order_source(ctx, params.order_id, lock=lock)


class ListOrders(ReadAction):
    name = "list_orders"
    kind = "read"
    contract_version = 1
    title = "List the customer's recent orders"
    description = (
        "Lists the most recent orders of the customer you are helping, newest first: order id, "
        "status, date, total and item count. Use it when the user does not know the order id. "
        "limit defaults to 5 (max 20). It shows only this customer's orders and cannot search "
        "by product or date."
    )
    Input = ListOrdersInput
    Output = OrderList

    def handle(self, ctx: ActionContext, params: ListOrdersInput) -> OrderList:
        orders = repository.recent_orders(
            ctx.session, ctx.principal.tenant, ctx.principal.on_behalf_of, params.limit
        )
        counts = repository.item_counts(ctx.session, [o.id for o in orders if o.id is not None])
        return OrderList(
            orders=[
                OrderSummary(
                    order_id=order.order_number,
                    status=OrderStatus(order.status),
                    placed_at=order.created_at,
                    total=AmountView.of(order.total_minor, order.currency),
                    item_count=counts.get(order.id or 0, 0),
                )
                for order in orders
            ],
            next_action="Call get_order with an order_id for details, refundable amount and "
            "what can be done with it.",
        )


class GetOrder(ReadAction):
    name = "get_order"
    kind = "read"
    contract_version = 1
    title = "Get one order's details"
    description = (
        "Returns one order of the customer you are helping: status, items, amounts, how much "
        "can still be refunded, tracking number, days since delivery, and next_action saying "
        "what is possible. Phone and address are masked. Order ids look like ORD-1001. An order "
        "that does not exist or belongs to someone else gives ORDER_UNAVAILABLE."
    )
    Input = OrderInput
    Output = OrderDetails

    def handle(self, ctx: ActionContext, params: OrderInput) -> OrderDetails:
        principal = ctx.principal
        found = repository.customer_order_with_details(
            ctx.session, principal.tenant, principal.on_behalf_of, params.order_id
        )
        if found is None:
            raise errors.order_unavailable()
        order, shipment = found.order, found.shipment
        assert order.id is not None
        refundable = rules.refundable_minor(
            order,
            found.refunded_minor,
            now=ctx.now,
            window_days=ctx.settings.shop_refund_window_days,
        )
        return OrderDetails(
            order_id=order.order_number,
            status=OrderStatus(order.status),
            placed_at=order.created_at,
            items=[
                OrderItemView(
                    sku=item.sku,
                    name=item.name,
                    quantity=item.quantity,
                    unit_price=AmountView.of(item.unit_price_minor, order.currency),
                )
                for item in repository.items(ctx.session, order.id)
            ],
            total=AmountView.of(order.total_minor, order.currency),
            refunded=AmountView.of(found.refunded_minor, order.currency),
            refundable=AmountView.of(refundable, order.currency),
            carrier=shipment.carrier if shipment else None,
            tracking_number=shipment.tracking_number if shipment else None,
            days_since_delivery=rules.days_since_delivery(order, ctx.now),
            customer_phone=mask_phone(found.customer.phone),
            source_revision=order_revision(order, found.refunded_minor),
            shipping_address=MaskedAddress(**masked_address(order.shipping_address)),
            next_action=rules.next_action(order, refundable),
        )


class GetLogistics(ReadAction):
    name = "get_logistics"
    kind = "read"
    contract_version = 1
    title = "Get an order's shipment tracking"
    description = (
        "Asks the carrier for the tracking events of a shipped order: time, status, location. "
        "Orders not yet shipped have no tracking (ORDER_NOT_SHIPPED). The carrier can be slow: "
        "UPSTREAM_TIMEOUT is retryable, try again shortly."
    )
    Input = OrderInput
    Output = Logistics
    open_world = True  # it asks the carrier

    def handle(self, ctx: ActionContext, params: OrderInput) -> Logistics:
        order = _order(ctx, params.order_id)
        assert order.id is not None
        shipment = repository.shipment(ctx.session, order.id)
        if shipment is None:
            raise errors.order_not_shipped(order.status)
        events = carrier.fetch_tracking(ctx.session, shipment, ctx.settings)
        return Logistics(
            order_id=order.order_number,
            carrier=shipment.carrier,
            tracking_number=shipment.tracking_number,
            events=[
                TrackingEventView(
                    at=event.at,
                    status=event.status,
                    location=event.location,
                    description=event.description,
                )
                for event in events
            ],
            next_action="Relay the latest event to the user.",
        )


class RefundAction(_OrderChange):
    def source(self, ctx: ActionContext, params: Any, *, lock: bool = False) -> SourceState:
        # Refunds on one order add up: approvers are warned beyond what is refundable now.
        return order_source(ctx, params.order_id, lock=lock, limited=True)

    name = "refund"
    kind = "write"
    contract_version = 1
    title = "Propose a refund"
    description = (
        "Proposes refunding part or all of an order. This does NOT refund anything by itself: "
        "it creates a draft that a human approver must sign before it is executed. amount is "
        "{amount_minor, currency} in minor units (1250 = 12.50 USD) in the order's currency, "
        "at most the refundable amount shown by get_order. Pass an idempotency_key to retry "
        "safely, or draft_id to revise your own pending draft. Returns the draft and what to "
        "tell the user."
    )
    Input = RefundInput

    def validate(self, ctx: ActionContext, params: RefundInput) -> Preview:
        order = _order(ctx, params.order_id)
        rules.check_refund(
            ctx.session,
            order,
            params.amount,
            now=ctx.now,
            window_days=ctx.settings.shop_refund_window_days,
        )
        share = params.amount.amount_minor / order.total_minor
        return Preview(
            summary=f"Refund {params.amount.render()} on order {order.order_number} "
            f"(reason: {params.reason.value.replace('_', ' ')}).",
            amount=params.amount,
            risk=Risk.HIGH if share > HIGH_RISK_REFUND_SHARE else Risk.LOW,
        )

    def applied(self, ctx: ActionContext, idempotency_key: str) -> Outcome | None:
        refund = repository.refund_by_key(ctx.session, idempotency_key)
        return None if refund is None else _refund_outcome(refund)

    def execute(self, ctx: ActionContext, params: RefundInput, idempotency_key: str) -> Outcome:
        # Lock first, then look: a change made by a racing worker is visible once we
        # hold the lock, and must be reported, not re-validated against.
        order = _order(ctx, params.order_id, for_update=True)
        done = self.applied(ctx, idempotency_key)
        if done is not None:
            return done
        rules.check_refund(
            ctx.session,
            order,
            params.amount,
            now=ctx.now,
            window_days=ctx.settings.shop_refund_window_days,
        )
        payments.charge_back(ctx, order, params.amount, idempotency_key=idempotency_key)
        assert order.id is not None
        refund = Refund(
            id="re_" + secrets.token_hex(12),
            tenant=order.tenant,
            idempotency_key=idempotency_key,
            order_id=order.id,
            amount_minor=params.amount.amount_minor,
            currency=params.amount.currency,
            reason=params.reason.value,
            note=params.note,
            created_at=ctx.now,
        )
        ctx.session.add(refund)
        ctx.session.flush()
        return _refund_outcome(refund)


def _refund_outcome(refund: Refund) -> Outcome:
    amount = Money(amount_minor=refund.amount_minor, currency=refund.currency)
    return Outcome(
        summary=f"refunded {amount.render()} (refund {refund.id})",
        data={
            "refund_id": refund.id,
            "amount_minor": refund.amount_minor,
            "currency": refund.currency,
        },
    )


class CancelOrderAction(_OrderChange):
    name = "cancel_order"
    kind = "write"
    contract_version = 1
    title = "Propose cancelling an order"
    description = (
        "Proposes cancelling an order that has not shipped (status pending_payment or paid). "
        "This does NOT cancel anything by itself: it creates a draft that a human approver must "
        "sign before it is executed. Pass an idempotency_key to retry safely. Returns the draft "
        "and what to tell the user."
    )
    Input = CancelOrderInput

    def validate(self, ctx: ActionContext, params: CancelOrderInput) -> Preview:
        order = _order(ctx, params.order_id)
        rules.check_cancellable(order)
        return Preview(
            summary=f"Cancel order {order.order_number} ({order.status}, total "
            f"{AmountView.of(order.total_minor, order.currency).display}; reason: "
            f"{params.reason.value.replace('_', ' ')}).",
            amount=None,
            risk=Risk.MEDIUM,
        )

    def applied(self, ctx: ActionContext, idempotency_key: str) -> Outcome | None:
        cancellation = repository.cancellation_by_key(ctx.session, idempotency_key)
        return None if cancellation is None else _cancel_outcome(cancellation)

    def execute(
        self, ctx: ActionContext, params: CancelOrderInput, idempotency_key: str
    ) -> Outcome:
        order = _order(ctx, params.order_id, for_update=True)
        done = self.applied(ctx, idempotency_key)
        if done is not None:
            return done
        rules.check_cancellable(order)
        assert order.id is not None
        cancellation = Cancellation(
            id="can_" + secrets.token_hex(12),
            tenant=order.tenant,
            idempotency_key=idempotency_key,
            order_id=order.id,
            reason=params.reason.value,
            created_at=ctx.now,
        )
        order.status = OrderStatus.CANCELLED.value
        order.cancelled_at = ctx.now
        ctx.session.add_all([order, cancellation])
        ctx.session.flush()
        return _cancel_outcome(cancellation)


def _cancel_outcome(cancellation: Cancellation) -> Outcome:
    return Outcome(
        summary=f"cancelled the order (cancellation {cancellation.id})",
        data={"cancellation_id": cancellation.id},
    )


class ChangeShippingAddressAction(_OrderChange):
    name = "change_shipping_address"
    kind = "write"
    contract_version = 1
    title = "Propose a new shipping address"
    description = (
        "Proposes changing the shipping address of an order that has not shipped yet. This does "
        "NOT change anything by itself: it creates a draft that a human approver must sign "
        "before it is executed. address needs recipient, 1-3 street lines, district, city, "
        "postal_code and a 2-letter country code. Pass an idempotency_key to retry safely."
    )
    Input = ChangeShippingAddressInput

    def validate(self, ctx: ActionContext, params: ChangeShippingAddressInput) -> Preview:
        order = _order(ctx, params.order_id)
        rules.check_readdressable(order)
        where = f"{params.address.district}, {params.address.city}, {params.address.country}"
        return Preview(
            summary=f"Change the shipping address of order {order.order_number} to an address "
            f"in {where}.",
            amount=None,
            risk=Risk.HIGH,  # redirecting goods is a classic fraud pattern
        )

    def applied(self, ctx: ActionContext, idempotency_key: str) -> Outcome | None:
        change = repository.address_change_by_key(ctx.session, idempotency_key)
        return None if change is None else _address_outcome(change)

    def execute(
        self, ctx: ActionContext, params: ChangeShippingAddressInput, idempotency_key: str
    ) -> Outcome:
        order = _order(ctx, params.order_id, for_update=True)
        done = self.applied(ctx, idempotency_key)
        if done is not None:
            return done
        rules.check_readdressable(order)
        assert order.id is not None
        new_address: dict[str, Any] = params.address.model_dump(exclude_none=True)
        change = AddressChange(
            id="adr_" + secrets.token_hex(12),
            tenant=order.tenant,
            idempotency_key=idempotency_key,
            order_id=order.id,
            previous_address=order.shipping_address,
            new_address=new_address,
            created_at=ctx.now,
        )
        order.shipping_address = new_address
        ctx.session.add_all([order, change])
        ctx.session.flush()
        return _address_outcome(change)


def _address_outcome(change: AddressChange) -> Outcome:
    return Outcome(
        summary=f"changed the shipping address (change {change.id})",
        data={"address_change_id": change.id},
    )


ACTIONS: list[ReadAction | WriteAction] = [
    ListOrders(),
    GetOrder(),
    GetLogistics(),
    RefundAction(),
    CancelOrderAction(),
    ChangeShippingAddressAction(),
]
