"""The shop's payment provider, simulated: refunds go back to the customer's card.

``DRAFTGATE_SHOP_TRANSIENT_FAILURES=n`` makes the provider unavailable for the
first n execution attempts, so the worker's retry path is real and testable.
"""

from __future__ import annotations

from service.actions.base import ActionContext
from service.errors import Category, DomainError
from service.money import Money
from service.shop.models import Order


def charge_back(ctx: ActionContext, order: Order, amount: Money, *, idempotency_key: str) -> None:
    """Return money to the customer's payment method, or fail transiently.

    Like a real provider's, the call carries the idempotency key, so a retry after an
    unclear outcome can never pay out twice.
    """
    if ctx.attempt <= ctx.settings.shop_transient_failures:
        raise DomainError(
            "PAYMENT_PROVIDER_UNAVAILABLE",
            Category.TRANSIENT,
            f"The payment provider did not accept the refund for order {order.order_number} "
            f"(attempt {ctx.attempt}); it is temporarily unavailable.",
            suggested_action="Retry later; nothing was charged back yet.",
            details={"idempotency_key": idempotency_key},
        )
