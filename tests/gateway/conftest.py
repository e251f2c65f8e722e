"""The real upstream systems the gateway tests run against (see tests/gateway/upstreams/).

- ``upstream_mcp_http``: the ticket-desk MCP server in its own process, over streamable
  HTTP (``.mcp_url``), with its ledger (``.ledger``); stopped after the test.
- ``desk``: the same, one for the module, for tests that only read its catalogue or call
  its reads.
- ``upstream_mcp_stdio_command``: the same server as a stdio command line for a gateway
  file (``.command``, ``.args``, ``.env``, ``.gateway_entry(namespace, tools)``), and the
  ledger its children write to.
- ``upstream_http``: the billing REST API under uvicorn (``.base_url``, ``.openapi_url``,
  ``.ledger``, ``.headers()``), honouring ``Idempotency-Key``.
- ``memory_server_command``: npm's ``@modelcontextprotocol/server-memory`` (pinned in
  tests/gateway/upstreams/package-lock.json, ``npm ci`` on first use) as a stdio command
  line behind a recording tap (``.command``, ``.args``, ``.env``, ``.data_file``,
  ``.gateway_entry(...)``, ``.tool_calls(tool)``: the requests that reached it).
  Skips without Node, unless DRAFTGATE_REQUIRE_SERVICES=1.

Override ``upstream_mcp_options`` (``slow_seconds``, ``flaky_failures``, ``schema_version``)
or ``upstream_http_options`` (``transient_failures``, ``token``) in a module to change
a server's options. Module-scoped uses call the helpers of upstreams/processes.py directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.gateway.mcp_client import pool
from tests.gateway.upstreams.processes import (
    HttpService,
    NodeCommand,
    StdioCommand,
    UpstreamProcess,
    serve_http_service,
    start_mcp_http,
    stdio_command,
)
from tests.gateway.upstreams.processes import (
    memory_server_command as memory_command,
)


@pytest.fixture
def upstream_mcp_options() -> dict[str, Any]:
    """Override in a test module: options of the ticket-desk MCP server."""
    return {}


@pytest.fixture
def upstream_mcp_http(
    tmp_path: Path, upstream_mcp_options: dict[str, Any]
) -> Iterator[UpstreamProcess]:
    upstream = start_mcp_http(tmp_path / "upstream-mcp", **upstream_mcp_options)
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamProcess]:
    upstream = start_mcp_http(tmp_path_factory.mktemp("desk"))
    yield upstream
    pool().close()  # before the upstream stops: an open stream would keep it waiting
    upstream.stop()


@pytest.fixture
def upstream_mcp_stdio_command(
    tmp_path: Path, upstream_mcp_options: dict[str, Any]
) -> StdioCommand:
    return stdio_command(tmp_path / "upstream-mcp-stdio", **upstream_mcp_options)


@pytest.fixture
def upstream_http_options() -> dict[str, Any]:
    """Override in a test module: options of the billing HTTP service."""
    return {}


@pytest.fixture
def upstream_http(tmp_path: Path, upstream_http_options: dict[str, Any]) -> Iterator[HttpService]:
    with serve_http_service(tmp_path / "upstream-http", **upstream_http_options) as service:
        yield service


@pytest.fixture
def memory_server_command(tmp_path: Path) -> NodeCommand:
    return memory_command(tmp_path / "memory-server")
