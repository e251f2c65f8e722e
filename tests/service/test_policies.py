"""Approval policies: tiers by amount in the draft's own currency, validation, defaults."""

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
    ("currency", "at_threshold"),
    [("USD", 50_000), ("CNY", 50_000), ("JPY", 500), ("KWD", 500_000), ("BHD", 500_000)],
)
def test_refund_threshold_is_500_in_the_drafts_own_currency(policies, currency, at_threshold):
    at = _required(policies, "refund", at_threshold, currency)
    assert at.approvals_required == 1
    assert at.rule == f"up to 500.00 {currency}: 1 approver"
    above = _required(policies, "refund", at_threshold + 1, currency)
    assert above.approvals_required == 2
    assert above.rule == "above every lower tier: 2 distinct approvers"


def test_small_and_huge_refunds(policies):
    assert _required(policies, "refund", 1, "USD").approvals_required == 1
    assert _required(policies, "refund", 2**53 - 1, "USD").approvals_required == 2
    # The demo's delivered order totals 785.00 USD: refunding all of it needs two people.
    assert _required(policies, "refund", 78_500, "USD").approvals_required == 2


def test_applied_policy_carries_the_configured_ttl(policies):
    applied = _required(policies, "refund", 100, "USD")
    assert applied.name == "refund"
    assert applied.ttl_seconds == 86_400


def test_amount_less_draft_takes_the_last_tier():
    policies = load_policies(
        {"cancel_order": {"tiers": [{"up_to": "100", "approvals": 1}, {"approvals": 3}]}}
    )
    applied = resolve(policies, "cancel_order", amount=None, default_ttl_seconds=DEFAULT_TTL)
    assert applied.approvals_required == 3


def test_single_unbounded_tier_covers_any_amount(policies):
    applied = resolve(policies, "cancel_order", amount=None, default_ttl_seconds=DEFAULT_TTL)
    assert applied.approvals_required == 1
    assert applied.rule == "any amount: 1 approver"


def test_three_tiers_pick_the_first_that_covers_the_amount():
    policies = load_policies(
        {
            "refund": {
                "ttl_seconds": 600,
                "tiers": [
                    {"up_to": "100", "approvals": 1},
                    {"up_to": "1000.50", "approvals": 2},
                    {"approvals": 3},
                ],
            }
        }
    )
    assert _required(policies, "refund", 10_000, "USD").approvals_required == 1
    assert _required(policies, "refund", 10_001, "USD").approvals_required == 2
    assert _required(policies, "refund", 100_050, "USD").approvals_required == 2
    assert _required(policies, "refund", 100_051, "USD").approvals_required == 3
    assert _required(policies, "refund", 100_051, "USD").ttl_seconds == 600


def test_threshold_with_cents_still_works_for_a_currency_without_them():
    """A "1000.50" threshold is fine for USD; a JPY draft must not crash on it.

    500 JPY is at most 1000.50 JPY, so one approver; 1001 JPY is above it.
    """
    policies = load_policies(
        {"refund": {"tiers": [{"up_to": "1000.50", "approvals": 1}, {"approvals": 2}]}}
    )
    assert _required(policies, "refund", 500, "JPY").approvals_required == 1
    assert _required(policies, "refund", 1_001, "JPY").approvals_required == 2


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
    assert [(tier.up_to, tier.approvals) for tier in refund.tiers] == [("500.00", 1), (None, 2)]
    assert all(policy.ttl_seconds == 86_400 for policy in policies.values())


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"tiers": [{"up_to": "500", "approvals": 1}]},
            "the last tier must have no up_to bound, so every amount is covered",
        ),
        (
            {"tiers": [{"up_to": "abc", "approvals": 1}, {"approvals": 2}]},
            "'abc' is not a decimal amount",
        ),
        (
            {"tiers": [{"up_to": "-1", "approvals": 1}, {"approvals": 2}]},
            "'-1' must be a positive amount",
        ),
        (
            {"tiers": [{"up_to": "0", "approvals": 1}, {"approvals": 2}]},
            "'0' must be a positive amount",
        ),
        (
            {"tiers": [{"up_to": "NaN", "approvals": 1}, {"approvals": 2}]},
            "'NaN' must be a positive amount",
        ),
        (
            {"tiers": [{"up_to": "Infinity", "approvals": 1}, {"approvals": 2}]},
            "'Infinity' must be a positive amount",
        ),
        ({"tiers": [{"approvals": 1}, {"approvals": 2}]}, "only the last tier may omit up_to"),
        ({"tiers": []}, "at least 1 item"),
        ({"tiers": [{"approvals": 0}]}, "greater than or equal to 1"),
        ({"tiers": [{"approvals": 11}]}, "less than or equal to 10"),
        ({"ttl_seconds": 10, "tiers": [{"approvals": 1}]}, "greater than or equal to 60"),
        ({"ttl_seconds": 86_400}, "Field required"),
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
                "refund": {"tiers": [{"up_to": "x", "approvals": 1}, {"approvals": 2}]},
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
        policies={"refund": {"tiers": [{"up_to": "500.00", "approvals": 1}]}},
    )
    with pytest.raises(PolicyError, match="last tier must have no up_to bound"):
        build_runtime(settings)
