"""A real MCP client over streamable HTTP, as an agent runtime would connect.

It negotiates as the SDK does by default (2026-07-28 against this server), or, with
``DRAFTGATE_TEST_MCP_MODE=legacy``, with the 2025-11-25 initialize handshake: the full lane
runs the MCP tests once more that way (tests/mcp_adapter/test_protocol_eras.py)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

MODE: Any = os.environ.get("DRAFTGATE_TEST_MCP_MODE", "auto")


@asynccontextmanager
async def connect(
    url: str, token: str | None, *, traceparent: str | None = None
) -> AsyncIterator[Client]:
    headers = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if traceparent is not None:
        headers["traceparent"] = traceparent
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
        Client(streamable_http_client(url, http_client=http), mode=MODE) as client,
    ):
        yield client


def error_of(result: CallToolResult) -> dict[str, Any]:
    """The structured error object of a failed call (its text is exactly that JSON)."""
    assert result.is_error, f"expected an error, got {result.structured_content}"
    text = result.content[0].text  # type: ignore[union-attr]
    parsed: dict[str, Any] = json.loads(text)
    return parsed
