"""Everything a front door needs, built and checked once at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from service.config import Settings
from service.cursors import CursorCodec
from service.db import make_engine
from service.policies.actions import PolicyError, load_policies
from service.policies.schemas import PolicyConfig
from service.ratelimit import Limits, RateLimiter
from service.registry.loader import ActionRegistry, load_registry
from service.telemetry import instrument_engine


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    engine: Engine
    registry: ActionRegistry
    policies: dict[str, PolicyConfig]
    cursors: CursorCodec
    limiter: RateLimiter


def build_runtime(settings: Settings, *, engine: Engine | None = None) -> Runtime:
    """Load and check actions and policies; raises with every problem named if they are unusable."""
    registry = load_registry(settings.action_modules)
    policies = load_policies(settings.policies)
    engine = engine or instrument_engine(make_engine(settings.resolved_database_url()))
    if settings.gateway_file is not None:  # declared upstream tools join the registry
        from service.gateway.build import join_gateway  # only then: it reads YAML, dials out

        registry = join_gateway(registry, settings, policies, engine)
    unknown = sorted(set(policies) - set(registry.writes))
    if unknown:
        # A misspelt policy name would silently leave its action on the default policy.
        raise PolicyError(
            "policies for actions that do not exist: "
            + ", ".join(unknown)
            + f" (write actions: {', '.join(sorted(registry.writes))})"
        )
    return Runtime(
        settings=settings,
        engine=engine,
        registry=registry,
        policies=policies,
        cursors=CursorCodec(settings.resolved_secret_key_file()),
        limiter=RateLimiter(
            Limits(
                storage_url=settings.rate_limit_storage_url,
                per_address=settings.rate_limit_per_address,
                per_token=settings.rate_limit_per_token,
                recorded_refusals=settings.rate_limit_recorded_refusals,
            )
        ),
    )
