"""Worker tests: one stack per kind for a whole module, not one per test.

The root ``stack_settings`` is parametrised per test, so a module's tests alternate between
the embedded and the production stack, and each switch replaces the live stack (a new worker
process, seconds). Here the kind is a module-scoped parameter instead: pytest then runs all
of a module's production tests, then all of its embedded ones, each group on one stack.
A test that runs on one kind only says so with
``@pytest.mark.parametrize("stack_kind", ["production"], indirect=True)``; "production"
comes first in ``KINDS`` so that such a test falls into the same group as the others.
"""

from __future__ import annotations

from typing import Any

import pytest

from service.config import Settings
from tests.support.stacks import Stack, StackHost

KINDS = ["production", "embedded"]


@pytest.fixture(scope="module", params=KINDS)
def stack_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def stack_settings(
    request: pytest.FixtureRequest,
    stack_kind: str,
    settings_overrides: dict[str, Any],
    stack_hosts: Any,
) -> Settings:
    """Embedded: SQLite + kombu's SQLite broker. Production: PostgreSQL + Redis."""
    settings: Settings = stack_hosts.settings(stack_kind, settings_overrides, request)
    return settings


@pytest.fixture
def stack_host(stack: Stack, stack_settings: Settings, stack_hosts: Any) -> StackHost:
    """The processes behind this test's ``stack`` (see ``helpers.restart_worker``)."""
    host: StackHost = stack_hosts.host(stack_settings)
    return host
