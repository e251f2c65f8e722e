"""Resolve which policy applies to a proposed change."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pydantic import ValidationError

from service.money import Money
from service.policies.schemas import AppliedPolicy, PolicyConfig

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
    policies: dict[str, PolicyConfig], name: str, *, amount: Money | None, default_ttl_seconds: int
) -> AppliedPolicy:
    """Pick the first tier whose bound covers the amount (an amount-less draft takes the last)."""
    config = policies.get(name)
    if config is None:
        return AppliedPolicy(
            name=name,
            approvals_required=DEFAULT_APPROVALS,
            ttl_seconds=default_ttl_seconds,
            rule="default policy: one approver",
        )
    for tier in config.tiers:
        if tier.up_to is None:
            rule = "any amount" if len(config.tiers) == 1 else "above every lower tier"
            return _applied(name, config, tier.approvals, rule)
        if amount is not None and amount.to_major() <= Decimal(tier.up_to):
            return _applied(name, config, tier.approvals, f"up to {tier.up_to} {amount.currency}")
    raise AssertionError("unreachable: the last tier is validated to be unbounded")


def _applied(name: str, config: PolicyConfig, approvals: int, rule: str) -> AppliedPolicy:
    plural = "approver" if approvals == 1 else "distinct approvers"
    return AppliedPolicy(
        name=name,
        approvals_required=approvals,
        ttl_seconds=config.ttl_seconds,
        rule=f"{rule}: {approvals} {plural}",
    )
