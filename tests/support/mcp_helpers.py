"""One runtime (and one real MCP server) per test module and backend, instead of one per test.

conftest's ``runtime``/``demo``/``mcp_url`` build a runtime on a new database and start a
uvicorn server for every test. A module of many small tests at the MCP door (or through
the core's tool door) declares instead::

    mcp_hosts, backend, module_host, demo, runtime, mcp_url = module_host_fixtures()

and its tests keep asking for ``runtime``, ``demo`` and ``mcp_url`` as before. The module
keeps one database, runtime and (on first use) MCP server over streamable HTTP per backend
and settings combination; each test starts on that database emptied and the demo seeded
again, exactly as ``Stack`` does for the whole stack.

Tests run on SQLite. A test whose behaviour depends on the database (SQL semantics,
constraints and timestamps as PostgreSQL stores them, a commit seen by a running server,
the audit chain over PostgreSQL) is marked ``@BOTH_BACKENDS`` and runs on both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from service.config import Settings
from service.runtime import Runtime, build_runtime
from tests.support.databases import (
    PostgresPool,
    fresh_demo,
    sqlite_copy,
)
from tests.support.servers import serve

BACKENDS = ["sqlite", "postgresql"]
BOTH_BACKENDS = pytest.mark.parametrize("backend", BACKENDS, indirect=True)


class ModuleHost:
    """A runtime on a database of its own for a test module, and its MCP server once asked."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.runtime = build_runtime(settings)
        self._servers = ExitStack()
        self._mcp_url: str | None = None

    @property
    def mcp_url(self) -> str:
        """A real MCP server over streamable HTTP on this runtime (started on first use)."""
        if self._mcp_url is None:
            from mcp_adapter.server import create_http_app

            base = self._servers.enter_context(serve(create_http_app(self.runtime)))
            self._mcp_url = base + "/mcp"
        return self._mcp_url

    def fresh(self) -> dict[str, Any]:
        """Empty the database and seed the demo again; returns the demo manifest."""
        return fresh_demo(
            self.runtime, api_url="http://api.invalid", mcp_url="http://mcp.invalid/mcp"
        )

    def close(self) -> None:
        self._servers.close()
        self.runtime.engine.dispose()


class ModuleHosts:
    """A test module's hosts, one per backend and settings combination, all kept until the
    module ends (tests of both backends alternate, so none is worth stopping early)."""

    def __init__(self, root: Path, sqlite_template: Path) -> None:
        self._root = root
        self._sqlite_template = sqlite_template
        self._hosts: dict[str, ModuleHost] = {}
        self._postgres: list[tuple[PostgresPool, str]] = []

    def host(
        self, backend: str, overrides: dict[str, Any], request: pytest.FixtureRequest
    ) -> ModuleHost:
        key = json.dumps([backend, overrides], sort_keys=True, default=str)
        if key not in self._hosts:
            root = self._root / f"host-{len(self._hosts)}-{backend}"
            settings = Settings(
                state_dir=root / "state",
                database_url=self._database(backend, root, request),
                **overrides,
            )
            self._hosts[key] = ModuleHost(settings)
        return self._hosts[key]

    def close(self) -> None:
        for host in self._hosts.values():
            host.close()
        self._hosts.clear()
        for pool, url in self._postgres:
            pool.release(url)
        self._postgres.clear()

    def _database(self, backend: str, root: Path, request: pytest.FixtureRequest) -> str:
        if backend == "sqlite":
            return sqlite_copy(self._sqlite_template, root / "draftgate.db")
        if backend != "postgresql":
            raise ValueError(f"unknown backend {backend!r}")
        pool: PostgresPool = request.getfixturevalue("postgres_pool")
        url = pool.acquire()
        self._postgres.append((pool, url))
        return url


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
    def backend(request: pytest.FixtureRequest) -> str:
        """SQLite, unless the test is marked ``@BOTH_BACKENDS``."""
        return str(getattr(request, "param", "sqlite"))

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

    return mcp_hosts, backend, module_host, demo, runtime, mcp_url
