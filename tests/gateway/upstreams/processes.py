"""Starting the upstreams as the processes they are in real life, for the fixtures.

The ticket-desk MCP server (``mcp_server.py``) runs in its own Python process, over
streamable HTTP on a free port or as a stdio command line a gateway file names; the
HTTP service (``http_service.py``) under uvicorn in a thread; npm's memory and everything
servers with Node, installed by ``npm ci`` from the committed lock file. Each gets its own
ledger (the npm servers: a recording tap in front of them).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from harness.servers import free_port, serve
from tests.gateway.upstreams.ledger import Ledger, read_jsonl

ROOT = Path(__file__).resolve().parents[3]
UPSTREAMS_DIR = Path(__file__).resolve().parent
MEMORY_SERVER = "@modelcontextprotocol/server-memory"
EVERYTHING_SERVER = "@modelcontextprotocol/server-everything"
NPM_SERVERS = (MEMORY_SERVER, EVERYTHING_SERVER)
# GitHub's published OpenAPI description (13 MB), for the importer (issue 24.6).
OCTOKIT_OPENAPI = "@octokit/openapi"
NPM_PACKAGES = (*NPM_SERVERS, OCTOKIT_OPENAPI)  # tests/gateway/upstreams/package.json
READY_TIMEOUT_SECONDS = 30


@dataclass
class UpstreamProcess:
    """A started upstream: its base URL, ledger and log; stop() or kill() it."""

    base_url: str
    ledger: Ledger
    log: Path
    process: subprocess.Popen[bytes]

    @property
    def mcp_url(self) -> str:
        """The streamable HTTP endpoint (the ticket desk only)."""
        return self.base_url + "/mcp"

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


@dataclass
class StdioCommand:
    """What a gateway file's stdio entry needs to start the ticket desk: ``command``,
    ``args`` and ``env`` (all literal strings), and the ledger the children write to."""

    command: str
    args: list[str]
    env: dict[str, str]
    ledger: Ledger
    options: dict[str, Any] = field(default_factory=dict)

    def gateway_entry(self, namespace: str, tools: dict[str, Any]) -> dict[str, Any]:
        """One ``mcp:`` item of a gateway file (see /tmp/brief/gateway-format.md)."""
        return {
            "namespace": namespace,
            "transport": "stdio",
            "command": self.command,
            "args": list(self.args),
            "env": dict(self.env),
            "tools": tools,
        }


@dataclass
class NodeCommand:
    """A third-party MCP server from npm as a stdio command line (absolute paths: the
    gateway file gives no working directory), the file it keeps its data in, and the log of
    the recording tap in front of it (see ``stdio_tap.py``)."""

    command: str
    args: list[str]
    env: dict[str, str]
    data_file: Path
    tap_log: Path

    def gateway_entry(self, namespace: str, tools: dict[str, Any]) -> dict[str, Any]:
        return {
            "namespace": namespace,
            "transport": "stdio",
            "command": self.command,
            "args": list(self.args),
            "env": dict(self.env),
            "tools": tools,
        }

    def gateway_file(self, path: Path, namespace: str, tools: dict[str, Any]) -> Path:
        """A gateway file at ``path`` with this server as its one ``mcp:`` entry."""
        document = {"version": 1, "mcp": [self.gateway_entry(namespace, tools)]}
        path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        return path

    def tool_calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        """Every ``tools/call`` request that reached the server (through any process), in
        order: ``{"pid", "message"}`` with the JSON-RPC message as sent."""
        return [
            entry
            for entry in read_jsonl(self.tap_log)
            if entry["message"].get("method") == "tools/call"
            and (tool is None or entry["message"]["params"]["name"] == tool)
        ]


def unavailable(reason: str) -> None:
    """Skip, or fail when the environment promises every service (DRAFTGATE_REQUIRE_SERVICES)."""
    message = f"the npm MCP servers cannot run: {reason}"
    if os.environ.get("DRAFTGATE_REQUIRE_SERVICES") == "1":
        pytest.fail(message + " (DRAFTGATE_REQUIRE_SERVICES=1)")
    pytest.skip(message)


def install_npm_upstreams() -> None:
    """``npm ci`` in tests/gateway/upstreams when its node_modules is missing (one test
    process at a time: xdist workers share the directory). ``./run test`` does it first."""
    if _npm_installed():
        return
    npm = shutil.which("npm")
    if npm is None:
        unavailable("npm is not installed")
        return
    lock_path = Path(tempfile.gettempdir()) / "draftgate-gateway-upstreams-npm.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _npm_installed():
            done = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund"],
                cwd=UPSTREAMS_DIR,
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                unavailable(f"npm ci failed: {done.stderr[-500:]}")


def _npm_installed() -> bool:
    return all((UPSTREAMS_DIR / "node_modules" / name).is_dir() for name in NPM_PACKAGES)


def memory_server_command(root: Path) -> NodeCommand:
    """npm's ``@modelcontextprotocol/server-memory`` over stdio, its graph in ``root``,
    behind a recording tap (Python, standard library only)."""
    data_file = root / "memory.jsonl"
    return _npm_command(MEMORY_SERVER, [], {"MEMORY_FILE_PATH": str(data_file)}, root, data_file)


def everything_server_command(root: Path) -> NodeCommand:
    """npm's ``@modelcontextprotocol/server-everything`` (the protocol's feature tour, its
    tools named ``get-sum``, ``echo``, ...) over stdio, behind a recording tap. It keeps
    no data: ``data_file`` stays empty."""
    return _npm_command(EVERYTHING_SERVER, ["stdio"], {}, root, root / "none")


def _npm_command(
    package: str, args: list[str], env: dict[str, str], root: Path, data_file: Path
) -> NodeCommand:
    node = shutil.which("node")
    if node is None:
        unavailable("node is not installed")
    assert node is not None
    install_npm_upstreams()
    root.mkdir(parents=True, exist_ok=True)
    entry = UPSTREAMS_DIR / "node_modules" / package / "dist" / "index.js"
    tap_log = root / f"{package.rsplit('/', 1)[-1]}-calls.jsonl"
    tap = [str(UPSTREAMS_DIR / "stdio_tap.py"), "--log", str(tap_log), "--"]
    command = [*tap, node, str(entry), *args]
    return NodeCommand(sys.executable, command, env, data_file, tap_log)


def upstream_env() -> dict[str, str]:
    """What the child needs beyond a stdio client's minimal default environment: to find
    the ``tests`` package (the gateway file gives no working directory)."""
    return {"PYTHONPATH": str(ROOT)}


def mcp_server_args(
    ledger: Path,
    *,
    transport: str,
    port: int | None = None,
    slow_seconds: float | None = None,
    flaky_failures: int | None = None,
    schema_version: int | None = None,
) -> list[str]:
    args = ["-m", "tests.gateway.upstreams.mcp_server", "--transport", transport]
    args += ["--ledger", str(ledger)]
    if port is not None:
        args += ["--port", str(port)]
    if slow_seconds is not None:
        args += ["--slow-seconds", str(slow_seconds)]
    if flaky_failures is not None:
        args += ["--flaky-failures", str(flaky_failures)]
    if schema_version is not None:
        args += ["--schema-version", str(schema_version)]
    return args


def stdio_command(root: Path, **options: Any) -> StdioCommand:
    """The ticket desk as a stdio command line, with a fresh ledger under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    ledger = root / "mcp-ledger.jsonl"
    args = mcp_server_args(ledger, transport="stdio", **options)
    return StdioCommand(sys.executable, args, upstream_env(), Ledger(ledger), options)


def start_mcp_http(root: Path, **options: Any) -> UpstreamProcess:
    """The ticket desk over streamable HTTP (``<base_url>/mcp``), ready to serve."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    args = mcp_server_args(root / "mcp-ledger.jsonl", transport="http", port=port, **options)
    return _start([sys.executable, *args], port, root / "mcp-ledger.jsonl", root / "mcp.log")


@dataclass
class HttpService:
    """The billing service served in this process: base URL, ledger, bearer token if any."""

    base_url: str
    ledger: Ledger
    token: str | None

    @property
    def openapi_url(self) -> str:
        return self.base_url + "/openapi.json"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


@contextmanager
def serve_http_service(
    root: Path, *, transient_failures: int | None = None, token: str | None = None
) -> Iterator[HttpService]:
    """The billing HTTP service under uvicorn on a free port (a thread of this process:
    its clients, the draftgate workers, are other processes anyway)."""
    from tests.gateway.upstreams.http_service import Options, create_app

    root.mkdir(parents=True, exist_ok=True)
    ledger = root / "http-ledger.jsonl"
    options = Options(ledger, token=token)
    if transient_failures is not None:
        options = Options(ledger, transient_failures, token)
    with serve(create_app(options)) as base_url:
        yield HttpService(base_url, Ledger(ledger), token)


def _start(command: list[str], port: int, ledger: Path, log: Path) -> UpstreamProcess:
    env = {**os.environ, **upstream_env()}
    with log.open("ab") as sink:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # kill() reaches it whole, and ^C in pytest does not
        )
    started = UpstreamProcess(f"http://127.0.0.1:{port}", Ledger(ledger), log, process)
    try:
        _wait_ready(started)
    except BaseException:
        started.kill()
        raise
    return started


def _wait_ready(upstream: UpstreamProcess) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while True:
        try:
            if httpx.get(upstream.base_url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if not upstream.alive:
            raise RuntimeError(f"upstream exited early:\n{upstream.output()[-4000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"upstream not ready:\n{upstream.output()[-4000:]}")
        time.sleep(0.05)
