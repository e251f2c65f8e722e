"""The MCP server factory: tools from the registry, auth from our tokens."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from mcp.server import MCPServer
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.types import ASGIApp

from mcp_adapter.auth import AuditMissingCredentials, DraftgateTokenVerifier
from mcp_adapter.tools import ToolDoor, build_tools
from service.runtime import Runtime

INSTRUCTIONS = (
    "draftgate lets you read a shop's orders and PROPOSE changes. Reads answer immediately. "
    "Every change (refund, cancellation, address change) is only a proposal: propose_* records a "
    "draft that a human must approve before anything happens. Tell the user that; then use "
    "get_draft to follow the draft. Errors are JSON objects with code, message, retryable and "
    "suggested_action: follow suggested_action."
)


def create_mcp_server(runtime: Runtime, *, stdio_token: str | None = None) -> MCPServer:
    """An MCPServer offering the registry's tools. Over HTTP it authenticates with our tokens;
    over stdio every call is made with ``stdio_token``."""
    door = ToolDoor(runtime, stdio_token=stdio_token)
    over_http = stdio_token is None
    public = urlsplit(runtime.settings.mcp_public_url)
    return MCPServer(
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
    return AuditMissingCredentials(app, runtime)
