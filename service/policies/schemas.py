"""How approval policies are written in configuration, and what a draft records of one."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.money import currency_exponent, major_to_minor


class Tier(BaseModel):
    """Drafts whose amount is at most ``up_to`` (major units of the tier's currency)."""

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


def _check_tiers(tiers: list[Tier]) -> list[Tier]:
    if not tiers:
        raise ValueError("a tier list needs at least one tier")
    if tiers[-1].up_to is not None:
        raise ValueError("the last tier must have no up_to bound, so every amount is covered")
    if any(tier.up_to is None for tier in tiers[:-1]):
        raise ValueError("only the last tier may omit up_to")
    bounds = [Decimal(tier.up_to) for tier in tiers[:-1] if tier.up_to is not None]
    if bounds != sorted(set(bounds)):
        raise ValueError("tiers must be ordered by strictly increasing up_to")
    return tiers


class Cumulative(BaseModel):
    """Amounts of drafts that share a parameter value (e.g. the same order) add up, so a
    change cannot be split into pieces that each stay under a tier."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    by: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$", description="A top-level parameter.")
    window_seconds: int = Field(ge=60, le=366 * 86_400)


class GrantRules(BaseModel):
    """Whether approvers may sign standing grants for an action, and for how long at most
    (docs/approvals.md, "Standing grants"). An action whose policy has none cannot be
    granted at all."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_seconds: int = Field(
        default=7 * 86_400,
        ge=300,
        le=30 * 86_400,
        description="The longest a grant may stand, from not_before to expires_at.",
    )


class OversightRules(BaseModel):
    """How careful review is watched for an action (docs/metrics.md, "Oversight"): an
    approver who decides ``flag_after`` drafts within ``window_seconds`` each faster than
    ``min_dwell_seconds`` (or without opening them) is flagged in the audit log, and a draft
    still waiting after ``escalate_after_seconds`` is escalated (a webhook event)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_dwell_seconds: int = Field(default=5, ge=1, le=3_600)
    flag_after: int = Field(default=5, ge=2, le=1_000)
    window_seconds: int = Field(default=600, ge=60, le=86_400)
    escalate_after_seconds: int | None = Field(default=None, ge=60, le=30 * 86_400)


class PolicyConfig(BaseModel):
    """One action's policy, as written in configuration.

    ``tiers`` is either one list without amounts (every draft needs the same approvals), or
    lists per ISO 4217 currency: a bound means nothing without its currency, and a currency
    with no list of its own gets the strictest tier of all (fail closed).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttl_seconds: int = Field(default=86_400, ge=60, le=30 * 86_400)
    tiers: list[Tier] | dict[str, list[Tier]]
    cumulative: Cumulative | None = None
    grants: GrantRules | None = None
    oversight: OversightRules | None = None

    @field_validator("tiers")
    @classmethod
    def _tiers(
        cls, tiers: list[Tier] | dict[str, list[Tier]]
    ) -> list[Tier] | dict[str, list[Tier]]:
        if isinstance(tiers, list):
            _check_tiers(tiers)
            if len(tiers) > 1:
                raise ValueError(
                    'amount bounds need a currency: write tiers per currency, {"USD": [...]}'
                )
            return tiers
        if not tiers:
            raise ValueError("name at least one currency")
        for currency, listed in tiers.items():
            currency_exponent(currency)  # a known currency that money can be paid in
            _check_tiers(listed)
            for tier in listed:  # also: a known currency, and no digits it does not have
                if tier.up_to is not None:
                    major_to_minor(tier.up_to, currency)
        return tiers

    @model_validator(mode="after")
    def _cumulative_needs_amounts(self) -> PolicyConfig:
        if self.cumulative is not None and isinstance(self.tiers, list):
            raise ValueError("cumulative amounts need tiers by amount (per currency)")
        return self

    @property
    def strictest(self) -> int:
        lists = [self.tiers] if isinstance(self.tiers, list) else list(self.tiers.values())
        return max(tier.approvals for listed in lists for tier in listed)


class AppliedPolicy(BaseModel):
    """The policy as attached to a draft: what an approver and the worker rely on."""

    model_config = ConfigDict(frozen=True)

    name: str
    approvals_required: int
    ttl_seconds: int
    rule: str
    # The total the tier was chosen on, when amounts add up (this draft's and its peers').
    cumulative_minor: int | None = None
