"""The console's server side, in-process against the real app (httpx.ASGITransport), on
SQLite and, where the database decides, PostgreSQL; live streams against a real uvicorn."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from anyio.from_thread import start_blocking_portal

from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.db import session_scope
from service.demo import seed_demo
from tests.service.console.console import CONSOLE_ORIGIN
from tests.support.api_client import _PortalTransport


@pytest.fixture
def app(runtime, demo) -> Any:
    return create_app(runtime)


@pytest.fixture
def browser(app) -> Iterator[httpx.Client]:
    """A client of the console at http://127.0.0.1:8000, keeping cookies like a browser."""
    with (
        start_blocking_portal("asyncio") as portal,
        httpx.Client(
            transport=_PortalTransport(app, portal), base_url=CONSOLE_ORIGIN, timeout=60
        ) as client,
    ):
        yield client


@pytest.fixture
def door(runtime, demo) -> ToolDoor:
    """The demo agent (support-agent acting for cust-ada), calling tools as over MCP."""
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


@pytest.fixture
def acme(runtime, demo, tmp_path) -> dict[str, Any]:
    """A second tenant, seeded like the demo one; its manifest."""
    with session_scope(runtime.engine) as session:
        manifest: dict[str, Any] = seed_demo(
            session,
            tenant="acme",
            state_dir=tmp_path / "acme",
            api_url="http://api.invalid",
            mcp_url="http://mcp.invalid/mcp",
        )
    return manifest
