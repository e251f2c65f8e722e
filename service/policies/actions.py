"""Resolve which policy applies to a proposed change."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pydantic import ValidationError

from service.canonical import params_sha256
from service.money import Money, render_amount, to_major
from service.policies.schemas import AppliedPolicy, PolicyConfig, Tier

DEFAULT_APPROVALS = 1  # a write action without a configured policy still needs a human


class PolicyError(RuntimeError):
    """The policy configuration cannot be used; raised at start-up."""


def load_policies(raw: dict[str, Any]) -> dict[str, PolicyConfig]:
    """Parse the configured policies, naming every invalid one."""
    policies: dict[str, PolicyConfig] = {}
    problems: list[str] = []
    for name, config in raw.items():
        try:
            policies[name] = PolicyConfig.model_validate(config)
        except ValidationError as exc:
            for error in exc.errors(include_url=False):
                where = ".".join(str(part) for part in error["loc"]) or "policy"
                message = str(error["msg"]).removeprefix("Value error, ")
                problems.append(f"policy {name!r}, {where}: {message}")
    if problems:
        raise PolicyError("invalid policy configuration: " + "; ".join(problems))
    return policies


def resolve(
    policies: dict[str, PolicyConfig],
    name: str,
    *,
    amount: Money | None,
    default_ttl_seconds: int,
    prior_minor: int = 0,
) -> AppliedPolicy:
    """The tier an amount falls in, in its own currency's tiers.

    ``prior_minor`` is what earlier drafts sharing the policy's ``cumulative`` parameter
    already add up to (same currency, within the window): the tier is chosen on the total.
    A currency without tiers of its own, or an amount-less draft of an action whose tiers
    are by amount, gets the strictest tier (fail closed).
    """
    config = policies.get(name)
    if config is None:
        return AppliedPolicy(
            name=name,
            approvals_required=DEFAULT_APPROVALS,
            ttl_seconds=default_ttl_seconds,
            rule="default policy: one approver",
        )
    if isinstance(config.tiers, list):
        return _applied(name, config, config.tiers[-1].approvals, "any amount")
    if amount is None or amount.currency not in config.tiers:
        why = "no amount" if amount is None else f"no tiers for {amount.currency}"
        return _applied(name, config, config.strictest, f"{why}: the strictest tier")
    total = amount.amount_minor + prior_minor
    tier, bound = _tier(config.tiers[amount.currency], to_major(total, amount.currency))
    rule = f"up to {bound} {amount.currency}" if bound else "above every lower tier"
    cumulative = None
    if config.cumulative is not None:
        cumulative = total
        if prior_minor:
            days = config.cumulative.window_seconds / 86_400
            rule += (
                f" ({render_amount(total, amount.currency)} with the earlier drafts of the "
                f"same {config.cumulative.by} within {days:g} days)"
            )
    return _applied(name, config, tier.approvals, rule, cumulative_minor=cumulative)


def peer_key(config: PolicyConfig | None, params: dict[str, Any]) -> str | None:
    """What makes drafts peers whose amounts add up: the digest of the ``cumulative.by``
    parameter's value (a digest, so the column holds no customer data), or None."""
    if config is None or config.cumulative is None:
        return None
    value = params.get(config.cumulative.by)
    if value is None:
        return None
    return params_sha256({config.cumulative.by: value})


def _tier(tiers: list[Tier], total: Decimal) -> tuple[Tier, str | None]:
    for tier in tiers:
        if tier.up_to is None or total <= Decimal(tier.up_to):
            return tier, tier.up_to
    raise AssertionError("unreachable: the last tier is validated to be unbounded")


def _applied(
    name: str,
    config: PolicyConfig,
    approvals: int,
    rule: str,
    *,
    cumulative_minor: int | None = None,
) -> AppliedPolicy:
    plural = "approver" if approvals == 1 else "distinct approvers"
    return AppliedPolicy(
        name=name,
        approvals_required=approvals,
        ttl_seconds=config.ttl_seconds,
        rule=f"{rule}: {approvals} {plural}",
        cumulative_minor=cumulative_minor,
    )
