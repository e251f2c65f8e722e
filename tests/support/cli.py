"""The ``draftgate`` command in this process, and a real API server kept for a test module.

Starting ``draftgate`` as a subprocess costs seconds of imports; typer's ``CliRunner`` runs
the same command objects with the same argument parsing, exit codes and separate
stdout/stderr in milliseconds. A few subprocess tests still prove the installed entry
point (tests/service/cli/test_entry_point.py).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.types import ASGIApp, Receive, Scope, Send
from typer.testing import CliRunner, Result

from harness.databases import fresh_demo
from harness.deployment import Deployment
from service.cli import app
from service.config import Settings, get_settings
from service.runtime import Runtime
from tests.support.stacks import ModuleDatabases


def run(*args: str, env: Mapping[str, str] | None = None, input: str | None = None) -> Result:
    """``draftgate *args`` with ``env`` as its only DRAFTGATE_* variables, as a shell runs it.

    The settings are read from the environment once per process (``get_settings`` is
    cached), so the cache is cleared around the call. An exception escaping the command
    fails the test, as the traceback it would print should.
    """
    overrides: dict[str, str | None] = {k: None for k in os.environ if k.startswith("DRAFTGATE_")}
    overrides.update(env or {})
    get_settings.cache_clear()
    try:
        return CliRunner().invoke(
            app, list(args), env=overrides, input=input, catch_exceptions=False
        )
    finally:
        get_settings.cache_clear()


def operator_env(runtime: Runtime, **extra: str) -> dict[str, str]:
    """What an operator with database access sets to work on ``runtime``'s database."""
    return {
        "DRAFTGATE_DATABASE_URL": runtime.settings.resolved_database_url(),
        "DRAFTGATE_STATE_DIR": str(runtime.settings.state_dir),
        **extra,
    }


# --- one API server per test module ---------------------------------------------------------


class InFlight:
    """Counts the HTTP calls an app is still running, background tasks included (they run
    after the response is sent), so a database is emptied only once nothing writes to it."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._calls = 0
        self._idle = threading.Condition()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        with self._idle:
            self._calls += 1
        try:
            await self._app(scope, receive, send)
        finally:
            with self._idle:
                self._calls -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float = 20) -> None:
        with self._idle:
            if not self._idle.wait_for(lambda: self._calls == 0, timeout):
                raise RuntimeError(f"the API still runs {self._calls} calls after {timeout}s")


@dataclass(frozen=True)
class Served:
    runtime: Runtime
    demo: dict[str, Any]
    url: str


class ApiHost:
    """A real API server on one database; each test gets it emptied and the demo seeded again
    (with no checkpoint key yet), which costs a fraction of starting a server."""

    def __init__(self, settings: Settings) -> None:
        self.deployment = Deployment(settings)
        self.runtime = self.deployment.runtime
        self._app: InFlight | None = None
        self.url = self.deployment.serve_api(wrap=self._count_in_flight)

    def _count_in_flight(self, app: ASGIApp) -> InFlight:
        self._app = InFlight(app)
        return self._app

    def fresh(self) -> Served:
        assert self._app is not None
        self._app.wait_idle()
        self.runtime.settings.resolved_checkpoint_key_file().unlink(missing_ok=True)
        return Served(self.runtime, fresh_demo(self.runtime), self.url)

    def close(self) -> None:
        if self._app is not None:
            self._app.wait_idle()
        self.deployment.close()


class ApiHosts:
    """A test module's API servers, one per backend, started when a test first needs it."""

    def __init__(self, root: Path, sqlite_template: Path) -> None:
        self._root = root
        self._databases = ModuleDatabases(sqlite_template)
        self._hosts: dict[str, ApiHost] = {}

    def fresh(self, backend: str, request: pytest.FixtureRequest) -> Served:
        if backend not in self._hosts:
            self._hosts[backend] = ApiHost(self._settings(backend, request))
        return self._hosts[backend].fresh()

    def close(self) -> None:
        for host in self._hosts.values():
            host.close()
        self._hosts.clear()
        self._databases.close()

    def _settings(self, backend: str, request: pytest.FixtureRequest) -> Settings:
        root = self._root / backend
        return Settings(
            state_dir=root / "state",
            database_url=self._databases.new(backend, root, request),
            # Kept apart from the state dir, as an operator keeps it.
            checkpoint_key_file=root / "secrets" / "checkpoint-key.pem",
        )


@contextmanager
def api_hosts(
    tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
) -> Iterator[ApiHosts]:
    hosts = ApiHosts(tmp_path_factory.mktemp("api"), sqlite_template)
    try:
        yield hosts
    finally:
        hosts.close()
