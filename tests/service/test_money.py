"""Money: ISO 4217 exponents, rendering, strict amounts, major → minor conversion."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError

from service.errors import DomainError
from service.money import (
    MAX_AMOUNT_MINOR,
    AmountView,
    Money,
    currency_exponent,
    major_to_minor,
    render_amount,
    to_major,
)
from service.validation import parse


@pytest.mark.parametrize(
    ("currency", "exponent"),
    [("JPY", 0), ("USD", 2), ("CNY", 2), ("EUR", 2), ("KWD", 3), ("BHD", 3), ("CLF", 4)],
)
def test_exponents_come_from_the_iso_4217_table(currency, exponent):
    assert currency_exponent(currency) == exponent


def test_unknown_currency_code_is_refused_by_name():
    with pytest.raises(ValueError, match="'ZZZ' is not an ISO 4217 currency code"):
        currency_exponent("ZZZ")


@pytest.mark.parametrize("code", ["XXX", "XAU", "XTS", "XDR"])
def test_codes_without_a_minor_unit_are_not_money(code):
    with pytest.raises(ValueError, match="not a currency that money can be paid in"):
        currency_exponent(code)


@pytest.mark.parametrize(
    ("amount_minor", "currency", "rendered"),
    [
        (1250, "USD", "12.50 USD"),
        (1250, "JPY", "1,250 JPY"),
        (1250, "KWD", "1.250 KWD"),
        (1, "USD", "0.01 USD"),
        (5, "BHD", "0.005 BHD"),
        (1, "CLF", "0.0001 CLF"),
        (123_456_789, "USD", "1,234,567.89 USD"),
        (78_500, "USD", "785.00 USD"),
        (MAX_AMOUNT_MINOR, "JPY", "9,007,199,254,740,991 JPY"),
        (MAX_AMOUNT_MINOR, "USD", "90,071,992,547,409.91 USD"),
    ],
)
def test_rendering_uses_the_currency_exponent(amount_minor, currency, rendered):
    assert render_amount(amount_minor, currency) == rendered
    assert Money(amount_minor=amount_minor, currency=currency).render() == rendered


def test_zero_renders_for_output_views():
    # AmountView may show zero (nothing refundable); Money may not hold it.
    view = AmountView.of(0, "KWD")
    assert view.display == "0.000 KWD"
    assert view.amount_minor == 0


def test_to_major_is_exact():
    assert to_major(1999, "USD") == Decimal("19.99")
    assert to_major(1999, "JPY") == Decimal(1999)
    assert Money(amount_minor=1, currency="KWD").to_major() == Decimal("0.001")
    # No binary floating point anywhere: the largest amount survives exactly.
    assert to_major(MAX_AMOUNT_MINOR, "USD") == Decimal("90071992547409.91")


def _problems(arguments):
    with pytest.raises(DomainError) as caught:
        parse(Money, arguments)
    assert caught.value.code == "INVALID_ARGUMENT"
    return caught.value.details["problems"]


@pytest.mark.parametrize("amount_minor", [True, False, 12.0, 12.5, "12", "1250", [12], {"v": 1}])
def test_amount_minor_must_be_a_json_integer(amount_minor):
    problems = _problems({"amount_minor": amount_minor, "currency": "USD"})
    assert problems == ["amount_minor: Input should be a valid integer"]


@pytest.mark.parametrize("amount_minor", [True, 12.0, "12"])
def test_amount_minor_is_not_coerced_from_python_values_either(amount_minor):
    with pytest.raises(ValidationError):
        Money.model_validate({"amount_minor": amount_minor, "currency": "USD"})


@pytest.mark.parametrize("amount_minor", [0, -1, -(2**53)])
def test_amount_below_one_minor_unit_is_refused(amount_minor):
    problems = _problems({"amount_minor": amount_minor, "currency": "USD"})
    assert problems == ["amount_minor: Input should be greater than or equal to 1"]


@pytest.mark.parametrize("amount_minor", [2**53, 2**53 + 1, 2**63, 10**30])
def test_amount_above_the_exact_json_integer_range_is_refused(amount_minor):
    problems = _problems({"amount_minor": amount_minor, "currency": "USD"})
    assert problems == [f"amount_minor: Input should be less than or equal to {2**53 - 1}"]


def test_largest_and_smallest_amounts_are_accepted():
    assert MAX_AMOUNT_MINOR == 2**53 - 1
    assert parse(Money, {"amount_minor": 2**53 - 1, "currency": "USD"}).amount_minor == 2**53 - 1
    assert parse(Money, {"amount_minor": 1, "currency": "JPY"}).amount_minor == 1


def test_there_is_no_default_amount():
    assert _problems({"currency": "USD"}) == ["amount_minor: Field required"]
    assert _problems({"amount_minor": 100}) == ["currency: Field required"]


def test_null_amount_is_refused_not_read_as_zero():
    (problem,) = _problems({"amount_minor": None, "currency": "USD"})
    # null means omitted, and an amount is required: never a zero, never a default
    assert problem == "amount_minor: required; null means omitted, so send a value"


@pytest.mark.parametrize(
    ("currency", "problem"),
    [
        ("ZZZ", "currency: 'ZZZ' is not an ISO 4217 currency code"),
        ("XXX", "currency: 'XXX' is not a currency that money can be paid in"),
        ("XAU", "currency: 'XAU' is not a currency that money can be paid in"),
        ("usd", "currency: must match ^[A-Z]{3}$"),
        ("Usd", "currency: must match ^[A-Z]{3}$"),
        ("US", "currency: must match ^[A-Z]{3}$"),
        ("USDD", "currency: must match ^[A-Z]{3}$"),
        (" USD", "currency: must match ^[A-Z]{3}$"),
        ("", "currency: must match ^[A-Z]{3}$"),
        (840, "currency: Input should be a valid string"),
    ],
)
def test_currency_must_be_an_upper_case_iso_4217_money_code(currency, problem):
    assert _problems({"amount_minor": 100, "currency": currency}) == [problem]


def test_money_refuses_unknown_fields():
    problems = _problems({"amount_minor": 100, "currency": "USD", "exponent": 2})
    assert problems == ["exponent: unknown field; remove it"]


def test_money_is_immutable():
    money = Money(amount_minor=100, currency="USD")
    with pytest.raises(ValidationError):
        money.amount_minor = 0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("amount", "currency", "minor"),
    [
        ("500.00", "USD", 50_000),
        ("500", "USD", 50_000),
        ("0.01", "USD", 1),
        ("500", "JPY", 500),
        ("500.00", "JPY", 500),  # trailing zeros are not extra precision
        ("500.00", "KWD", 500_000),
        ("0.001", "BHD", 1),
        ("500.00", "CLF", 5_000_000),
        ("90071992547409.91", "USD", MAX_AMOUNT_MINOR),
    ],
)
def test_major_to_minor(amount, currency, minor):
    result = major_to_minor(amount, currency)
    assert result == minor
    assert type(result) is int


@pytest.mark.parametrize(
    ("amount", "currency"),
    [("0.001", "USD"), ("500.5", "JPY"), ("1.0001", "KWD"), ("0.00001", "CLF"), ("12.345", "CNY")],
)
def test_major_to_minor_refuses_more_fractional_digits_than_the_currency_has(amount, currency):
    with pytest.raises(ValueError, match="fractional digits"):
        major_to_minor(amount, currency)


def test_major_to_minor_refuses_unknown_currencies():
    with pytest.raises(ValueError, match="ISO 4217"):
        major_to_minor("1.00", "ZZZ")


@pytest.mark.parametrize("amount", ["abc", "", "NaN", "Infinity"])
def test_major_to_minor_never_reads_garbage_as_a_number(amount):
    # "A value that cannot be parsed is an error, never a zero."
    with pytest.raises((ValueError, ArithmeticError)):
        major_to_minor(amount, "USD")
