"""The faults, one scenario each. Every scenario drives its executions through the real doors
while it injects its fault, and returns what it injected; the drill then waits for the
system to settle and counts (see figures.py).

- ``sigkill``: the whole worker process group is SIGKILLed at random moments (half of them
  aimed at the crash window between the downstream refund and its record) and restarted.
- ``redis``: executions wait in Redis while no worker runs, Redis is restarted (SIGTERM, its
  append-only file kept); later Redis crashes (SIGKILL) and restarts mid-load.
- ``postgres``: PostgreSQL restarts mid-load (fast: connections cut), later crashes
  (immediate: WAL recovery) and stays down for seconds while the load goes on.
- ``lost``: messages are lost three ways: the broker's queue is wiped with executions in it,
  the broker swallows them, and the publish after commit never happens.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, col, func, select

from reliability.stack import DrillError, Stack, Timing
from service.executions.models import FINISHED, Execution, ExecutionStatus, OutboxMessage
from service.shop.models import Refund

POLL_SECONDS = 0.1
FIRST_AIM_SECONDS = 60  # the first kill waits this long for a refund in the crash window


@dataclass(frozen=True)
class Plan:
    executions: int
    kills: int  # at most this many SIGKILLs in the sigkill scenario
    max_uptime_seconds: float = 4.0  # a worker lives at most this long between kills
    finish_timeout_seconds: float = 180.0  # how long the system may take to settle


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    timing: Timing
    run: Callable[[Stack, Plan, random.Random], dict[str, Any]]


class Load:
    """Requests executions in a background thread, as approvers would, through the outage."""

    def __init__(self, stack: Stack, indices: Iterable[int], *, pace_seconds: float = 0.0) -> None:
        self.stack = stack
        self.indices = list(indices)
        self.pace_seconds = pace_seconds
        self.errors: list[str] = []
        self.count = 0
        self._thread = threading.Thread(target=self._run, name="drill-load", daemon=True)

    def start(self) -> Load:
        self._thread.start()
        return self

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self, timeout: float = 900) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.errors.append("the load did not finish in time")

    def _run(self) -> None:
        for index in self.indices:
            try:
                self.stack.request(index)
            except DrillError as error:
                self.errors.append(f"execution {index}: {error}")
            self.count += 1
            if self.pace_seconds:
                time.sleep(self.pace_seconds)


def request_all(stack: Stack, indices: Iterable[int]) -> list[str]:
    load = Load(stack, indices).start()
    load.join()
    return load.errors


# --- looking at the system --------------------------------------------------------------------


def unfinished(stack: Stack) -> int:
    ids = stack.execution_ids()
    if not ids:
        return 0
    with Session(stack.runtime.engine) as session:
        statement = select(func.count()).where(
            col(Execution.id).in_(ids), col(Execution.status).not_in(list(FINISHED))
        )
        return int(session.exec(statement).one())


def in_crash_window(stack: Stack) -> int:
    """Executions whose refund is made but whose outcome is not recorded yet."""
    with Session(stack.runtime.engine) as session:
        statement = (
            select(func.count())
            .select_from(Execution)
            .join(Refund, col(Refund.idempotency_key) == col(Execution.idempotency_key))
            .where(col(Execution.status) == ExecutionStatus.RUNNING)
        )
        return int(session.exec(statement).one())


def unpublished_outbox(stack: Stack) -> int:
    with Session(stack.runtime.engine) as session:
        statement = select(func.count()).where(col(OutboxMessage.published_at).is_(None))
        return int(session.exec(statement).one())


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_SECONDS)
    return True


def wait_settled(stack: Stack, timeout: float) -> bool:
    """Every requested execution finished (or the timeout passed: those are lost)."""
    return wait_until(lambda: _quietly(lambda: unfinished(stack) == 0), timeout)


def _quietly(check: Callable[[], bool]) -> bool:
    try:
        return check()
    except Exception:  # the database is restarting: not settled yet
        return False


def queue_length(stack: Stack) -> int:
    client = stack.redis.client()
    try:
        return int(client.llen(stack.settings.broker_queue))
    finally:
        client.close()


# --- 1. SIGKILL -------------------------------------------------------------------------------


def sigkill(stack: Stack, plan: Plan, rng: random.Random) -> dict[str, Any]:
    worker = stack.start_worker()
    load = Load(stack, range(plan.executions)).start()
    kills = aimed = in_window = 0
    while kills < plan.kills and not (load.done and _quietly(lambda: unfinished(stack) == 0)):
        uptime = rng.uniform(0.3, plan.max_uptime_seconds)
        # Half the kills (and always the first) aim at the window between a refund and its
        # record; the others fall wherever the random uptime ends.
        if kills == 0 or rng.random() < 0.5:
            aimed += 1
            patience = FIRST_AIM_SECONDS if kills == 0 else uptime
            wait_until(lambda: _quietly(lambda: in_crash_window(stack) > 0), patience)
        else:
            time.sleep(uptime)
        caught = _quietly(lambda: in_crash_window(stack) > 0)
        worker.kill()
        kills += 1
        in_window += caught
        time.sleep(rng.uniform(0, 1.0))  # down for a moment: deliveries pile up
        worker = stack.start_worker()
    load.join()
    return {
        "sigkills": kills,
        "aimed_at_crash_window": aimed,
        "killed_with_a_refund_unrecorded": in_window,
        "worker_restarts": kills,
        "load_errors": load.errors,
    }


# --- 2. Redis restart -------------------------------------------------------------------------


def redis_restart(stack: Stack, plan: Plan, rng: random.Random) -> dict[str, Any]:
    first = plan.executions // 2
    errors = request_all(stack, range(first))  # no worker yet: they wait in Redis
    wait_until(lambda: unpublished_outbox(stack) == 0, 30)
    queued_before = queue_length(stack)
    stack.redis.restart()  # SIGTERM, as docker restart: the append-only file is synced
    stack.ledger.add("pids", stack.redis.pid)
    queued_after = queue_length(stack)
    stack.start_worker()
    load = Load(stack, range(first, plan.executions), pace_seconds=0.05).start()
    wait_until(lambda: load.count >= (plan.executions - first) // 2 or load.done, 120)
    time.sleep(rng.uniform(0, 0.5))
    stack.redis.restart(crash=True)  # SIGKILL mid-load: the last second of writes may be gone
    stack.ledger.add("pids", stack.redis.pid)
    load.join()
    return {
        "graceful_restarts_with_executions_queued": 1,
        "messages_queued_before_restart": queued_before,
        "messages_queued_after_restart": queued_after,
        "crash_restarts_mid_load": 1,
        "load_errors": errors + load.errors,
    }


# --- 3. PostgreSQL restart --------------------------------------------------------------------


def postgres_restart(stack: Stack, plan: Plan, rng: random.Random) -> dict[str, Any]:
    stack.start_worker()
    load = Load(stack, range(plan.executions), pace_seconds=0.05).start()
    third = max(plan.executions // 3, 1)
    wait_until(lambda: load.count >= third or load.done, 120)
    running = unfinished(stack)
    stack.postgres.restart("fast")  # every connection cut, mid-load
    wait_until(lambda: load.count >= 2 * third or load.done, 120)
    time.sleep(rng.uniform(0, 0.5))
    stack.postgres.stop("immediate")  # a crash: no shutdown checkpoint
    outage = rng.uniform(2.0, 4.0)
    time.sleep(outage)  # down while the load, the worker and the sweeper keep trying
    stack.postgres.start()  # recovers from its WAL
    load.join()
    return {
        "fast_restarts_mid_load": 1,
        "unfinished_at_first_restart": running,
        "crash_restarts": 1,
        "outage_seconds": round(outage, 1),
        "load_errors": load.errors,
    }


# --- 4. Lost broker messages ------------------------------------------------------------------


def lost_messages(stack: Stack, plan: Plan, rng: random.Random) -> dict[str, Any]:
    third = max(plan.executions // 3, 1)
    # No worker yet: these wait in the queue until the broker forgets everything it held.
    errors = _requested_while(stack, "normal", range(third))
    wait_until(lambda: unpublished_outbox(stack) == 0, 30)
    time.sleep(rng.uniform(0, 0.5))
    client = stack.redis.client()
    try:
        wiped = int(client.llen(stack.settings.broker_queue))
        client.flushdb()
    finally:
        client.close()
    stack.start_worker()
    errors += _requested_while(stack, "drop", range(third, 2 * third))  # taken, then lost
    errors += _requested_while(stack, "fail", range(2 * third, plan.executions))  # never sent
    return {
        "messages_wiped_from_the_queue": wiped,
        "dropped_by_the_broker": stack.publisher.counts["drop"],
        "never_published": stack.publisher.counts["fail"],
        "load_errors": errors,
    }


def _requested_while(stack: Stack, mode: str, indices: range) -> list[str]:
    """Request executions while the API's publisher is in ``mode``, and wait until the API
    has tried to publish each of them (it does so after its response, in the background)."""
    publisher = stack.publisher
    before = sum(publisher.counts.values())
    publisher.mode = mode
    errors = request_all(stack, indices)
    wait_until(lambda: sum(publisher.counts.values()) - before >= len(indices), 30)
    publisher.mode = "normal"
    return errors


SCENARIOS = [
    Scenario(
        "sigkill",
        "SIGKILL of the worker group at random moments",
        Timing(pause_after_downstream_ms=400),
        sigkill,
    ),
    Scenario("redis", "Redis restart with executions queued", Timing(), redis_restart),
    Scenario(
        "postgres",
        "PostgreSQL restart mid-load",
        Timing(pause_after_downstream_ms=200),
        postgres_restart,
    ),
    Scenario("lost", "lost broker messages", Timing(), lost_messages),
]
