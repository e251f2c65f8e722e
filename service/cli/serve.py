"""``draftgate serve`` and ``draftgate migrate``: run one component, as compose.yaml does."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from service.config import get_settings
from service.migrate import upgrade

app = typer.Typer(help="Run one component of the stack.", no_args_is_help=True)

HostOption = Annotated[str, typer.Option(help="Interface to bind.")]


def migrate() -> None:
    """Bring the database schema up to date (Alembic; the only way the schema changes)."""
    url = get_settings().resolved_database_url()
    upgrade(url)
    typer.echo("database schema is up to date")


@app.command("api")
def serve_api(host: HostOption = "127.0.0.1", port: int = 8000) -> None:
    """The approver/auditor HTTP API (OpenAPI at /docs)."""
    import uvicorn

    from service.api.app import create_app

    uvicorn.run(create_app(), host=host, port=port, log_level="warning")


@app.command("mcp")
def serve_mcp(
    host: HostOption = "127.0.0.1",
    port: int = 8001,
    stdio: Annotated[
        bool, typer.Option("--stdio", help="Serve one agent over stdio with DRAFTGATE_TOKEN.")
    ] = False,
) -> None:
    """The agents' MCP server: streamable HTTP at /mcp, or stdio."""
    from service.runtime import build_runtime

    runtime = build_runtime(get_settings())
    if stdio:
        import anyio

        from mcp_adapter.server import create_mcp_server

        token = os.environ.get("DRAFTGATE_TOKEN", "")
        if not token:
            raise typer.BadParameter("set DRAFTGATE_TOKEN to the agent's bearer token")
        anyio.run(create_mcp_server(runtime, stdio_token=token).run_stdio_async)
        return
    import uvicorn

    from mcp_adapter.server import create_http_app

    uvicorn.run(create_http_app(runtime), host=host, port=port, log_level="warning")
