"""One runtime (and one real MCP server) per test module and backend, instead of one per test.

conftest's ``runtime``/``demo``/``mcp_url`` build a runtime on a new database and start a
uvicorn server for every test. A module of many small tests at the MCP door (or through
the core's tool door) declares instead::

    mcp_hosts, module_host, demo, runtime, mcp_url = module_host_fixtures()

and its tests keep asking for ``runtime``, ``demo`` and ``mcp_url`` as before. The module
keeps one database, runtime and (on first use) MCP server over streamable HTTP per backend
and settings combination; each test starts on that database emptied and the demo seeded
again, exactly as ``Stack`` does for the whole stack.

Tests run on SQLite. A test whose behaviour depends on the database (SQL semantics,
constraints and timestamps as PostgreSQL stores them, a commit seen by a running server,
the audit chain over PostgreSQL) is marked ``@both_backends`` (tests/support/backends.py)
and runs on both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.databases import fresh_demo
from harness.deployment import Deployment
from service.config import Settings
from service.runtime import Runtime
from tests.support.stacks import ModuleDatabases


class ModuleHost:
    """A runtime on a database of its own for a test module, and its MCP server once asked."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.deployment = Deployment(settings)
        self.runtime = self.deployment.runtime

    @property
    def mcp_url(self) -> str:
        """A real MCP server over streamable HTTP on this runtime (started on first use)."""
        return self.deployment.mcp_url or self.deployment.serve_mcp()

    def fresh(self) -> dict[str, Any]:
        """Empty the database and seed the demo again; returns the demo manifest."""
        return fresh_demo(self.runtime)

    def close(self) -> None:
        self.deployment.close()


class ModuleHosts:
    """A test module's hosts, one per backend and settings combination, all kept until the
    module ends (tests of both backends alternate, so none is worth stopping early)."""

    def __init__(self, root: Path, sqlite_template: Path) -> None:
        self._root = root
        self._databases = ModuleDatabases(sqlite_template)
        self._hosts: dict[str, ModuleHost] = {}

    def host(
        self, backend: str, overrides: dict[str, Any], request: pytest.FixtureRequest
    ) -> ModuleHost:
        key = json.dumps([backend, overrides], sort_keys=True, default=str)
        if key not in self._hosts:
            root = self._root / f"host-{len(self._hosts)}-{backend}"
            settings = Settings(
                state_dir=root / "state",
                database_url=self._databases.new(backend, root, request),
                **overrides,
            )
            self._hosts[key] = ModuleHost(settings)
        return self._hosts[key]

    def close(self) -> None:
        for host in self._hosts.values():
            host.close()
        self._hosts.clear()
        self._databases.close()


def module_host_fixtures() -> tuple[Any, ...]:
    """The fixtures a test module binds to share hosts (see the module docstring)."""

    @pytest.fixture(scope="module")
    def mcp_hosts(
        tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
    ) -> Iterator[ModuleHosts]:
        hosts = ModuleHosts(tmp_path_factory.mktemp("module-hosts"), sqlite_template)
        yield hosts
        hosts.close()

    @pytest.fixture
    def module_host(
        mcp_hosts: ModuleHosts,
        backend: str,
        settings_overrides: dict[str, Any],
        request: pytest.FixtureRequest,
    ) -> ModuleHost:
        return mcp_hosts.host(backend, settings_overrides, request)

    @pytest.fixture
    def demo(module_host: ModuleHost) -> dict[str, Any]:
        """The module's database emptied and the demo seeded again; its manifest."""
        return module_host.fresh()

    @pytest.fixture
    def runtime(module_host: ModuleHost, demo: dict[str, Any]) -> Runtime:
        """The module's runtime, on the database as ``demo`` left it for this test."""
        return module_host.runtime

    @pytest.fixture
    def mcp_url(module_host: ModuleHost, demo: dict[str, Any]) -> str:
        """The module's MCP server, on the database as ``demo`` left it for this test."""
        return module_host.mcp_url

    return mcp_hosts, module_host, demo, runtime, mcp_url
