"""What B2 and B3 run on: a draftgate stack (API and worker as real processes) and a bare
Celery worker doing the same shop write, on the same broker and the same kind of database.

Two kinds, as the tests have them: ``embedded`` (SQLite, kombu's SQLAlchemy broker on a
SQLite file, the solo worker ``draftgate dev`` runs) and ``redis`` (PostgreSQL + Redis).
Everything is private to the run: a temp state dir, a ``dg_bench_*`` database dropped at the
end, Redis queue names of its own (deleted at the end), free loopback ports.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import redis
from sqlmodel import col, select

from bench.bare_celery import TASK, bare_config, bare_worker_env
from bench.common import postgres_database
from harness.approvals import approve, bearer
from harness.deployment import Deployment
from harness.orders import Orders
from harness.processes import ChildProcess, WorkerProcess
from harness.settings import deployment_settings
from service.config import Settings
from service.db import read_scope, session_scope
from service.executions.models import Execution, ExecutionAttempt
from service.runtime import Runtime
from service.tokens.actions import authenticate
from service.toolcalls.actions import call_tool

KINDS = ("embedded", "redis")
# Delivered 3 days ago, 785.00 USD: the bare Celery baseline's refunds of 1..250 cents add
# up to 313.75 USD. draftgate's drafts each refund an order of their own (harness.orders):
# refunds approved together on one order would refuse each other (SOURCE_CHANGED).
ORDER = "ORD-1004"
MAX_DRAFTS = 250
POLL_SECONDS = 0.002
REDIS_DB = 0


@dataclass
class DraftgateStack:
    kind: str
    settings: Settings
    runtime: Runtime
    demo: dict[str, Any]
    api_url: str
    worker: WorkerProcess
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=60))
    mcp_url: str = ""  # with ``draftgate_stack(mcp=True)``: ``draftgate serve mcp``
    orders: Orders | None = None

    @property
    def approver_headers(self) -> dict[str, str]:
        return bearer(self.demo["tokens"]["approver_alice"])

    def approved_drafts(self, count: int, *, first_cents: int = 1) -> list[str]:
        """``count`` refund drafts proposed by the agent and approved by alice (signed)."""
        assert first_cents + count - 1 <= MAX_DRAFTS, "the order cannot refund that much"
        if self.orders is None:
            self.orders = Orders(self.runtime.engine, 6)
        drafts = []
        for cents, order in zip(
            range(first_cents, first_cents + count), self.orders.take(count), strict=True
        ):
            draft_id = self._propose(cents, order)
            response = approve(self.api_url, self.demo, draft_id, "alice")
            assert response.status_code == 201, response.text
            drafts.append(draft_id)
        return drafts

    def request_execution(self, draft_id: str) -> str:
        response = self.http.post(
            f"{self.api_url}/v1/drafts/{draft_id}/execute", headers=self.approver_headers
        )
        assert response.status_code == 202, response.text
        return str(response.json()["execution_id"])

    def finished(self, execution_ids: list[str]) -> dict[str, tuple[str, datetime | None]]:
        """Status and recorded finish time of each finished execution among these."""
        # A read scope: on SQLite it takes no write lock, so watching never slows the worker.
        with read_scope(self.runtime.engine) as session:
            rows = session.exec(select(Execution).where(col(Execution.id).in_(execution_ids)))
            return {
                row.id: (row.status.value, row.finished_at)
                for row in rows
                if row.finished_at is not None
            }

    def wait_finished(self, execution_id: str, timeout: float = 60) -> tuple[str, datetime]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.finished([execution_id]).get(execution_id)
            if found is not None and found[1] is not None:
                return found[0], found[1]
            if time.monotonic() > deadline:
                raise TimeoutError(f"execution {execution_id} did not finish in {timeout} s")
            time.sleep(POLL_SECONDS)

    def attempt_started(self, execution_id: str) -> datetime | None:
        """When the worker claimed the execution (its first attempt began)."""
        with read_scope(self.runtime.engine) as session:
            statement = select(ExecutionAttempt.started_at).where(
                col(ExecutionAttempt.execution_id) == execution_id,
                col(ExecutionAttempt.number) == 1,
            )
            return session.exec(statement).one_or_none()

    def _propose(self, cents: int, order: str) -> str:
        arguments = {
            "order_id": order,
            "amount": {"amount_minor": cents, "currency": "USD"},
            "reason": "damaged",
        }
        with session_scope(self.runtime.engine) as session:
            agent = authenticate(session, self.demo["tokens"]["agent"])
        result = call_tool(
            self.runtime,
            agent,
            name="propose_refund",
            arguments=arguments,
            trace_id=None,
            on_refusal=_refusal_is_a_bench_bug,
        )
        return str(result["draft_id"])


def _refusal_is_a_bench_bug(_session: Any, error: Exception) -> None:
    raise AssertionError(f"the bench's proposal was refused: {error}")


@contextmanager
def database(kind: str, workdir: Path) -> Iterator[str]:
    """The database of a kind: a SQLite file, or a private PostgreSQL one (dropped after)."""
    if kind == "embedded":
        yield f"sqlite:///{workdir / 'draftgate.db'}"
        return
    with postgres_database() as url:
        yield url


@contextmanager
def draftgate_stack(
    kind: str, workdir: Path, *, concurrency: int = 1, mcp: bool = False
) -> Iterator[DraftgateStack]:
    """Seeded database, ``draftgate serve api`` and ``draftgate serve worker`` (and ``serve
    mcp`` when asked), each a process of its own, all ready."""
    with ExitStack() as stack:
        url = stack.enter_context(database(kind, workdir))
        settings = deployment_settings(
            workdir, database_url=url, queue=f"bench-{secrets.token_hex(6)}"
        )
        if kind == "redis":  # once every process has stopped
            stack.callback(
                _delete_redis_keys, settings.resolved_broker_url(), settings.broker_queue
            )
        deployment = stack.enter_context(Deployment(settings, log_dir=workdir))
        demo = deployment.prepare()
        api = deployment.start_http("api", wait=False)
        door = deployment.start_http("mcp", wait=False) if mcp else None
        worker = deployment.start_worker(concurrency=concurrency)
        api.wait_ready()
        result = DraftgateStack(kind, settings, deployment.runtime, demo, api.url, worker)
        if door is not None:
            door.wait_ready()
            result.mcp_url = door.mcp_url
        stack.callback(result.http.close)
        yield result


def _delete_redis_keys(url: str, queue: str, *keys: str) -> None:
    """The queue, kombu's binding sets for it, and any other keys of the run."""
    client = redis.Redis.from_url(url)
    try:
        client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}", *keys)
    finally:
        client.close()


# --- bare Celery ----------------------------------------------------------------------------


@dataclass
class BareCelery:
    """A bare Celery client and its worker process, on the stack's broker and database."""

    client: Any
    worker: ChildProcess
    queue: str
    result_backend: str
    task_ids: list[str] = field(default_factory=list)

    def send(self, cents: int) -> Any:
        result = self.client.send_task(
            TASK, args=["demo", ORDER, cents, f"bare-{secrets.token_hex(8)}"]
        )
        self.task_ids.append(result.id)
        return result

    def round_trip(self, cents: int) -> str:
        """``delay().get()``: publish, let the worker write, wait for its result."""
        return str(self.send(cents).get(timeout=60, interval=POLL_SECONDS))


@contextmanager
def bare_celery(
    stack: DraftgateStack, workdir: Path, *, concurrency: int = 1, doorbell: bool = False
) -> Iterator[BareCelery]:
    """A bare Celery worker on the same broker (its own queue) and the same database."""
    from celery import Celery

    queue = f"bench-bare-{secrets.token_hex(6)}"
    broker = stack.settings.resolved_broker_url()
    if stack.kind == "embedded":
        if not doorbell:
            # A file of its own: draftgate's transport leaves its file in WAL mode, and the
            # stock baseline must be kombu's as it ships.
            broker = f"sqla+sqlite:///{workdir / f'broker-{queue}.db'}"
        backend = f"db+sqlite:///{workdir / f'results-{queue}.db'}"
    else:
        backend = broker
    env = {
        **os.environ,
        **bare_worker_env(
            broker_url=broker,
            result_backend=backend,
            queue=queue,
            database_url=stack.settings.resolved_database_url(),
            doorbell=doorbell,
        ),
    }
    pool = ["--pool=solo"] if stack.kind == "embedded" else [f"--concurrency={concurrency}"]
    worker = BareWorker(
        f"bare-{queue}",
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.bare_celery",
            "worker",
            "--loglevel=INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            f"--hostname=bare-{queue}@%h",
            *pool,
        ],
        env,
        workdir / f"bare-{queue}.log",
    )
    client = Celery("bench-bare-client", set_as_current=False)
    client.conf.update(
        bare_config(broker_url=broker, result_backend=backend, queue=queue, doorbell=doorbell)
    )
    bare = BareCelery(client, worker, queue, backend)
    try:
        worker.start()
        yield bare
    finally:
        worker.stop(grace=20)
        if stack.kind == "redis":
            _delete_redis_keys(
                broker, queue, *(f"celery-task-meta-{task_id}" for task_id in bare.task_ids)
            )
        client.close()


class BareWorker(ChildProcess):
    """A bare Celery worker process: ready once Celery says it consumes."""

    ready_marker = " ready."
