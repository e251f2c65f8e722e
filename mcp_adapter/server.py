"""The MCP server factory: tools from the registry, auth from our tokens."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from mcp.server import MCPServer
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, InputRequiredResult
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.types import ASGIApp

from mcp_adapter.auth import CredentialAudit, DraftgateTokenVerifier
from mcp_adapter.tools import ToolDoor, build_tools, dispatch
from service.runtime import Runtime

INSTRUCTIONS = (
    "draftgate lets you read a shop's orders and PROPOSE changes. Reads answer immediately. "
    "Every change (refund, cancellation, address change) is only a proposal: propose_* records a "
    "draft that a human must approve before anything happens. Tell the user that; then use "
    "get_draft to follow the draft. Errors are JSON objects with code, message, retryable and "
    "suggested_action: follow suggested_action."
)


class DraftgateMCPServer(MCPServer):
    """MCPServer whose unknown tool names still reach the core.

    The SDK would answer "Unknown tool: refund" as bare text and nothing would be
    audited; an agent trying to call a write action directly is exactly what an
    auditor wants to see, so the core refuses it with a structured UNKNOWN_TOOL.
    """

    def __init__(self, door: ToolDoor, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._door = door
        self._names = {tool.name for tool in kwargs.get("tools") or []}

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Any = None
    ) -> CallToolResult | InputRequiredResult:
        if name not in self._names:
            return await dispatch(self._door, name, arguments, context)
        return await super().call_tool(name, arguments, context)


def create_mcp_server(runtime: Runtime, *, stdio_token: str | None = None) -> MCPServer:
    """An MCPServer offering the registry's tools. Over HTTP it authenticates with our tokens;
    over stdio every call is made with ``stdio_token``."""
    door = ToolDoor(runtime, stdio_token=stdio_token)
    over_http = stdio_token is None
    public = urlsplit(runtime.settings.mcp_public_url)
    return DraftgateMCPServer(
        door,
        name="draftgate",
        title="draftgate",
        instructions=INSTRUCTIONS,
        version="0.1.0",
        tools=build_tools(door),
        token_verifier=DraftgateTokenVerifier(runtime) if over_http else None,
        auth=(
            AuthSettings(
                issuer_url=f"{public.scheme}://{public.netloc}",
                resource_server_url=None,
            )
            if over_http
            else None
        ),
        log_level="WARNING",
    )


def create_http_app(runtime: Runtime) -> ASGIApp:
    """The streamable-HTTP app at ``/mcp`` plus ``/healthz``; refused credentials are audited."""
    server = create_mcp_server(runtime)
    settings = runtime.settings
    mcp_app = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,  # every call carries its own credentials; nothing to pin to a replica
        json_response=True,
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=bool(settings.mcp_allowed_hosts),
            allowed_hosts=settings.mcp_allowed_hosts,
            allowed_origins=settings.mcp_allowed_origins,
        ),
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    app = Starlette(routes=[Route("/healthz", healthz), Mount("/", app=mcp_app)], lifespan=lifespan)
    return CredentialAudit(app, runtime)
