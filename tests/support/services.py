"""Reaching the real PostgreSQL and Redis of this machine (harness/services.py), or skipping
(failing in CI, where every service is promised)."""

from __future__ import annotations

import os

import pytest

from harness.services import reachable


def services_required() -> bool:
    return os.environ.get("DRAFTGATE_REQUIRE_SERVICES") == "1"


def unavailable(service: str, reason: str) -> None:
    """Skip locally; fail when DRAFTGATE_REQUIRE_SERVICES=1 (CI must not skip silently)."""
    message = f"{service} is not reachable: {reason}"
    if services_required():
        pytest.fail(message + " (DRAFTGATE_REQUIRE_SERVICES=1)")
    pytest.skip(message)


def require(service: str, url: str, default_port: int) -> None:
    """Go on only if something listens at ``url`` (see ``unavailable``)."""
    problem = reachable(url, default_port)
    if problem:
        unavailable(service, problem)
