"""Shared fixtures: real SQLite and PostgreSQL databases built by Alembic, the demo tenant,
real servers, and the whole stack with a real Celery worker.

Speed comes from reuse, never from fakes: one migrated SQLite file per test process is
copied for each test; PostgreSQL databases come from a per-process pool and are emptied
between tests; a stack (database, broker, API, MCP server, worker process) lives for a
test module and is reset, not rebuilt, between its tests.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from service.config import Settings
from service.db import make_engine, session_scope
from service.demo import seed_demo
from service.runtime import Runtime, build_runtime
from tests.support import services
from tests.support.databases import PostgresPool, migrated_sqlite, sqlite_copy
from tests.support.servers import free_port, serve
from tests.support.stacks import Stack, StackHost

BACKENDS = ["sqlite", "postgresql"]
STACKS = ["embedded", "production"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- databases ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite file per test process; tests get copies."""
    return migrated_sqlite(tmp_path_factory.mktemp("sqlite-template") / "draftgate.db")


@pytest.fixture
def sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    return sqlite_copy(sqlite_template, tmp_path / "draftgate.db")


@pytest.fixture
def sqlite_engine(sqlite_url: str) -> Iterator[Engine]:
    """An engine on a fresh copy of the migrated SQLite database."""
    engine = make_engine(sqlite_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def postgres_pool() -> Iterator[PostgresPool]:
    problem = services.reachable(services.POSTGRES_URL, 5432)
    if problem:
        services.unavailable("PostgreSQL", problem)
    pool = PostgresPool()
    yield pool
    pool.close()


@pytest.fixture
def postgres_url(postgres_pool: PostgresPool) -> Iterator[str]:
    """An empty, migrated PostgreSQL database of this test's own (emptied again afterwards)."""
    url = postgres_pool.acquire()
    yield url
    postgres_pool.release(url)


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest) -> str:
    """A freshly migrated database; tests using it run once per backend.

    Use it only where the backend's semantics matter (locking, concurrency, SQL); a module
    whose behaviour does not depend on the database overrides ``db_url`` with a fixture of
    its own that returns ``sqlite_url``.
    """
    fixture = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    return str(request.getfixturevalue(fixture))


# --- one runtime on one database ------------------------------------------------------------


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    """Override in a test module to change settings for its runtime."""
    return {}


@pytest.fixture
def settings(tmp_path: Path, db_url: str, settings_overrides: dict[str, Any]) -> Settings:
    return Settings(state_dir=tmp_path / "state", database_url=db_url, **settings_overrides)


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    runtime = build_runtime(settings)
    yield runtime
    runtime.engine.dispose()


@pytest.fixture
def demo(runtime: Runtime) -> dict[str, Any]:
    """The demo tenant seeded into the test database; returns its manifest."""
    with session_scope(runtime.engine) as session:
        return seed_demo(
            session,
            tenant="demo",
            state_dir=runtime.settings.state_dir,
            api_url="http://api.invalid",
            mcp_url="http://mcp.invalid/mcp",
        )


@pytest.fixture
def unreachable_runtime(tmp_path: Path) -> Iterator[Runtime]:
    """A runtime whose PostgreSQL is away: a port nothing listens on refuses every
    connection at once (what the doors meet during a restart or a failover)."""
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/gone?connect_timeout=2"
    runtime = build_runtime(Settings(state_dir=tmp_path / "state", database_url=url))
    yield runtime
    runtime.engine.dispose()


@pytest.fixture
def mcp_url(runtime: Runtime, demo: dict[str, Any]) -> Iterator[str]:
    """A real MCP server over streamable HTTP on a free port (the demo is seeded first)."""
    from mcp_adapter.server import create_http_app

    with serve(create_http_app(runtime)) as base:
        yield base + "/mcp"


# --- the whole stack: database + broker + API + MCP + a real Celery worker -----------------


class StackHosts:
    """A test module's stacks: one database and queue per kind for the whole module, and
    the live stack for the current settings (a new combination replaces the previous one,
    so at most one stack worker per test process is up at a time)."""

    def __init__(self, root: Path, sqlite_template: Path) -> None:
        self._root = root
        self._sqlite_template = sqlite_template
        self._databases: dict[str, str] = {}
        self._pool: PostgresPool | None = None
        self._queue = f"test-{secrets.token_hex(6)}"
        self._current: tuple[str, StackHost] | None = None

    def settings(
        self, kind: str, overrides: dict[str, Any], request: pytest.FixtureRequest
    ) -> Settings:
        root = self._root / kind
        if kind == "embedded":
            database_url = self._database(
                kind, lambda: sqlite_copy(self._sqlite_template, root / "draftgate.db")
            )
            broker_url = f"sqla+sqlite:///{root / 'broker.db'}"
        else:
            database_url = self._database(kind, lambda: self._postgres(request))
            problem = services.reachable(services.REDIS_URL, 6379)
            if problem:
                services.unavailable("Redis", problem)
            broker_url = services.REDIS_URL.rstrip("/") + "/0"
        values: dict[str, Any] = {
            "state_dir": root / "state",
            "database_url": database_url,
            "broker_url": broker_url,
            # Every module has its own queue, so parallel tests never take each other's tasks.
            "broker_queue": f"{self._queue}-{kind}",
            "execution_retry_base_seconds": 0.5,
            "execution_retry_max_seconds": 2.0,
            **overrides,
        }
        return Settings(**values)

    def host(self, settings: Settings) -> StackHost:
        key = json.dumps(settings.model_dump(mode="json"), sort_keys=True)
        if self._current is not None and self._current[0] == key:
            return self._current[1]
        self._stop_current()
        host = StackHost(settings)
        self._current = (key, host)
        return host

    def close(self) -> None:
        self._stop_current()
        if self._pool is not None:
            self._pool.release(self._databases["production"])

    def _stop_current(self) -> None:
        if self._current is not None:
            self._current[1].close()
            self._current = None

    def _database(self, kind: str, make: Any) -> str:
        if kind not in self._databases:
            self._databases[kind] = make()
        return self._databases[kind]

    def _postgres(self, request: pytest.FixtureRequest) -> str:
        self._pool = request.getfixturevalue("postgres_pool")
        return self._pool.acquire()


@pytest.fixture(scope="module")
def stack_hosts(
    tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
) -> Iterator[StackHosts]:
    hosts = StackHosts(tmp_path_factory.mktemp("stacks"), sqlite_template)
    yield hosts
    hosts.close()


@pytest.fixture(params=STACKS)
def stack_settings(
    request: pytest.FixtureRequest, settings_overrides: dict[str, Any], stack_hosts: StackHosts
) -> Settings:
    """Embedded: SQLite + kombu's SQLite broker. Production: PostgreSQL + Redis.

    The database, broker queue and state dir belong to the test module; each test starts
    on them emptied and freshly seeded (see ``stack``)."""
    return stack_hosts.settings(str(request.param), settings_overrides, request)


@pytest.fixture
def stack(stack_settings: Settings, stack_hosts: StackHosts) -> Stack:
    """Everything running for real, emptied and re-seeded for this test; the worker can be
    stopped, killed and restarted by tests (a worker a test took down is restarted for the
    next one)."""
    return stack_hosts.host(stack_settings).fresh()
