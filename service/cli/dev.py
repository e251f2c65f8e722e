"""``draftgate dev``: the whole stack on one machine with nothing installed but Python.

SQLite for data, kombu's server-less SQLAlchemy broker over SQLite, and every
component (API, MCP, worker, beat) as a child process.
The demo tenant is seeded once and described in ``<state-dir>/demo.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from service.audit.checkpoints import ensure_key
from service.cli.common import check_runtime
from service.config import DEFAULT_STATE_DIR, Settings
from service.db import session_scope
from service.demo import seed_demo, write_manifest
from service.migrate import upgrade
from service.runtime import build_runtime
from service.signing import public_key_b64

READY_TIMEOUT_SECONDS = 60


def dev(
    state_dir: Annotated[Path, typer.Option(help="Where the database, keys and manifest live.")] = (
        DEFAULT_STATE_DIR
    ),
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    api_port: Annotated[int, typer.Option(help="HTTP API port.")] = 8000,
    mcp_port: Annotated[int, typer.Option(help="MCP (streamable HTTP) port.")] = 8001,
    reset: Annotated[bool, typer.Option("--reset", help="Start from an empty state dir.")] = False,
) -> None:
    """Run API, MCP, worker and beat on SQLite; seed the demo; write <state-dir>/demo.json."""
    state_dir = state_dir.resolve()
    if reset and state_dir.exists():
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    # The API's public URL names the console's site for passkeys (WebAuthn refuses an IP
    # address as the site's name) and the audience of its tokens: localhost on loopback.
    public_host = "localhost" if host in ("127.0.0.1", "localhost") else host
    env = {
        **os.environ,
        "DRAFTGATE_STATE_DIR": str(state_dir),
        "DRAFTGATE_MCP_PUBLIC_URL": f"http://{host}:{mcp_port}/mcp",
        "DRAFTGATE_API_PUBLIC_URL": f"http://{public_host}:{api_port}",
    }
    env.pop("DRAFTGATE_DATABASE_URL", None)  # dev always runs on the embedded default
    env.pop("DRAFTGATE_BROKER_URL", None)
    settings = Settings(state_dir=state_dir)
    api_url, mcp_url = f"http://{host}:{api_port}", f"http://{host}:{mcp_port}/mcp"
    manifest_path = state_dir / "demo.json"
    log_dir = state_dir / "logs"

    upgrade(settings.resolved_database_url())
    check_runtime(settings)  # a bad gateway file stops dev here, not in its children
    checkpoint_key = ensure_key(settings.resolved_checkpoint_key_file())
    manifest = _load_or_seed(settings, manifest_path, api_url=api_url, mcp_url=mcp_url)
    write_manifest(manifest, manifest_path)

    stop_requested, stopped_by = _stop_on_signals()  # before any child starts: none is lost
    children = _start(
        {
            "api": ["serve", "api", "--host", host, "--port", str(api_port)],
            "mcp": ["serve", "mcp", "--host", host, "--port", str(mcp_port)],
            "worker": ["serve", "worker", "--concurrency", "1"],
            "beat": ["serve", "beat"],
        },
        env,
        log_dir,
    )
    try:
        health = {"api": f"{api_url}/healthz", "mcp": f"http://{host}:{mcp_port}/healthz"}
        if _wait_ready(health, children, stop_requested, log_dir):
            _announce(state_dir, manifest, manifest_path, public_key_b64(checkpoint_key))
        while not stop_requested.wait(0.5):
            for name, child in children.items():
                if child.poll() is not None and not stop_requested.is_set():
                    _died(name, child.returncode, log_dir)
                    raise typer.Exit(code=1)
    finally:
        _stop(children, grace=SIGINT_GRACE_SECONDS if signal.SIGINT in stopped_by else 0.0)
    typer.echo("stopped")


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


def _start(
    commands: dict[str, list[str]], env: dict[str, str], log_dir: Path
) -> dict[str, subprocess.Popen[bytes]]:
    """Start each component with its output in ``<log_dir>/<name>.log``, so the terminal
    shows one banner instead of four processes' startup noise (Celery's banners, its
    superuser warning); a component that dies is reported with the end of its log."""
    log_dir.mkdir(parents=True, exist_ok=True)
    children = {}
    for name, args in commands.items():
        with (log_dir / f"{name}.log").open("ab") as log:  # the child keeps its own copy
            children[name] = subprocess.Popen(
                [sys.executable, "-m", "service.cli", *args],
                env={"DRAFTGATE_LOG_FORMAT": "console", **env},  # for people, unless set
                stdout=log,
                stderr=subprocess.STDOUT,
            )
    return children


def _died(name: str, code: int | None, log_dir: Path) -> None:
    log = log_dir / f"{name}.log"
    tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:] if log.exists() else []
    typer.echo(f"{name} exited with code {code}; its log ({log}) ends with:", err=True)
    for line in tail:
        typer.echo(f"  {line}", err=True)


LOG_TAIL_LINES = 20


def _wait_ready(
    urls: dict[str, str],
    children: dict[str, subprocess.Popen[bytes]],
    stop_requested: threading.Event,
    log_dir: Path,
) -> bool:
    """True once every URL answers; False if a stop was requested first."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    pending = dict(urls)
    while pending:
        if stop_requested.is_set():
            return False
        for name, url in list(pending.items()):
            if children[name].poll() is not None:
                if stop_requested.is_set():
                    return False
                _died(name, children[name].returncode, log_dir)
                raise typer.Exit(code=1)
            try:
                with urllib.request.urlopen(url, timeout=1):  # noqa: S310 - our own loopback URL
                    del pending[name]
            except OSError:
                pass
        if time.monotonic() > deadline:
            typer.echo(f"not ready after {READY_TIMEOUT_SECONDS}s: {', '.join(pending)}", err=True)
            raise typer.Exit(code=1)
        stop_requested.wait(0.2)
    return True


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


def _stop(children: dict[str, subprocess.Popen[bytes]], *, grace: float = 0.0) -> None:
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(c.poll() is None for c in children.values()):
        time.sleep(0.05)
    for child in children.values():
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in children.values():
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


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
