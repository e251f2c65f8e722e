"""Draftgate's own processes for benches, started exactly as ``draftgate serve <component>``.

``Deployment(state_dir, database_url="", broker_url="", env={})`` is one private
deployment: ``prepare()`` migrates its database, creates the checkpoint key and seeds the
demo tenant (returning the manifest: tokens and order ids, see service/demo.py);
``start("mcp"|"api"|"worker", ...)`` runs ``python -m service.cli serve <component>`` with
the deployment's environment and waits until it answers; ``close()`` stops every process
it started (SIGTERM, then SIGKILL after a grace period).

``noop_server(port)`` starts the baseline: a bare SDK ``MCPServer`` with one no-op tool,
served by uvicorn in a subprocess the same way (stateless streamable HTTP, JSON responses).

Rate limits are set far above any bench's load by default (``BENCH_LIMITS``): the limiter
still runs on every call, it just never refuses; a refusal would measure the configured
bound, not the cost of a call.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import ROOT, free_port, wait_http

BENCH_LIMITS = {
    "DRAFTGATE_RATE_LIMIT_PER_ADDRESS": "100000000/minute",
    "DRAFTGATE_RATE_LIMIT_PER_TOKEN": "100000000/minute",
}


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    port: int | None = None
    log: Path | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_ready(self, timeout: float = 60.0) -> Process:
        """Wait until ``/healthz`` answers; stops the process and raises if it never does."""
        try:
            wait_http(f"{self.base_url}/healthz", timeout, alive=self.alive)
        except RuntimeError:
            self.stop()
            raise
        return self

    def stop(self, grace: float = 10.0) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


@dataclass
class Deployment:
    state_dir: Path
    database_url: str = ""
    broker_url: str = ""
    env: dict[str, str] = field(default_factory=dict)
    processes: list[Process] = field(default_factory=list)

    def environment(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("DRAFTGATE_")}
        env.update(BENCH_LIMITS)
        env["DRAFTGATE_STATE_DIR"] = str(self.state_dir)
        if self.database_url:
            env["DRAFTGATE_DATABASE_URL"] = self.database_url
        if self.broker_url:
            env["DRAFTGATE_BROKER_URL"] = self.broker_url
        env.update(self.env)
        return env

    def settings(self) -> Any:
        from service.config import Settings

        return Settings(
            state_dir=self.state_dir, database_url=self.database_url, broker_url=self.broker_url
        )

    def prepare(self) -> dict[str, Any]:
        """Migrate, create the checkpoint key, seed the demo tenant; returns the manifest."""
        from service.audit.checkpoints import ensure_key
        from service.db import make_engine, session_scope
        from service.demo import seed_demo
        from service.migrate import upgrade

        self.state_dir.mkdir(parents=True, exist_ok=True)
        settings = self.settings()
        url = settings.resolved_database_url()
        upgrade(url)
        ensure_key(settings.resolved_checkpoint_key_file())
        engine = make_engine(url)
        try:
            with session_scope(engine) as session:
                return seed_demo(
                    session,
                    tenant=settings.default_tenant,
                    state_dir=self.state_dir,
                    api_url="http://127.0.0.1:0",
                    mcp_url="http://127.0.0.1:0/mcp",
                )
        finally:
            engine.dispose()

    def start(self, component: str, *args: str, wait: bool = True) -> Process:
        """``draftgate serve <component>``; HTTP components get a free port and, unless
        ``wait`` is False (then call ``wait_ready()``), are awaited."""
        port = free_port() if component in {"api", "mcp"} else None
        argv = [sys.executable, "-m", "service.cli", "serve", component, *args]
        env = self.environment()
        if port is not None:
            argv += ["--host", "127.0.0.1", "--port", str(port)]
            if component == "mcp":
                env["DRAFTGATE_MCP_PUBLIC_URL"] = f"http://127.0.0.1:{port}/mcp"
        log = self.state_dir / f"{component}-{port or len(self.processes)}.log"
        with log.open("wb") as handle:
            popen = subprocess.Popen(
                argv, env=env, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT
            )
        process = Process(component, popen, port, log)
        self.processes.append(process)
        return process.wait_ready() if port is not None and wait else process

    def close(self) -> None:
        """Stop every process: all signalled at once, then each awaited (or killed)."""
        for process in self.processes:
            if process.alive():
                process.popen.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()


NOOP_SERVER = '''
import sys
import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.responses import JSONResponse

server = MCPServer("noop")

@server.tool()
def noop() -> str:
    """Does nothing."""
    return "ok"

@server.custom_route("/healthz", methods=["GET"])
async def healthz(request):
    return JSONResponse({"status": "ok"})

app = server.streamable_http_app(stateless_http=True, json_response=True)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
'''


def noop_server(log_dir: Path) -> Process:
    """The baseline: a bare SDK ``MCPServer`` with one no-op tool, on uvicorn, in a subprocess."""
    port = free_port()
    log = log_dir / f"noop-{port}.log"
    with log.open("wb") as handle:
        popen = subprocess.Popen(
            [sys.executable, "-c", NOOP_SERVER, str(port)],
            cwd=ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    return Process("noop", popen, port, log).wait_ready()
