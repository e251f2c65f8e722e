"""Draftgate's own processes for benches, started exactly as ``draftgate serve <component>``.

``bench_deployment(state_dir, database_url="", broker_url="", queue="")`` is one private
deployment (harness.Deployment): ``prepare()`` migrates its database, creates the checkpoint
key and seeds the demo tenant (returning the manifest: tokens and order ids, see
service/demo.py); ``start_http("mcp"|"api", wait=...)`` and ``start_worker(...)`` run
``draftgate serve <component>`` with the deployment's settings and wait until it answers;
``close()`` stops every process it started (SIGTERM, then SIGKILL after a grace period).

``noop_server(log_dir)`` starts the baseline: a bare SDK ``MCPServer`` with one no-op tool,
served by uvicorn in a subprocess the same way (stateless streamable HTTP, JSON responses).

Rate limits are set far above any bench's load (``BENCH_LIMIT``): the limiter still runs on
every call, it just never refuses; a refusal would measure the configured bound, not the
cost of a call.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from harness.deployment import Deployment
from harness.processes import ChildProcess
from harness.servers import free_port, healthy
from service.config import Settings

# Far above any bench's load: the limiter still runs on every call, it just never refuses.
BENCH_LIMIT = "100000000/minute"


def bench_deployment(
    state_dir: Path, database_url: str = "", broker_url: str = "", queue: str = ""
) -> Deployment:
    """A private deployment for a bench (empty URLs: the embedded defaults in ``state_dir``);
    its processes are ``draftgate serve <component>`` (``start_http``, ``start_worker``)."""
    settings = Settings(
        state_dir=state_dir,
        database_url=database_url,
        broker_url=broker_url,
        **({"broker_queue": queue} if queue else {}),
        rate_limit_per_address=BENCH_LIMIT,
        rate_limit_per_token=BENCH_LIMIT,
    )
    return Deployment(settings, log_dir=state_dir)


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


def noop_server(log_dir: Path) -> ChildProcess:
    """The baseline: a bare SDK ``MCPServer`` with one no-op tool, on uvicorn, in a subprocess."""
    port = free_port()
    noop = NoopServer(port, log_dir / f"noop-{port}.log")
    noop.start()
    return noop


class NoopServer(ChildProcess):
    def __init__(self, port: int, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DRAFTGATE_")}
        super().__init__("noop", [sys.executable, "-c", NOOP_SERVER, str(port)], env, log)
        self.port = port
        self.mcp_url = f"http://127.0.0.1:{port}/mcp"

    def ready(self) -> bool:
        return healthy(f"http://127.0.0.1:{self.port}/healthz")
