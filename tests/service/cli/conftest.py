"""Fixtures of the CLI tests: real API servers kept for a test module (one per backend) for
the commands that talk HTTP (SQLite unless a test is marked ``both_backends``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import cli


@pytest.fixture(scope="module")
def api_hosts(
    tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
) -> Iterator[cli.ApiHosts]:
    with cli.api_hosts(tmp_path_factory, sqlite_template) as hosts:
        yield hosts


@pytest.fixture
def served(api_hosts: cli.ApiHosts, backend: str, request: pytest.FixtureRequest) -> cli.Served:
    """The module's API server on ``backend``, its database emptied and the demo seeded."""
    return api_hosts.fresh(backend, request)
