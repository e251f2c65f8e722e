"""The shop's payment provider, simulated: refunds go back to the customer's card.

``DRAFTGATE_SHOP_TRANSIENT_FAILURES=n`` makes the provider unavailable for the
first n execution attempts, so the worker's retry path is real and testable.
"""

from __future__ import annotations

from service.money import Money
from service.registry.base import ActionContext
from service.shop import errors
from service.shop.models import Order


def charge_back(ctx: ActionContext, order: Order, amount: Money, *, idempotency_key: str) -> None:
    """Return money to the customer's payment method, or fail transiently.

    Like a real provider's, the call carries the idempotency key, so a retry after an
    unclear outcome can never pay out twice.
    """
    if ctx.attempt <= ctx.settings.shop_transient_failures:
        raise errors.payment_provider_unavailable(
            order.order_number, ctx.attempt, {"idempotency_key": idempotency_key}
        )
