"""The MCP server factory: the SDK's low-level server, tools from the registry, our tokens."""

from __future__ import annotations

from urllib.parse import urlsplit

from mcp.server.auth.settings import AuthSettings
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from mcp_adapter.auth import (
    CredentialAudit,
    DraftgateTokenVerifier,
    protected_resource_routes,
    refuser,
)
from mcp_adapter.drafts import TASKS_EXTENSION, DraftMethods, TaskIdParams, UpdateTaskParams
from mcp_adapter.health import readyz_route
from mcp_adapter.metrics import metrics_route
from mcp_adapter.push import DraftHub, ListenDoor
from mcp_adapter.tools import ToolDoor, ToolHandlers, draft_tools, mcp_tools
from service.db import unavailable
from service.guards import AddressLimit, BodyLimit, Outage
from service.registry.loader import exposed_name
from service.runtime import Runtime
from service.telemetry import known_tools, observe_asgi

INSTRUCTIONS = (
    "draftgate lets you read the systems it gates (a shop's orders, and whatever its gateway "
    "puts behind it) and PROPOSE changes to them. Reads answer immediately. Every change is "
    "only a proposal: each propose_* tool ({proposals}) records a draft that a human must "
    "approve before anything happens. Tell the user that; then use get_draft to follow the "
    "draft. Errors are JSON objects with code, message, retryable and suggested_action: follow "
    "suggested_action. Each draft is also a resource (draftgate://drafts/<draft_id>): "
    "subscribe to it instead of polling get_draft."
)
MAX_NAMED = 12  # propose_* tools named in the instructions; the catalogue lists them all


def instructions(runtime: Runtime) -> str:
    """The server's instructions, naming what this deployment lets an agent propose: the
    shop's changes and every gated upstream's, by their tool names."""
    proposals = sorted(exposed_name(action) for action in runtime.registry.writes.values())
    named = ", ".join(proposals[:MAX_NAMED])
    more = f" and {len(proposals) - MAX_NAMED} more" if len(proposals) > MAX_NAMED else ""
    return INSTRUCTIONS.format(proposals=named + more)


VERSION = "0.1.0"


def create_mcp_server(runtime: Runtime, *, stdio_token: str | None = None) -> Server:
    """A low-level MCP server offering the registry's tools. Over HTTP it authenticates with
    our tokens (see ``create_http_app``); over stdio every call is made with ``stdio_token``."""
    door = ToolDoor(runtime, stdio_token=stdio_token)
    handlers = ToolHandlers(door, mcp_tools(runtime), draft_tools(runtime))
    known_tools(tool.name for tool in handlers.tools)  # span names: ours only (telemetry)
    drafts = DraftMethods(door)
    server = Server(
        "draftgate",
        version=VERSION,
        title="draftgate",
        instructions=instructions(runtime),
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
        get_tool_input_schema=handlers.input_schema_of,
        on_list_resources=drafts.list_resources,
        on_list_resource_templates=drafts.list_resource_templates,
        on_read_resource=drafts.read_resource,
        on_subscriptions_listen=ListenDoor(drafts, DraftHub(runtime)),
    )
    # The tasks extension (MCP 2026-07-28): a proposal is a task for clients that declare it.
    server.add_request_handler("tasks/get", TaskIdParams, drafts.get_task)
    server.add_request_handler("tasks/cancel", TaskIdParams, drafts.cancel_task)
    server.add_request_handler("tasks/update", UpdateTaskParams, drafts.update_task)
    server.extensions[TASKS_EXTENSION] = {}
    return server


async def run_stdio(runtime: Runtime, token: str) -> None:
    """Serve one agent over stdin/stdout, every call authenticated with ``token``."""
    server = create_mcp_server(runtime, stdio_token=token)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def _healthz(_: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


def create_http_app(runtime: Runtime) -> ASGIApp:
    """The streamable-HTTP app at ``/mcp`` plus ``/healthz`` and the RFC 9728 metadata;
    refused credentials are audited."""
    settings = runtime.settings
    public = urlsplit(settings.mcp_public_url)
    app = create_mcp_server(runtime).streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,  # every call carries its own credentials; nothing to pin to a replica
        json_response=True,
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=bool(settings.mcp_allowed_hosts),
            allowed_hosts=settings.mcp_allowed_hosts,
            allowed_origins=settings.mcp_allowed_origins,
        ),
        # No resource_server_url: the SDK would publish metadata naming this server as its own
        # authorization server; the door publishes its own (mcp_adapter.auth).
        auth=AuthSettings(
            issuer_url=f"{public.scheme}://{public.netloc}", resource_server_url=None
        ),
        token_verifier=DraftgateTokenVerifier(runtime),
        custom_starlette_routes=[
            Route("/healthz", _healthz),
            readyz_route(runtime),
            metrics_route(runtime),
            *protected_resource_routes(settings),
        ],
    )
    # Bodies are bounded in size and depth before the SDK reads them (its own limits answer
    # in plain text or as a parse error and leave no audit record). The depth bound only
    # keeps pathological documents from the parser: arguments a little too deep still reach
    # the core, whose refusal is a tool error the model can read.
    refuse = refuser(runtime)
    bounded = BodyLimit(
        CredentialAudit(app, runtime),
        max_bytes=settings.max_request_bytes,
        max_json_depth=MAX_BODY_DEPTH,
        refuse=refuse,
    )
    limited = AddressLimit(bounded, limiter=runtime.limiter, refuse=refuse)
    return observe_asgi(Outage(limited, unavailable=unavailable))  # trace bound, spans


# Deep enough that arguments far too deep for the core (max_argument_depth) still reach it
# and get a tool error the model can read; shallow enough for the SDK's JSON-RPC parser
# (pydantic-core gives up near 200 levels, which the client would only see as -32603).
MAX_BODY_DEPTH = 128
