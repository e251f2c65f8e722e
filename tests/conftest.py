"""Shared fixtures: real SQLite and PostgreSQL databases built by Alembic, the demo tenant,
real servers, and the whole stack with a real Celery worker.

Speed comes from reuse, never from fakes: one migrated SQLite file per test process is
copied for each test; PostgreSQL databases come from a per-process pool and are emptied
between tests; a stack (database, broker, API, MCP server, worker process) lives for a
test module and is reset, not rebuilt, between its tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from harness.databases import NOWHERE, PostgresPool, migrated_sqlite, seed, sqlite_copy
from harness.deployment import Deployment
from harness.servers import free_port
from harness.services import POSTGRES_URL
from service.config import Settings
from service.db import make_engine
from service.runtime import Runtime, build_runtime
from tests.support import backends, lanes, services
from tests.support.stacks import Stack, StackHost, StackHosts


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
    services.require("PostgreSQL", POSTGRES_URL, 5432)
    pool = PostgresPool()
    yield pool
    pool.close()


@pytest.fixture
def postgres_url(postgres_pool: PostgresPool) -> Iterator[str]:
    """An empty, migrated PostgreSQL database of this test's own (emptied again afterwards)."""
    url = postgres_pool.acquire()
    yield url
    postgres_pool.release(url)


@pytest.fixture(scope="module")
def backend(request: pytest.FixtureRequest) -> str:
    """``sqlite``, unless the test is parametrised (``both_backends``, ``postgresql_only``
    in tests/support/backends.py): the backend of ``db_url`` and of ``stack``."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest) -> str:
    """A freshly migrated database of this test's own on ``backend``."""
    if hasattr(request, "param"):  # it would be ignored: the test would run on SQLite
        raise pytest.UsageError("parametrise `backend` (tests/support/backends.py), not db_url")
    fixture = "sqlite_url" if backend == "sqlite" else "postgres_url"
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
    return seed(runtime, **NOWHERE)


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
    with Deployment(runtime.settings, runtime=runtime) as deployment:
        yield deployment.serve_mcp()


# --- the whole stack: database + broker + API + MCP + a real Celery worker -----------------


@pytest.fixture(scope="module")
def stack_hosts(
    tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
) -> Iterator[StackHosts]:
    hosts = StackHosts(tmp_path_factory.mktemp("stacks"), sqlite_template)
    yield hosts
    hosts.close()


@pytest.fixture
def stack_settings(
    request: pytest.FixtureRequest,
    backend: str,
    settings_overrides: dict[str, Any],
    stack_hosts: StackHosts,
) -> Settings:
    """Of the stack of ``backend``: SQLite + kombu's SQLite broker, or PostgreSQL + Redis.

    The database, broker queue and state dir belong to the test module; each test starts
    on them emptied and freshly seeded (see ``stack``)."""
    return stack_hosts.settings(backend, settings_overrides, request)


@pytest.fixture
def stack(stack_settings: Settings, stack_hosts: StackHosts) -> Stack:
    """Everything running for real, emptied and re-seeded for this test; the worker can be
    stopped, killed and restarted by tests (a worker a test took down is restarted for the
    next one)."""
    return stack_hosts.host(stack_settings).fresh()


@pytest.fixture
def stack_host(stack: Stack, stack_settings: Settings, stack_hosts: StackHosts) -> StackHost:
    """The processes behind this test's ``stack`` (see ``helpers.restart_worker``)."""
    return stack_hosts.host(stack_settings)


# --- lanes (docs/decisions/test-lanes.md) ---------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lane",
        choices=lanes.LANES,
        default="full",
        help="fast: leave out the tests marked full (./run test); full: every test selected "
        "(./run test --all, the default)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    backends.parametrize(metafunc)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    lanes.mark_full(items)
    lanes.mark_postgres(items)
    lane = config.getoption("lane")
    deselected = [item for item in items if not lanes.selected(item, lane)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if lanes.selected(item, lane)]
    lanes.order_for_xdist(items)
