from __future__ import annotations

from decimal import Decimal, InvalidOperation

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Tier(BaseModel):
    """Drafts whose amount is at most ``up_to`` (major units of the draft's currency)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    up_to: str | None = Field(default=None, description='Inclusive bound in major units, "500.00".')
    approvals: int = Field(ge=1, le=10)

    @field_validator("up_to")
    @classmethod
    def _decimal(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            number = Decimal(value)
        except InvalidOperation:
            raise ValueError(f"{value!r} is not a decimal amount") from None
        if not number.is_finite() or number <= 0:
            raise ValueError(f"{value!r} must be a positive amount")
        return value


class PolicyConfig(BaseModel):
    """One action's policy, as written in configuration."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttl_seconds: int = Field(default=86_400, ge=60, le=30 * 86_400)
    tiers: list[Tier] = Field(min_length=1)

    @field_validator("tiers")
    @classmethod
    def _last_tier_is_open(cls, tiers: list[Tier]) -> list[Tier]:
        if tiers[-1].up_to is not None:
            raise ValueError("the last tier must have no up_to bound, so every amount is covered")
        if any(tier.up_to is None for tier in tiers[:-1]):
            raise ValueError("only the last tier may omit up_to")
        bounds = [Decimal(tier.up_to) for tier in tiers[:-1] if tier.up_to is not None]
        if bounds != sorted(set(bounds)):
            raise ValueError("tiers must be ordered by strictly increasing up_to")
        return tiers


class AppliedPolicy(BaseModel):
    """The policy as attached to a draft: what an approver and the worker rely on."""

    model_config = ConfigDict(frozen=True)

    name: str
    approvals_required: int
    ttl_seconds: int
    rule: str
