"""The console in a real browser: Debian's Chromium driven by Playwright, on the real stack.

One Chromium per test module (starting it costs a second), one fresh browser context per
test (its own cookies and IndexedDB, so a test's session or key never leaks into the next).
The stack's kind is a module-scoped parameter, as in tests/workers/conftest.py: pytest runs
a module's tests on the production stack (PostgreSQL + Redis), then on the embedded one
(SQLite), each group on one set of processes.

The console is served at ``http://localhost:<port>``, and ``api_public_url`` says so before
the API starts: WebAuthn refuses IP addresses as relying party IDs, and passkeys (and the
console's origin checks) are bound to that public origin.

Playwright's own browser download is not reachable here: the executable is
``DRAFTGATE_CHROMIUM``, else ``chromium`` on the PATH; without one the tests skip, unless
``DRAFTGATE_REQUIRE_SERVICES=1`` (CI), where they fail.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from service.config import Settings
from tests.conftest import StackHosts
from tests.support import services
from tests.support.servers import free_port, serve
from tests.support.stacks import Stack, StackHost

KINDS = ["production", "embedded"]


def chromium_executable() -> str | None:
    configured = os.environ.get("DRAFTGATE_CHROMIUM")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_executable()
    if executable is None:
        services.unavailable(
            "Chromium", "no executable: set DRAFTGATE_CHROMIUM or install Debian's chromium"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


class ConsoleHost(StackHost):
    """conftest's StackHost, with the API served at the port ``api_public_url`` names
    (StackHost itself picks a free port once it starts, too late for the settings)."""

    def __init__(self, settings: Settings) -> None:
        from mcp_adapter.server import create_http_app
        from service.api.app import create_app
        from service.runtime import build_runtime

        self.settings = settings
        self.log_dir = settings.state_dir.parent / "logs"
        self.runtime = build_runtime(settings)
        self._servers = ExitStack()
        port = urlsplit(settings.api_public_url).port
        self._servers.enter_context(serve(create_app(self.runtime), port=port))
        self.api_url = settings.api_public_url
        self.mcp_url = self._servers.enter_context(serve(create_http_app(self.runtime))) + "/mcp"
        self.worker = None


class ConsoleHosts(StackHosts):
    def host(self, settings: Settings) -> StackHost:
        key = settings.model_dump_json()
        if self._current is not None and self._current[0] == key:
            return self._current[1]
        self._stop_current()
        host = ConsoleHost(settings)
        self._current = (key, host)
        return host


@pytest.fixture(scope="module")
def stack_hosts(
    tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
) -> Iterator[StackHosts]:
    hosts = ConsoleHosts(tmp_path_factory.mktemp("stacks"), sqlite_template)
    yield hosts
    hosts.close()


@pytest.fixture(scope="module")
def console_origin() -> str:
    """Where this module's console is served (localhost: a valid WebAuthn RP ID)."""
    return f"http://localhost:{free_port()}"


@pytest.fixture
def settings_overrides(console_origin: str) -> dict[str, Any]:
    return {"api_public_url": console_origin}


# The same pair as tests/workers/conftest.py (and two more modules): a candidate for
# tests/support.
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
def new_context(browser: Any, stack: Stack) -> Iterator[Any]:
    """Make browser contexts on the stack's API origin; all are closed when the test ends."""
    contexts: list[Any] = []

    def make(**options: Any) -> Any:
        context = browser.new_context(base_url=stack.api_url, **options)
        context.set_default_timeout(30_000)
        contexts.append(context)
        return context

    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def page(new_context: Any) -> Any:
    return new_context().new_page()
