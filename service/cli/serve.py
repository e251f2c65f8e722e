"""``draftgate serve`` and ``draftgate migrate``: run one component, as compose.yaml does."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from service.config import get_settings

app = typer.Typer(help="Run one component of the stack.", no_args_is_help=True)

HostOption = Annotated[str, typer.Option(help="Interface to bind.")]


def migrate() -> None:
    """Bring the database schema up to date (Alembic; the only way the schema changes)."""
    from service.migrate import upgrade  # alembic: seconds the servers of `serve` never need

    url = get_settings().resolved_database_url()
    upgrade(url)
    typer.echo("database schema is up to date")


def _observe(component: str) -> None:
    """Logs through structlog (DRAFTGATE_LOG_FORMAT/_LEVEL), and traces when an OTLP endpoint
    is configured (standard OTEL_* variables), before anything else of the component runs."""
    from service.telemetry import configure

    _configure_logs(get_settings().log_level)
    configure(component)


def _configure_logs(level: str) -> None:
    from service.logs import configure_logging

    configure_logging(fmt=get_settings().log_format, level=level)


def _trusted_proxies() -> str:
    """Whose X-Forwarded-* to believe (uvicorn's proxy_headers): the configured proxies only,
    since the client address feeds the per-address rate limit and the audit's source."""
    return get_settings().forwarded_allow_ips


def _serve_http(asgi_app: Any, host: str, port: int) -> None:
    """uvicorn as both HTTP doors run it: our logging, its access log, trusted proxies only."""
    import uvicorn

    uvicorn.run(
        asgi_app,
        host=host,
        port=port,
        log_config=None,  # logging is ours (_observe); uvicorn's access log goes through it
        access_log=True,
        proxy_headers=True,
        forwarded_allow_ips=_trusted_proxies(),
    )


@app.command("api")
def serve_api(host: HostOption = "127.0.0.1", port: int = 8000) -> None:
    """The approver/auditor HTTP API and the console (OpenAPI document at /openapi.json)."""
    from service.api.app import create_app

    _observe("api")
    _serve_http(create_app(), host, port)


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

    _observe("mcp")  # logs go to stderr: over stdio, stdout is the protocol's

    runtime = build_runtime(get_settings())
    if stdio:
        import anyio

        from mcp_adapter.auth import authenticate_for_mcp
        from mcp_adapter.server import run_stdio
        from service.errors import DomainError
        from service.tracing import new_trace_id

        token = os.environ.get("DRAFTGATE_TOKEN", "")
        if not token:
            raise typer.BadParameter("set DRAFTGATE_TOKEN to the agent's bearer token")
        try:  # fail fast on a bad token; every call checks it again (revocation)
            authenticate_for_mcp(runtime, token, trace_id=new_trace_id(), door="mcp-stdio")
        except DomainError as error:
            typer.echo(f"error: {error.message}", err=True)
            raise typer.Exit(code=1) from None
        anyio.run(run_stdio, runtime, token)
        return
    from mcp_adapter.server import create_http_app

    _serve_http(create_http_app(runtime), host, port)


@app.command("worker")
def serve_worker(
    concurrency: Annotated[int, typer.Option(help="Pool processes.")] = 2,
    hostname: Annotated[str | None, typer.Option(help="Worker node name.")] = None,
    loglevel: Annotated[str | None, typer.Option(help="Log level (DRAFTGATE_LOG_LEVEL).")] = None,
) -> None:
    """The Celery worker that executes approved drafts."""
    from service.cli.common import check_runtime
    from workers.app import celery_app

    settings = get_settings()
    level = loglevel or settings.log_level
    _configure_logs(level)  # now: Celery warns before its setup_logging (workers.app) runs
    check_runtime(settings)
    args = [*_banner(), "worker", f"--loglevel={level}", "--without-gossip", "--without-mingle"]
    if settings.resolved_broker_url().startswith("sqla+"):
        # kombu's SQLAlchemy transport misbehaves under prefork (a lost child takes the
        # worker down, group signals can hang it): the embedded broker runs one solo worker.
        args.append("--pool=solo")
    else:
        args.append(f"--concurrency={concurrency}")
    if hostname:
        args.append(f"--hostname={hostname}")
    celery_app.worker_main(args)


@app.command("beat")
def serve_beat(
    loglevel: Annotated[str | None, typer.Option(help="Log level (DRAFTGATE_LOG_LEVEL).")] = None,
) -> None:
    """The scheduler that runs the sweeper (re-publish lost executions, expire drafts)."""
    from service.cli.common import check_runtime
    from workers.app import celery_app

    settings = get_settings()
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    level = loglevel or settings.log_level
    _configure_logs(level)
    check_runtime(settings)  # beat runs no execution, but refuses what the others refuse
    celery_app.start([*_banner(), "beat", f"--loglevel={level}"])


def _banner() -> list[str]:
    """Celery prints its banner to stdout, outside logging: not among JSON log lines."""
    return ["--quiet"] if get_settings().log_format == "json" else []
