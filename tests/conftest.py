"""Shared fixtures: real SQLite and PostgreSQL databases built by Alembic, the demo tenant,
and a real MCP server over streamable HTTP."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from service.config import Settings
from service.db import make_engine, session_scope
from service.demo import seed_demo
from service.migrate import upgrade
from service.runtime import Runtime, build_runtime
from tests.support import services
from tests.support.servers import serve
from tests.support.workers import WorkerProcess, celery_worker

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """One migrated database per test process; each test copies it (fast, isolated)."""
    problem = services.reachable(services.POSTGRES_URL, 5432)
    if problem:
        services.unavailable("PostgreSQL", problem)
    name = services.create_database()
    url = services.with_database(services.POSTGRES_URL, name)
    upgrade(url)
    make_engine(url).dispose()
    yield name
    services.drop_database(name)


@pytest.fixture
def postgres_url(postgres_template: str) -> Iterator[str]:
    name = services.create_database(template=postgres_template)
    yield services.with_database(services.POSTGRES_URL, name)
    services.drop_database(name)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'draftgate.db'}"
    upgrade(url)
    return url


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest) -> str:
    """A freshly migrated database; tests using it run once per backend."""
    fixture = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    return str(request.getfixturevalue(fixture))


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
def mcp_url(runtime: Runtime, demo: dict[str, Any]) -> Iterator[str]:
    """A real MCP server over streamable HTTP on a free port (the demo is seeded first)."""
    from mcp_adapter.server import create_http_app

    with serve(create_http_app(runtime)) as base:
        yield base + "/mcp"


# --- the whole stack: database + broker + API + MCP + a real Celery worker -----------------

STACKS = ["embedded", "production"]


@pytest.fixture(params=STACKS)
def stack_settings(
    request: pytest.FixtureRequest, tmp_path: Path, settings_overrides: dict[str, Any]
) -> Settings:
    """Embedded: SQLite + kombu's SQLite broker. Production: PostgreSQL + Redis."""
    if request.param == "embedded":
        database_url = str(request.getfixturevalue("sqlite_url"))
        broker_url = f"sqla+sqlite:///{tmp_path / 'broker.db'}"
    else:
        database_url = str(request.getfixturevalue("postgres_url"))
        problem = services.reachable(services.REDIS_URL, 6379)
        if problem:
            services.unavailable("Redis", problem)
        broker_url = services.REDIS_URL.rstrip("/") + "/0"
    values: dict[str, Any] = {
        "state_dir": tmp_path / "state",
        "database_url": database_url,
        "broker_url": broker_url,
        # Every test has its own queue, so parallel tests never take each other's tasks.
        "broker_queue": f"test-{secrets.token_hex(6)}",
        "execution_retry_base_seconds": 0.5,
        "execution_retry_max_seconds": 2.0,
        **settings_overrides,
    }
    return Settings(**values)


@dataclass
class Stack:
    settings: Settings
    runtime: Runtime
    demo: dict[str, Any]
    api_url: str
    mcp_url: str
    worker: WorkerProcess | None
    log_dir: Path


@pytest.fixture
def stack(stack_settings: Settings, tmp_path: Path) -> Iterator[Stack]:
    """Everything running for real; the worker can be stopped, killed and restarted by tests."""
    from mcp_adapter.server import create_http_app
    from service.api.app import create_app

    runtime = build_runtime(stack_settings)
    with session_scope(runtime.engine) as session:
        manifest = seed_demo(
            session,
            tenant="demo",
            state_dir=stack_settings.state_dir,
            api_url="http://api.invalid",
            mcp_url="http://mcp.invalid/mcp",
        )
    with (
        serve(create_app(runtime)) as api_url,
        serve(create_http_app(runtime)) as mcp_base,
        celery_worker(stack_settings, tmp_path / "logs" / "worker.log") as worker,
    ):
        manifest.update(api_url=api_url, mcp_url=mcp_base + "/mcp")
        yield Stack(
            stack_settings, runtime, manifest, api_url, mcp_base + "/mcp", worker, tmp_path / "logs"
        )
    runtime.engine.dispose()
