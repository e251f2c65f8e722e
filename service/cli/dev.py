"""``draftgate dev``: the whole stack on one machine with nothing installed but Python.

SQLite for data, kombu's server-less SQLAlchemy broker over SQLite, and every
component (API, MCP, worker, beat) as a child process, restarted when it dies
(``service.cli.supervisor``).
The demo tenant is seeded once and described in ``<state-dir>/demo.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from service.audit.checkpoints import ensure_key
from service.cli.common import check_runtime
from service.cli.supervisor import ReadyTimeout, Supervisor
from service.config import DEFAULT_STATE_DIR, DEMO_POLICIES, Settings
from service.db import session_scope
from service.demo import seed_demo, write_manifest
from service.migrate import upgrade
from service.runtime import build_runtime
from service.signing import public_key_b64


def dev(
    state_dir: Annotated[Path, typer.Option(help="Where the database, keys and manifest live.")] = (
        DEFAULT_STATE_DIR
    ),
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    api_port: Annotated[int, typer.Option(help="HTTP API port.")] = 8000,
    mcp_port: Annotated[int, typer.Option(help="MCP (streamable HTTP) port.")] = 8001,
    reset: Annotated[bool, typer.Option("--reset", help="Start from an empty state dir.")] = False,
    ready_timeout: Annotated[
        float | None,
        typer.Option(
            min=1,
            help="Seconds to wait for the API and MCP server to answer. Default: 30 s per "
            "process per CPU (the load average plus dev's four), 60-600 s.",
        ),
    ] = None,
) -> None:
    """Run API, MCP, worker and beat on SQLite; seed the demo; write <state-dir>/demo.json."""
    state_dir = state_dir.resolve()
    if reset and state_dir.exists():
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    settings = Settings(state_dir=state_dir, **_demo_policies())
    api_url, mcp_url = f"http://{host}:{api_port}", f"http://{host}:{mcp_port}/mcp"
    manifest_path = state_dir / "demo.json"

    upgrade(settings.resolved_database_url())
    check_runtime(settings)  # a bad gateway file stops dev here, not in its children
    checkpoint_key = ensure_key(settings.resolved_checkpoint_key_file())
    manifest = _load_or_seed(settings, manifest_path, api_url=api_url, mcp_url=mcp_url)
    write_manifest(manifest, manifest_path)

    stop_requested, stopped_by = _stop_on_signals()  # before any child starts: none is lost
    stack = Supervisor(
        {
            "api": ["serve", "api", "--host", host, "--port", str(api_port)],
            "mcp": ["serve", "mcp", "--host", host, "--port", str(mcp_port)],
            "worker": ["serve", "worker", "--concurrency", "1"],
            "beat": ["serve", "beat"],
        },
        _environment(state_dir, host, api_port, mcp_port),
        state_dir / "logs",
    )
    stack.start()
    try:
        health = {"api": f"{api_url}/healthz", "mcp": f"http://{host}:{mcp_port}/healthz"}
        if stack.wait_ready(health, ReadyTimeout.of(ready_timeout), stop_requested):
            _announce(state_dir, manifest, manifest_path, public_key_b64(checkpoint_key))
            stack.watch(stop_requested)
    finally:
        stack.stop(grace=SIGINT_GRACE_SECONDS if signal.SIGINT in stopped_by else 0.0)
    typer.echo("stopped")


def _demo_policies() -> dict[str, Any]:
    """The demo's policies for dev's own checks, as its children get them (_environment)."""
    return {} if "DRAFTGATE_POLICIES" in os.environ else {"policies": DEMO_POLICIES}


def _environment(state_dir: Path, host: str, api_port: int, mcp_port: int) -> dict[str, str]:
    """The children's environment: this one, on the embedded default, with the public URLs."""
    # The API's public URL names the console's site for passkeys (WebAuthn refuses an IP
    # address as the site's name) and the audience of its tokens: localhost on loopback.
    public_host = "localhost" if host in ("127.0.0.1", "localhost") else host
    env = {
        **os.environ,
        "DRAFTGATE_STATE_DIR": str(state_dir),
        "DRAFTGATE_MCP_PUBLIC_URL": f"http://{host}:{mcp_port}/mcp",
        "DRAFTGATE_API_PUBLIC_URL": f"http://{public_host}:{api_port}",
    }
    # The demo's policies, unless the operator set their own.
    env.setdefault("DRAFTGATE_POLICIES", json.dumps(DEMO_POLICIES))
    env.pop("DRAFTGATE_DATABASE_URL", None)  # dev always runs on the embedded default
    env.pop("DRAFTGATE_BROKER_URL", None)
    return env


def _load_or_seed(
    settings: Settings, path: Path, *, api_url: str, mcp_url: str
) -> dict[str, object]:
    if path.exists():
        manifest: dict[str, object] = json.loads(path.read_text())
        manifest.update(api_url=api_url, mcp_url=mcp_url)
        return manifest
    runtime = build_runtime(settings)
    try:
        with session_scope(runtime.engine) as session:
            return seed_demo(
                session,
                tenant=settings.default_tenant,
                state_dir=settings.state_dir,
                api_url=api_url,
                mcp_url=mcp_url,
            )
    finally:
        runtime.engine.dispose()


def _stop_on_signals() -> tuple[threading.Event, set[int]]:
    """An event set by SIGINT or SIGTERM, and the signals received."""
    stop_requested, stopped_by = threading.Event(), set[int]()

    def stop(signum: int, _frame: FrameType | None) -> None:
        stopped_by.add(signum)
        stop_requested.set()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    return stop_requested, stopped_by


# Ctrl-C in a terminal signals the whole process group: the children are stopping already,
# and a SIGTERM on top would reach beat while Python shuts down (an "Exception ignored"
# traceback in its log). Children still running after this get the SIGTERM.
SIGINT_GRACE_SECONDS = 3.0


def _announce(
    state_dir: Path, manifest: dict[str, object], manifest_path: Path, checkpoint_key: str
) -> None:
    typer.echo("")
    typer.echo("draftgate is running (embedded: SQLite, no servers)")
    typer.echo(f"  HTTP API   {manifest['api_url']}  (OpenAPI: {manifest['api_url']}/openapi.json)")
    typer.echo(f"  MCP        {manifest['mcp_url']}   (streamable HTTP, bearer token)")
    # localhost, not 127.0.0.1: passkeys (WebAuthn) refuse an IP address as the site's name.
    console = str(manifest["api_url"]).replace("://127.0.0.1:", "://localhost:") + "/console/"
    typer.echo(f"  console    {console}   (approvers: sign in with a token from the manifest)")
    typer.echo("  worker     Celery worker + beat on the server-less SQLite broker")
    typer.echo(f"  database   {state_dir / 'draftgate.db'}")
    typer.echo(f"  manifest   {manifest_path}   (demo tokens, keys, order ids)")
    typer.echo(f"  audit      checkpoint public key {checkpoint_key}")
    typer.echo(f"  logs       {state_dir / 'logs'}   (one file per component)")
    typer.echo("Press Ctrl-C to stop.")
