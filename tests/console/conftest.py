"""The console in a real browser: Debian's Chromium driven by Playwright, on the real stack.

One Chromium per test module (starting it costs a second), one fresh browser context per
test (its own cookies and IndexedDB, so a test's session or key never leaks into the next).
The stack is the embedded one (SQLite + kombu's SQLite broker, what ``draftgate dev`` runs):
what the browser does is the same on either backend, and the backends themselves are proved
by the API and worker tests.

The console is served at ``http://localhost:<port>``, and ``api_public_url`` says so before
the API starts (the stack serves an API whose public URL names localhost at that port):
WebAuthn refuses IP addresses as relying party IDs, and passkeys (and the console's origin
checks) are bound to that public origin.

Playwright's own browser download is not reachable here: the executable is
``DRAFTGATE_CHROMIUM``, else ``chromium`` on the PATH; without one the tests skip, unless
``DRAFTGATE_REQUIRE_SERVICES=1`` (CI), where they fail.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from harness.servers import free_port
from tests.support import services
from tests.support.stacks import Stack


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


@pytest.fixture(scope="module")
def console_origin() -> str:
    """Where this module's console is served (localhost: a valid WebAuthn RP ID)."""
    return f"http://localhost:{free_port()}"


@pytest.fixture
def settings_overrides(console_origin: str) -> dict[str, Any]:
    return {"api_public_url": console_origin}


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
