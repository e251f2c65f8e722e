"""Money in minor units with ISO 4217 exponents.

Amounts travel as ``{"amount_minor": <int>, "currency": "<ISO 4217>"}``. The
exponent (JPY 0, USD 2, KWD 3, CLF 4) comes from the maintained ISO 4217 table
of the ``iso4217`` package, never from display conventions.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated

from iso4217 import Currency
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from service.validation import StrictInput

MAX_AMOUNT_MINOR = 2**53 - 1  # the largest integer every JSON parser keeps exact


def currency_exponent(code: str) -> int:
    """The number of minor-unit digits of an ISO 4217 currency.

    Raises ValueError for codes that are unknown or have no minor unit
    (``XXX``, precious metals, ...), which can never be an amount of money here.
    """
    try:
        currency = Currency(code)
    except ValueError:
        raise ValueError(f"{code!r} is not an ISO 4217 currency code") from None
    exponent = currency.exponent
    if exponent is None:
        raise ValueError(f"{code!r} is not a currency that money can be paid in")
    return int(exponent)


def _known_currency(code: str) -> str:
    currency_exponent(code)
    return code


CurrencyCode = Annotated[
    str,
    Field(
        pattern=r"^[A-Z]{3}$",
        description="ISO 4217 alphabetic code, e.g. USD, EUR, JPY.",
        examples=["USD"],
    ),
    AfterValidator(_known_currency),
]


class Money(StrictInput):
    """An amount of money in the currency's minor unit (cents for USD, yen for JPY)."""

    amount_minor: int = Field(
        ge=1,
        le=MAX_AMOUNT_MINOR,
        description="Integer amount in minor units: 1250 means 12.50 USD, 1250 JPY, 1.250 KWD.",
    )
    currency: CurrencyCode

    def to_major(self) -> Decimal:
        return to_major(self.amount_minor, self.currency)

    def render(self) -> str:
        """Human-readable form, e.g. ``12.50 USD`` or ``1,250 JPY``."""
        return render_amount(self.amount_minor, self.currency)


class AmountView(BaseModel):
    """An amount in output: exact minor units plus a display string (may be zero)."""

    model_config = ConfigDict(frozen=True)

    amount_minor: int
    currency: str
    display: str

    @classmethod
    def of(cls, amount_minor: int, currency: str) -> AmountView:
        return cls(
            amount_minor=amount_minor,
            currency=currency,
            display=render_amount(amount_minor, currency),
        )


def to_major(amount_minor: int, currency: str) -> Decimal:
    return Decimal(amount_minor).scaleb(-currency_exponent(currency))


def render_amount(amount_minor: int, currency: str) -> str:
    exponent = currency_exponent(currency)
    return f"{to_major(amount_minor, currency):,.{exponent}f} {currency}"


def major_to_minor(amount: str, currency: str) -> int:
    """Convert a decimal string in major units ("500.00") to minor units.

    Refuses values with more fractional digits than the currency has: a
    threshold of "0.001" USD is a configuration mistake, not a rounding job.
    """
    exponent = currency_exponent(currency)
    try:
        value = Decimal(amount)
    except InvalidOperation:
        raise ValueError(f"{amount!r} is not a decimal amount") from None
    if not value.is_finite():
        raise ValueError(f"{amount!r} is not a finite amount")
    minor = value.scaleb(exponent)
    if minor != minor.to_integral_value():
        raise ValueError(f"{amount} has more than {exponent} fractional digits for {currency}")
    return int(minor)
