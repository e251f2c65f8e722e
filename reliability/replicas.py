"""The production topology on one machine: every component a real ``draftgate serve`` process
on the private PostgreSQL and Redis: two API replicas, two MCP replicas, two workers and beat.

No load balancer exists here, so the client spreads its calls round-robin over the replicas,
as one would: every call carries its own credentials and the MCP server is stateless, so
nothing needs to stick to a replica. The client acts as the agent (a real MCP client over
streamable HTTP) and as the approvers (Ed25519-signed statements through the API).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp.client import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from sqlmodel import Session, select

from harness.deployment import Deployment
from harness.processes import BeatProcess, ChildProcess, HttpProcess, WorkerProcess
from reliability.processes import Ledger
from reliability.services import PrivatePostgres, PrivateRedis
from reliability.stack import (
    AMOUNT_MINOR,
    TENANT,
    Client,
    DrillError,
    Requested,
    Timing,
    Transient,
    scenario_settings,
)
from service.audit.checkpoints import latest_for
from service.audit.models import AuditHead
from service.config import Settings
from service.runtime import Runtime

# Checkpoints every 5 s: readiness calls the log unanchored after twice that, which a loaded
# worker (the checkpoint task queues behind executions) must not reach by accident.
TIMING = Timing(checkpoint_interval_seconds=5.0)
# One client sends everything from one address: the limits count, they must not refuse.
NO_REFUSALS = "100000000/minute"
FINISHED = ("succeeded", "failed", "expired")
FLOW_TIMEOUT_SECONDS = 180  # how long one flow may wait for its execution to finish
POLL_SECONDS = 0.25


def topology_settings(root: Path, postgres: PrivatePostgres, redis: PrivateRedis) -> Settings:
    """Production-shaped: PostgreSQL, Redis as the broker AND as the replicas' shared
    rate-limit counters (as compose.yaml has it), short recovery clocks."""
    database_url = postgres.create_database("topology")
    settings = scenario_settings(
        root, database_url=database_url, broker_url=redis.url, queue="topology", timing=TIMING
    )
    return settings.model_copy(
        update={
            "rate_limit_storage_url": redis.url.removesuffix("/0") + "/1",
            "rate_limit_per_address": NO_REFUSALS,
            "rate_limit_per_token": NO_REFUSALS,
        }
    )


@dataclass
class Topology:
    settings: Settings
    runtime: Runtime
    demo: dict[str, Any]
    postgres: PrivatePostgres
    redis: PrivateRedis
    ledger: Ledger
    apis: list[HttpProcess]
    mcps: list[HttpProcess]
    workers: list[WorkerProcess]
    beat: BeatProcess
    client: TopologyClient
    requested: list[Requested] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def components(self) -> list[ChildProcess]:
        return [*self.apis, *self.mcps, *self.workers, self.beat]

    def pids(self) -> dict[str, int | None]:
        return {component.name: component.pid for component in self.components}

    def execution_ids(self) -> list[str]:
        with self._lock:
            return [r.execution_id for r in self.requested]

    def record(self, *requested: Requested) -> None:
        with self._lock:
            self.requested.extend(requested)

    def flow(self, index: int) -> str:
        """propose (MCP) -> approve (API, signed) -> execute (API) -> its terminal status."""
        requested = self.client.request_execution(index)
        self.record(requested)
        return self.client.wait_finished(requested.execution_id)

    def anchored_head(self, timeout: float = 60) -> int:
        """Wait until a checkpoint signed by the system (beat schedules it, a worker signs)
        covers the head of the chain; returns the head's seq."""
        deadline = time.monotonic() + timeout
        while True:
            with Session(self.runtime.engine) as session:
                head = session.exec(select(AuditHead).where(AuditHead.tenant == TENANT)).one()
                latest = latest_for(session, TENANT)
            if latest is not None and latest.seq >= head.seq:
                return int(head.seq)
            if time.monotonic() > deadline:
                raise DrillError(f"no checkpoint covers the head (seq {head.seq}) in {timeout} s")
            time.sleep(POLL_SECONDS)


class TopologyClient(Client):
    """The drill's client, proposing through a real MCP client over streamable HTTP (next
    MCP replica each time) and following each execution through the API to its end."""

    def __init__(
        self,
        runtime: Runtime,
        demo: dict[str, Any],
        api_urls: list[str],
        mcp_urls: list[str],
        label: str,
    ) -> None:
        super().__init__(runtime, demo, api_urls, label)
        self.mcp_urls = mcp_urls
        self._mcp_turn = itertools.count()

    def next_mcp(self) -> str:
        return self.mcp_urls[next(self._mcp_turn) % len(self.mcp_urls)]

    def propose(self, index: int) -> str:
        arguments = {
            "order_id": self.order_of(index),
            "amount": {"amount_minor": AMOUNT_MINOR, "currency": "USD"},
            "reason": "damaged",
            # Concurrent identical proposals would share one open draft (DESIGN.md §3): each
            # flow is a refund of its own; a retry of it returns the same draft (the key).
            "note": f"{self.label} flow {index}",
            "idempotency_key": f"{self.label}-{index}",
        }
        token = self.demo["tokens"]["agent"]
        result = self._retrying(
            lambda: asyncio.run(call_tool(self.next_mcp(), token, "propose_refund", arguments))
        )
        return str(result["draft_id"])

    def wait_finished(self, execution_id: str, timeout: float = FLOW_TIMEOUT_SECONDS) -> str:
        deadline = time.monotonic() + timeout
        while True:
            response = self._http("GET", f"/v1/executions/{execution_id}", "approver_alice")
            status = str(response.json().get("status")) if response.status_code == 200 else ""
            if status in FINISHED:
                return status
            if time.monotonic() > deadline:
                return status or f"HTTP {response.status_code}"
            time.sleep(POLL_SECONDS)


async def call_tool(url: str, token: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One tool call as an agent runtime makes it: a session of its own, its own token."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http,
        McpClient(streamable_http_client(url, http_client=http)) as client,
    ):
        result = await client.call_tool(name, arguments)
    if result.is_error:
        text = getattr(result.content[0], "text", "") if result.content else ""
        error = json.loads(text) if text.startswith("{") else {"message": text}
        if error.get("retryable"):
            raise Transient(f"{name}: {error.get('code')}")
        raise DrillError(f"{name} refused: {error}")
    return dict(result.structured_content or {})


def readiness(url: str) -> tuple[int, dict[str, str]]:
    """``GET /readyz``: the status and the checks (an unreachable process: 0, no checks)."""
    try:
        response = httpx.get(url + "/readyz", timeout=10)
    except httpx.TransportError as exc:
        return 0, {"transport": type(exc).__name__}
    try:
        checks = response.json().get("checks", {})
    except ValueError:
        checks = {"body": response.text[:200]}
    return response.status_code, {str(k): str(v) for k, v in checks.items()}


@contextmanager
def topology(
    root: Path,
    *,
    postgres: PrivatePostgres,
    redis: PrivateRedis,
    ledger: Ledger,
    replicas: int = 2,
    concurrency: int = 2,
) -> Iterator[Topology]:
    """Every component started side by side and awaited; all stopped when the block ends."""
    settings = topology_settings(root, postgres, redis)
    logs = root / "logs"
    numbers = range(1, replicas + 1)
    with ExitStack() as stack:
        deployment = Deployment(settings, log_dir=logs, ledger=ledger)
        stack.callback(deployment.close, kill=True)
        # As the ``migrate`` service does; the checkpoint key is the one the workers sign with.
        demo = deployment.prepare()
        apis = [
            deployment.start_http("api", log=logs / f"api-{n}.log", wait=False) for n in numbers
        ]
        mcps = [
            deployment.start_http("mcp", log=logs / f"mcp-{n}.log", wait=False) for n in numbers
        ]
        workers = [
            deployment.start_worker(name=f"worker{n}", concurrency=concurrency, wait=False)
            for n in numbers
        ]
        beat = deployment.start_beat(wait=False)
        for component in deployment.processes:  # all started side by side
            component.wait_ready()
        client = TopologyClient(
            deployment.runtime, demo, [a.url for a in apis], [m.mcp_url for m in mcps], "topology"
        )
        stack.callback(client.close)
        yield Topology(
            settings,
            deployment.runtime,
            demo,
            postgres,
            redis,
            ledger,
            apis,
            mcps,
            workers,
            beat,
            client,
        )
