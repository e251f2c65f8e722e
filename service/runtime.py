"""Everything a front door needs, built and checked once at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from service.actions.registry import ActionRegistry, load_registry
from service.config import Settings
from service.db import make_engine
from service.policies.actions import load_policies
from service.policies.schemas import PolicyConfig


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    engine: Engine
    registry: ActionRegistry
    policies: dict[str, PolicyConfig]


def build_runtime(settings: Settings, *, engine: Engine | None = None) -> Runtime:
    """Load and check actions and policies; raises with every problem named if they are unusable."""
    registry = load_registry(settings.action_modules)
    policies = load_policies(settings.policies)
    return Runtime(
        settings=settings,
        engine=engine or make_engine(settings.resolved_database_url()),
        registry=registry,
        policies=policies,
    )
