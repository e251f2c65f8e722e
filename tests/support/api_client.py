"""The HTTP API in-process, for the API and audit tests: the real FastAPI app, no socket.

``in_process(app)`` is an ``httpx.Client`` whose transport is ``httpx.ASGITransport``: every
request goes through the whole ASGI application (routing, dependencies, the unit of work,
error handlers, serialisation) on an event loop of its own thread, as under a server, but
without starting uvicorn or opening a connection. An exception the app does not handle is
raised in the test (with its traceback) instead of becoming a logged 500.

``served(app)`` is the same client interface against a real uvicorn server, for the few tests
that prove the real wiring (HTTP parsing, streaming over a socket).

Tests run on SQLite; those whose behaviour depends on the database are marked
``both_backends`` (tests/support/backends.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from anyio.from_thread import BlockingPortal, start_blocking_portal
from starlette.types import ASGIApp

from harness.servers import serve

BASE_URL = "http://testserver"


class _PortalTransport(httpx.BaseTransport):
    """A synchronous transport over ``httpx.ASGITransport``: each request is run to completion
    on the portal's event loop and its whole body read there."""

    def __init__(self, app: ASGIApp, portal: BlockingPortal) -> None:
        self._asgi = httpx.ASGITransport(app=app)
        self._portal = portal

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        status, headers, content = self._portal.call(self._round_trip, request)
        return httpx.Response(status, headers=headers, content=content, request=request)

    async def _round_trip(self, request: httpx.Request) -> tuple[int, Any, bytes]:
        response = await self._asgi.handle_async_request(request)
        try:
            content = await response.aread()
        finally:
            await response.aclose()
        return response.status_code, response.headers.raw, content


@contextmanager
def in_process(app: ASGIApp) -> Iterator[httpx.Client]:
    """A client of ``app`` through ``httpx.ASGITransport`` (base URL ``http://testserver``)."""
    with (
        start_blocking_portal("asyncio") as portal,
        httpx.Client(
            transport=_PortalTransport(app, portal), base_url=BASE_URL, timeout=60
        ) as client,
    ):
        yield client


@contextmanager
def served(app: ASGIApp) -> Iterator[httpx.Client]:
    """A client of ``app`` served by a real uvicorn server on a free loopback port."""
    with serve(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def get_draft(client: httpx.Client, token: str, draft_id: str) -> dict[str, Any]:
    """GET /v1/drafts/{id} as ``token``; the draft, or the test fails."""
    response = client.get(f"/v1/drafts/{draft_id}", headers=bearer(token))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body
