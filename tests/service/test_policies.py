"""Approval policies: tiers per currency (an unlisted currency gets the strictest tier),
cumulative amounts, validation, defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config import DEFAULT_POLICIES, Settings
from service.money import Money
from service.policies.actions import DEFAULT_APPROVALS, PolicyError, load_policies, resolve
from service.runtime import build_runtime

DEFAULT_TTL = 3_600


def _required(policies, name, amount_minor, currency):
    amount = Money(amount_minor=amount_minor, currency=currency)
    return resolve(policies, name, amount=amount, default_ttl_seconds=DEFAULT_TTL)


@pytest.fixture
def policies():
    return load_policies(DEFAULT_POLICIES)


@pytest.mark.parametrize(
    ("currency", "at_threshold", "bound"),
    [
        ("USD", 50_000, "500.00"),
        ("EUR", 50_000, "500.00"),
        ("GBP", 40_000, "400.00"),
        ("CNY", 350_000, "3500.00"),
        ("JPY", 75_000, "75000"),
    ],
)
def test_refund_thresholds_are_per_currency(policies, currency, at_threshold, bound):
    at = _required(policies, "refund", at_threshold, currency)
    assert at.approvals_required == 1
    assert at.rule == f"up to {bound} {currency}: 1 approver"
    above = _required(policies, "refund", at_threshold + 1, currency)
    assert above.approvals_required == 2
    assert above.rule == "above every lower tier: 2 distinct approvers"


@pytest.mark.parametrize(
    ("amount_minor", "currency"),
    [(1, "KWD"), (500_000, "KWD"), (500_000, "BHD"), (1, "CLF"), (5_000, "CLF"), (1, "CHE")],
)
def test_a_currency_without_tiers_fails_closed_to_the_strictest(policies, amount_minor, currency):
    """500 KWD is about 1,600 USD and 500 CLF about 20,000 USD: "500.00" read in the draft's
    own currency would let one approver through. Without tiers of its own, the strictest."""
    applied = _required(policies, "refund", amount_minor, currency)
    assert applied.approvals_required == 2
    assert applied.rule == f"no tiers for {currency}: the strictest tier: 2 distinct approvers"


def test_an_amount_less_draft_of_an_amount_tiered_action_gets_the_strictest(policies):
    applied = resolve(policies, "refund", amount=None, default_ttl_seconds=DEFAULT_TTL)
    assert applied.approvals_required == 2


def test_the_tier_is_chosen_on_the_total_with_earlier_peers(policies):
    """Two refunds of 500.00 on one order: the second is judged on 1,000.00."""
    first = _required(policies, "refund", 50_000, "USD")
    second = resolve(
        policies,
        "refund",
        amount=Money(amount_minor=50_000, currency="USD"),
        default_ttl_seconds=DEFAULT_TTL,
        prior_minor=50_000,
    )
    assert (first.approvals_required, second.approvals_required) == (1, 2)
    assert second.cumulative_minor == 100_000
    assert "1,000.00 USD with the earlier drafts of the same order_id within 30 days" in (
        second.rule
    )


def test_small_and_huge_refunds(policies):
    assert _required(policies, "refund", 1, "USD").approvals_required == 1
    assert _required(policies, "refund", 2**53 - 1, "USD").approvals_required == 2
    # The demo's delivered order totals 785.00 USD: refunding all of it needs two people.
    assert _required(policies, "refund", 78_500, "USD").approvals_required == 2


def test_applied_policy_carries_the_configured_ttl(policies):
    applied = _required(policies, "refund", 100, "USD")
    assert applied.name == "refund"
    assert applied.ttl_seconds == 86_400


def test_single_unbounded_tier_covers_any_amount(policies):
    applied = resolve(policies, "cancel_order", amount=None, default_ttl_seconds=DEFAULT_TTL)
    assert applied.approvals_required == 1
    assert applied.rule == "any amount: 1 approver"


def test_three_tiers_pick_the_first_that_covers_the_amount():
    policies = load_policies(
        {
            "refund": {
                "ttl_seconds": 600,
                "tiers": {
                    "USD": [
                        {"up_to": "100", "approvals": 1},
                        {"up_to": "1000.50", "approvals": 2},
                        {"approvals": 3},
                    ]
                },
            }
        }
    )
    assert _required(policies, "refund", 10_000, "USD").approvals_required == 1
    assert _required(policies, "refund", 10_001, "USD").approvals_required == 2
    assert _required(policies, "refund", 100_050, "USD").approvals_required == 2
    assert _required(policies, "refund", 100_051, "USD").approvals_required == 3
    assert _required(policies, "refund", 100_051, "USD").ttl_seconds == 600
    assert _required(policies, "refund", 1, "EUR").approvals_required == 3  # not listed


def test_unconfigured_action_gets_the_default_policy(policies):
    applied = resolve(policies, "ship_rocket", amount=None, default_ttl_seconds=DEFAULT_TTL)
    assert applied.approvals_required == DEFAULT_APPROVALS == 1
    assert applied.ttl_seconds == DEFAULT_TTL
    assert applied.name == "ship_rocket"
    assert applied.rule == "default policy: one approver"
    with_amount = _required({}, "refund", 10**9, "USD")
    assert with_amount.approvals_required == 1


def test_default_policies_match_the_design():
    policies = load_policies(DEFAULT_POLICIES)
    assert set(policies) == {"refund", "cancel_order", "change_shipping_address"}
    refund = policies["refund"]
    assert isinstance(refund.tiers, dict)
    usd = refund.tiers["USD"]
    assert [(tier.up_to, tier.approvals) for tier in usd] == [("500.00", 1), (None, 2)]
    assert refund.cumulative is not None
    assert (refund.cumulative.by, refund.cumulative.window_seconds) == ("order_id", 2_592_000)
    assert all(policy.ttl_seconds == 86_400 for policy in policies.values())


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"tiers": {"USD": [{"up_to": "500", "approvals": 1}]}},
            "the last tier must have no up_to bound, so every amount is covered",
        ),
        (
            {"tiers": {"USD": [{"up_to": "abc", "approvals": 1}, {"approvals": 2}]}},
            "'abc' is not a decimal amount",
        ),
        (
            {"tiers": {"USD": [{"up_to": "-1", "approvals": 1}, {"approvals": 2}]}},
            "'-1' must be a positive amount",
        ),
        (
            {"tiers": {"USD": [{"up_to": "0", "approvals": 1}, {"approvals": 2}]}},
            "'0' must be a positive amount",
        ),
        (
            {"tiers": {"USD": [{"up_to": "NaN", "approvals": 1}, {"approvals": 2}]}},
            "'NaN' must be a positive amount",
        ),
        (
            {"tiers": {"USD": [{"up_to": "Infinity", "approvals": 1}, {"approvals": 2}]}},
            "'Infinity' must be a positive amount",
        ),
        (
            {"tiers": {"USD": [{"approvals": 1}, {"approvals": 2}]}},
            "only the last tier may omit up_to",
        ),
        (
            {"tiers": [{"up_to": "500.00", "approvals": 1}, {"approvals": 2}]},
            "amount bounds need a currency",
        ),
        (
            {"tiers": {"ZZZ": [{"approvals": 1}]}},
            "'ZZZ' is not an ISO 4217 currency code",
        ),
        (
            {"tiers": {"JPY": [{"up_to": "500.50", "approvals": 1}, {"approvals": 2}]}},
            "more than 0 fractional digits for JPY",
        ),
        ({"tiers": {}}, "name at least one currency"),
        ({"tiers": []}, "at least one tier"),
        ({"tiers": [{"approvals": 0}]}, "greater than or equal to 1"),
        ({"tiers": [{"approvals": 11}]}, "less than or equal to 10"),
        ({"ttl_seconds": 10, "tiers": [{"approvals": 1}]}, "greater than or equal to 60"),
        ({"ttl_seconds": 86_400}, "Field required"),
        (
            {"tiers": [{"approvals": 1}], "cumulative": {"by": "order_id", "window_seconds": 60}},
            "cumulative amounts need tiers by amount",
        ),
        (
            {
                "tiers": {"USD": [{"approvals": 1}]},
                "cumulative": {"by": "Order", "window_seconds": 60},
            },
            "String should match pattern",
        ),
    ],
)
def test_invalid_policies_are_refused_with_a_clear_message(config, message):
    with pytest.raises(PolicyError) as caught:
        load_policies({"refund": config})
    text = str(caught.value)
    assert text.startswith("invalid policy configuration: policy 'refund', ")
    assert message in text


def test_every_invalid_policy_is_named():
    with pytest.raises(PolicyError) as caught:
        load_policies(
            {
                "refund": {"tiers": {"USD": [{"up_to": "x", "approvals": 1}, {"approvals": 2}]}},
                "cancel_order": {"tiers": [{"approvals": 1}]},
                "change_shipping_address": {"tiers": []},
            }
        )
    text = str(caught.value)
    assert "policy 'refund'" in text
    assert "policy 'change_shipping_address'" in text
    assert "policy 'cancel_order'" not in text


def test_message_names_the_offending_field():
    """An operator must learn WHICH setting is wrong, not only what is wrong with it."""
    with pytest.raises(PolicyError) as caught:
        load_policies({"refund": {"ttl_seconds": 10, "tiers": [{"approvals": 1}]}})
    assert "ttl_seconds" in str(caught.value)
    with pytest.raises(PolicyError) as caught:
        load_policies({"refund": {"tiers": [{"approvals": 1, "approvers": 2}]}})
    assert "approvers" in str(caught.value)


def test_a_runtime_with_invalid_policies_refuses_to_start(tmp_path: Path):
    settings = Settings(
        state_dir=tmp_path,
        database_url=f"sqlite:///{tmp_path / 'unused.db'}",
        policies={"refund": {"tiers": {"USD": [{"up_to": "500.00", "approvals": 1}]}}},
    )
    with pytest.raises(PolicyError, match="last tier must have no up_to bound"):
        build_runtime(settings)
