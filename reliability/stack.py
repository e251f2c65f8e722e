"""One scenario's stack, all real: a database of its own on the private PostgreSQL (migrated
by Alembic, the demo tenant seeded), the HTTP API served by uvicorn, real worker processes,
and a beat that runs the sweeper and signs audit checkpoints as ``draftgate serve beat``
would. The drill acts as the agent (the MCP door's core, ``ToolDoor``) and as the approvers
(signed statements over HTTP), retrying through outages as a real client would."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from harness.approvals import signed_decision
from harness.databases import seed
from harness.deployment import Deployment
from harness.orders import flow_order
from harness.processes import WorkerProcess
from mcp_adapter.tools import ToolDoor
from reliability.processes import Ledger
from reliability.services import PrivatePostgres, PrivateRedis
from service.api.publisher import celery_publisher
from service.audit import checkpoints
from service.config import Settings
from service.db import session_scope
from service.errors import Category, DomainError
from service.executions import sweeper
from service.executions.outbox import Publisher
from service.runtime import Runtime
from service.sql import utcnow
from service.tracing import new_trace_id

logger = logging.getLogger("reliability")
T = TypeVar("T")

TENANT = "demo"
ORDER = "ORD-1004"  # delivered 3 days ago, 785.00 USD: what the drills read
AMOUNT_MINOR = 100
CLIENT_RETRY_SECONDS = 120  # how long the drill's client keeps retrying one call
TRANSIENT_CODES = {"INTERNAL_ERROR"}


@dataclass(frozen=True)
class Timing:
    """The recovery clocks, short so that a drill takes minutes, not hours."""

    lease_seconds: int = 5
    visibility_seconds: int = 8
    republish_after_seconds: int = 2
    sweep_interval_seconds: float = 1.0
    checkpoint_interval_seconds: float = 3.0
    pause_after_downstream_ms: int = 0


@dataclass
class Requested:
    index: int
    draft_id: str
    execution_id: str
    at: float


@dataclass
class ClientStats:
    """What the drill's client met: HTTP statuses, errors it retried through."""

    statuses: Counter[int] = field(default_factory=Counter)
    retries: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    # The first answer seen per 5xx status: content type and body, for the report.
    samples: dict[int, str] = field(default_factory=dict)


def scenario_settings(
    root: Path, *, database_url: str, broker_url: str, queue: str, timing: Timing
) -> Settings:
    state = root / "state"
    return Settings(
        state_dir=state,
        database_url=database_url,
        broker_url=broker_url,
        broker_queue=queue,
        execution_lease_seconds=timing.lease_seconds,
        broker_visibility_timeout_seconds=timing.visibility_seconds,
        republish_after_seconds=timing.republish_after_seconds,
        sweep_interval_seconds=timing.sweep_interval_seconds,
        checkpoint_interval_seconds=timing.checkpoint_interval_seconds,
        execution_retry_base_seconds=0.5,
        execution_retry_max_seconds=2.0,
        fault_pause_after_downstream_ms=timing.pause_after_downstream_ms,
        checkpoint_key_file=state / "checkpoint-key.pem",
        # One client sends everything from one address; the limits are not what is drilled.
        rate_limit_per_address="",
        rate_limit_per_token="",
    )


class SwitchablePublisher:
    """The API's real Celery publisher, which a scenario can make lose messages: ``drop``
    (the broker took it and lost it) or ``fail`` (the publish never happened)."""

    def __init__(self, settings: Settings) -> None:
        self._real = celery_publisher(settings)
        self.mode = "normal"
        self.counts: Counter[str] = Counter()

    def __call__(self, task: str, args: list[str]) -> None:
        self.counts[self.mode] += 1
        if self.mode == "drop":
            return
        if self.mode == "fail":
            raise ConnectionError("drill: the publish after commit never happened")
        self._real(task, args)


class Beat:
    """What ``draftgate serve beat`` schedules, run in a thread of the drill: the sweeper every
    sweep interval and a signed checkpoint of the audit head every checkpoint interval."""

    def __init__(self, runtime: Runtime, timing: Timing) -> None:
        self.runtime = runtime
        self.timing = timing
        self.publish: Publisher = celery_publisher(runtime.settings)
        self.key = checkpoints.ensure_key(runtime.settings.resolved_checkpoint_key_file())
        self.sweeps = 0
        self.published = 0
        self.republished = 0
        self.checkpoints = 0
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drill-beat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def checkpoint(self) -> int:
        with session_scope(self.runtime.engine) as session:
            made = len(checkpoints.create(session, self.key, now=utcnow(), tenant=TENANT))
        self.checkpoints += made
        return made

    def _run(self) -> None:
        next_checkpoint = time.monotonic() + self.timing.checkpoint_interval_seconds
        while not self._stop.wait(self.timing.sweep_interval_seconds):
            try:
                report = sweeper.sweep(self.runtime, self.publish)
                self.sweeps += 1
                self.published += report.published
                self.republished += report.republished
            except Exception as exc:  # an outage: the next tick tries again, as beat would
                self.errors[f"sweep: {type(exc).__name__}"] += 1
            if time.monotonic() >= next_checkpoint:
                next_checkpoint += self.timing.checkpoint_interval_seconds
                try:
                    self.checkpoint()
                except Exception as exc:
                    self.errors[f"checkpoint: {type(exc).__name__}"] += 1


class Client:
    """The agent and the approvers, through the real doors, retrying what is transient.

    Given several API replicas, each request goes to the next one (round-robin, as a load
    balancer would): nothing a client does is pinned to one replica. Thread-safe."""

    def __init__(
        self, runtime: Runtime, demo: dict[str, Any], api_urls: str | list[str], label: str
    ) -> None:
        self.demo = demo
        self.label = label
        self.runtime = runtime
        self.door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
        urls = [api_urls] if isinstance(api_urls, str) else api_urls
        self.https = [httpx.Client(base_url=url, timeout=15) for url in urls]
        self._turn = itertools.count()
        self.stats = ClientStats()
        self._lock = threading.Lock()

    def close(self) -> None:
        for http in self.https:
            http.close()

    def next_http(self) -> httpx.Client:
        return self.https[next(self._turn) % len(self.https)]

    def request_execution(self, index: int) -> Requested:
        """Propose a 1.00 USD refund, approve it with as many signatures as its policy
        needs, and request its execution; returns the execution the API accepted."""
        draft_id = self.propose(index)
        self.approve(draft_id)
        return self.execute(draft_id, index)

    def execute(self, draft_id: str, index: int = -1) -> Requested:
        """Request the execution of an approved draft (a repeated request: the same one)."""
        response = self._http("POST", f"/v1/drafts/{draft_id}/execute", "approver_alice")
        if response.status_code != 202:
            raise DrillError(f"execute {draft_id}: {response.status_code} {response.text}")
        return Requested(index, draft_id, response.json()["execution_id"], time.monotonic())

    def order_of(self, index: int) -> str:
        """The order flow ``index`` refunds: one of its own (harness.orders), since refunds
        approved together on one order would refuse each other (SOURCE_CHANGED)."""
        return self._retrying(lambda: flow_order(self.runtime.engine, self.label, index))

    def propose(self, index: int) -> str:
        arguments = {
            "order_id": self.order_of(index),
            "amount": {"amount_minor": AMOUNT_MINOR, "currency": "USD"},
            "reason": "damaged",
            "idempotency_key": f"drill-{self.label}-{index}",  # a retry returns the same draft
        }
        result = self._retrying(
            lambda: self.door.call("propose_refund", arguments, new_trace_id(), None)
        )
        return str(result["draft_id"])

    def approve(self, draft_id: str) -> None:
        for approver in ("alice", "bob"):
            draft = self.draft(draft_id)
            if draft["status"] != "proposed":
                return
            if any(a["approver"] == approver and a["counts"] for a in draft["approvals"]):
                continue
            body = self._signed(draft, approver)
            path = f"/v1/drafts/{draft_id}/approvals"
            response = self._http("POST", path, f"approver_{approver}", json=body)
            if response.status_code == 409 and self._approved_by(draft_id, approver):
                continue  # an earlier try was recorded although its answer was lost
            if response.status_code != 201:
                raise DrillError(f"approve {draft_id}: {response.status_code} {response.text}")
        if self.draft(draft_id)["status"] != "approved":
            raise DrillError(f"{draft_id} is not approved after every approver signed")

    def draft(self, draft_id: str) -> dict[str, Any]:
        response = self._http("GET", f"/v1/drafts/{draft_id}", "approver_alice")
        if response.status_code != 200:
            raise DrillError(f"get {draft_id}: {response.status_code} {response.text}")
        body: dict[str, Any] = response.json()
        return body

    def verify_audit(self) -> dict[str, Any]:
        response = self._http("GET", "/v1/audit/verify", "auditor")
        if response.status_code != 200:
            raise DrillError(f"audit verify: {response.status_code} {response.text}")
        body: dict[str, Any] = response.json()
        return body

    def _approved_by(self, draft_id: str, approver: str) -> bool:
        draft = self.draft(draft_id)
        return any(a["approver"] == approver and a["counts"] for a in draft["approvals"])

    def _signed(self, draft: dict[str, Any], approver: str) -> dict[str, Any]:
        key_file = self.demo["approvers"][approver]["private_key_file"]
        return signed_decision(draft, approver=approver, key_file=key_file)

    def _http(self, method: str, path: str, token: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.demo['tokens'][token]}"}

        def once() -> httpx.Response:
            response = self.next_http().request(method, path, headers=headers, **kwargs)
            self._count_status(response)
            if response.status_code >= 500 or response.status_code == 429:
                raise Transient(f"HTTP {response.status_code} on {method} {path}")
            return response

        return self._retrying(once)

    def _count_status(self, response: httpx.Response) -> None:
        status = response.status_code
        with self._lock:
            self.stats.statuses[status] += 1
            if status >= 500 and status not in self.stats.samples:
                kind = response.headers.get("content-type", "no content type")
                self.stats.samples[status] = f"{kind}: {response.text[:300]}"

    def _retrying(self, call: Callable[[], T]) -> T:
        """Call until it answers or a non-transient refusal comes back, within a bound."""
        deadline = time.monotonic() + CLIENT_RETRY_SECONDS
        delay = 0.1
        while True:
            try:
                return call()
            except DrillError:
                raise  # the call itself decided: not worth another try
            except DomainError as error:
                if not (error.retryable or error.category is Category.TRANSIENT):
                    raise DrillError(f"refused: {error.code} {error.message}") from error
                problem: Exception = error
            except (Transient, httpx.TransportError, OSError) as exc:
                problem = exc
            except Exception as exc:  # e.g. the database went away under the door's session
                problem = exc
            with self._lock:
                self.stats.retries += 1
                self.stats.errors[type(problem).__name__] += 1
            if time.monotonic() > deadline:
                raise DrillError(f"gave up after {CLIENT_RETRY_SECONDS} s: {problem}")
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


class Transient(Exception):
    """An answer worth retrying (a 5xx, a 429, a retryable tool error)."""


class DrillError(RuntimeError):
    """The drill could not drive the system as a user would (reported, never hidden)."""


@dataclass
class Stack:
    """Everything one scenario runs on."""

    label: str
    root: Path
    settings: Settings
    runtime: Runtime
    demo: dict[str, Any]
    api_url: str
    publisher: SwitchablePublisher
    beat: Beat
    client: Client
    postgres: PrivatePostgres
    redis: PrivateRedis
    ledger: Ledger
    timing: Timing
    deployment: Deployment
    workers: list[WorkerProcess] = field(default_factory=list)
    requested: list[Requested] = field(default_factory=list)
    concurrency: int = 2

    def start_worker(self) -> WorkerProcess:
        worker = self.deployment.start_worker(
            name=f"drill-{self.label}",
            concurrency=self.concurrency,
            log=self.root / "logs" / "worker.log",
        )
        self.workers.append(worker)
        return worker

    def live_workers(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.alive]

    def request(self, index: int) -> Requested:
        requested = self.client.request_execution(index)
        self.requested.append(requested)
        return requested

    def execution_ids(self) -> list[str]:
        return [r.execution_id for r in self.requested]


@contextmanager
def scenario_stack(
    label: str,
    base: Path,
    *,
    postgres: PrivatePostgres,
    redis: PrivateRedis,
    template: str,
    ledger: Ledger,
    timing: Timing,
) -> Iterator[Stack]:
    """A fresh database (a copy of the migrated template), the demo, the API and the beat;
    the scenario starts its own workers. Everything is stopped when the block ends."""
    root = base / label
    database_url = postgres.create_database(f"drill_{label}", template=template)
    settings = scenario_settings(
        root, database_url=database_url, broker_url=redis.url, queue=f"drill-{label}", timing=timing
    )
    with ExitStack() as stack:
        deployment = Deployment(settings, ledger=ledger)
        stack.callback(deployment.close, kill=True)  # nothing here is worth a warm shutdown
        runtime = deployment.runtime
        demo = seed(runtime)
        publisher = SwitchablePublisher(settings)
        api_url = deployment.serve_api(publisher=publisher)
        client = Client(runtime, demo, api_url, label)
        stack.callback(client.close)
        beat = Beat(runtime, timing)
        drill = Stack(
            label, root, settings, runtime, demo, api_url, publisher, beat, client,
            postgres, redis, ledger, timing, deployment,
        )  # fmt: skip
        stack.callback(beat.stop)
        beat.start()
        yield drill
