"""The whole stack for tests, kept for a test module: database, broker, API, MCP server and
a real Celery worker, built by harness.Deployment.

A ``StackHost`` lives for a test module (starting a worker costs seconds); each test gets a
``Stack`` on the same processes with the database emptied and the demo seeded again, and
with the worker restarted if the previous test stopped or killed it. ``StackHosts`` are a
module's hosts: one database and queue per backend for the whole module, and the live host
for the current settings (a new combination replaces the previous one, so at most one
stack worker per test process is up at a time).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

from harness import services as harness_services
from harness.databases import PostgresPool, fresh_demo, sqlite_copy
from harness.deployment import Deployment
from harness.processes import WorkerProcess
from harness.settings import deployment_settings
from service.config import Settings
from service.runtime import Runtime
from tests.support import services


@dataclass
class Stack:
    settings: Settings
    runtime: Runtime
    demo: dict[str, Any]
    api_url: str
    mcp_url: str
    worker: WorkerProcess | None
    log_dir: Path


class StackHost:
    """One module's stack on one set of settings: the servers in threads of the test process,
    the worker a process of its own (started by the first ``fresh()``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.deployment = Deployment(settings)
        self.log_dir = self.deployment.log_dir
        self.runtime = self.deployment.runtime
        # A public URL on localhost is where the console is served (WebAuthn refuses an IP
        # address as the relying party): the API listens there. Anything else: a free port.
        public = urlsplit(settings.api_public_url)
        if public.hostname == "localhost":
            self.deployment.serve_api(port=public.port)
            self.api_url = settings.api_public_url  # the browser's origin, not 127.0.0.1
        else:
            self.api_url = self.deployment.serve_api()
        self.mcp_url = self.deployment.serve_mcp()
        self.worker: WorkerProcess | None = None

    def fresh(self) -> Stack:
        """This host's stack for one more test: empty database, fresh demo, a live worker."""
        if not self.settings.resolved_database_url().startswith("sqlite"):
            self._purge_queue()
        demo = fresh_demo(self.runtime, api_url=self.api_url, mcp_url=self.mcp_url)
        if self.worker is None or not self.worker.alive:
            self.start_worker()
        assert self.worker is not None
        self.worker.mark()
        return Stack(
            self.settings, self.runtime, demo, self.api_url, self.mcp_url, self.worker, self.log_dir
        )

    def start_worker(self) -> WorkerProcess:
        """The stack's worker (again, after a test stopped or killed it)."""
        assert self.worker is None or not self.worker.alive, "the stack's worker still runs"
        self.worker = self.deployment.start_worker(name="test")
        return self.worker

    def close(self) -> None:
        if self.worker is not None:
            self.worker.kill()  # nothing of a finished module is worth a warm shutdown
        self.deployment.close()

    def _purge_queue(self) -> None:
        client = redis.Redis.from_url(self.settings.resolved_broker_url())
        try:
            client.delete(self.settings.broker_queue)
        finally:
            client.close()


class ModuleDatabases:
    """A test module's databases: copies of the migrated SQLite template, or PostgreSQL ones
    from the test process's pool (given back, emptied, when the module ends)."""

    def __init__(self, sqlite_template: Path) -> None:
        self._sqlite_template = sqlite_template
        self._postgres: list[tuple[PostgresPool, str]] = []

    def new(self, backend: str, root: Path, request: pytest.FixtureRequest) -> str:
        if backend == "sqlite":
            return sqlite_copy(self._sqlite_template, root / "draftgate.db")
        if backend != "postgresql":
            raise ValueError(f"unknown backend {backend!r}")
        pool: PostgresPool = request.getfixturevalue("postgres_pool")
        url = pool.acquire()
        self._postgres.append((pool, url))
        return url

    def close(self) -> None:
        for pool, url in self._postgres:
            pool.release(url)
        self._postgres.clear()


# Retries in seconds rather than minutes: a test waits for them.
RETRY_SOON = {"execution_retry_base_seconds": 0.5, "execution_retry_max_seconds": 2.0}


class StackHosts:
    def __init__(self, root: Path, sqlite_template: Path) -> None:
        self._root = root
        self._databases = ModuleDatabases(sqlite_template)
        self._urls: dict[str, str] = {}  # one database per backend for the whole module
        self._queue = f"test-{secrets.token_hex(6)}"
        self._current: tuple[str, StackHost] | None = None

    def settings(
        self, backend: str, overrides: dict[str, Any], request: pytest.FixtureRequest
    ) -> Settings:
        if backend == "postgresql":
            services.require("Redis", harness_services.REDIS_URL, 6379)
        return deployment_settings(
            self._root / backend,
            database_url=self._database(backend, request),
            # Every module has its own queue, so parallel tests never take each other's tasks.
            queue=f"{self._queue}-{backend}",
            **{**RETRY_SOON, **overrides},
        )

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
        self._databases.close()

    def _stop_current(self) -> None:
        if self._current is not None:
            self._current[1].close()
            self._current = None

    def _database(self, backend: str, request: pytest.FixtureRequest) -> str:
        if backend not in self._urls:
            self._urls[backend] = self._databases.new(backend, self._root / backend, request)
        return self._urls[backend]
