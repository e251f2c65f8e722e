"""Every Prometheus metric draftgate exposes (docs/metrics.md), and the calls that feed them.

Two kinds. *Live* metrics (counters, histograms) are observed where things happen: a
tool call ends (the MCP door), an audit append, a quorum reached, an execution finished.
Each costs a label lookup and an increment; nothing on a request path touches the database
for them. Observations made inside a unit of work count only once it has committed
(``on_commit``), so a rolled-back approval is never counted. *State* gauges (drafts by status,
queued executions, outbox lag) are read from the database at scrape time by
``DatabaseCollector``, in a read-only snapshot; a database that is down gives
``draftgate_database_up 0``, never a failed scrape.

Labels never carry anything an agent or approver writes: tools come from the registry
(anything else is ``<unknown>``), outcomes and reasons are catalogue error codes (anything
else is ``OTHER``), statuses and actions are enums and registry names. No tenant labels.

Multiprocess: with ``PROMETHEUS_MULTIPROC_DIR`` set before prometheus_client is first
imported, live values go to files in that directory and a scrape sums every process's files
(uvicorn workers, Celery prefork children); without it, one process's memory is read.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from functools import cache
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client import values as prometheus_values
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.gc_collector import GC_COLLECTOR
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.platform_collector import PLATFORM_COLLECTOR
from prometheus_client.process_collector import PROCESS_COLLECTOR
from prometheus_client.registry import Collector
from sqlalchemy import Engine, event, func, select
from sqlalchemy.orm import Session, SessionTransaction
from sqlmodel import col

from service.drafts.models import Draft, DraftStatus
from service.errors import DomainError
from service.executions.models import Execution, ExecutionStatus, OutboxMessage
from service.sql import utcnow

logger = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_LATEST
UNKNOWN_TOOL = "<unknown>"
OTHER_CODE = "OTHER"
OK = "ok"

# In multiprocess mode the first metric below already writes a file there: a directory that
# does not exist yet would make this import fail.
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

# draftgate's own live metrics; state gauges come from DatabaseCollector at scrape time.
REGISTRY = CollectorRegistry()
# No ``*_created`` series (prometheus_client's default in plain mode, absent in multiprocess
# mode): they would double the series count and differ between the two modes.
disable_created_metrics()  # type: ignore[no-untyped-call]

TOOL_CALLS = Counter(
    "draftgate_tool_calls",
    "MCP tool calls by tool and outcome (ok, or the error code the agent was given).",
    ["tool", "outcome"],
    registry=REGISTRY,
)
TOOL_CALL_SECONDS = Histogram(
    "draftgate_tool_call_duration_seconds",
    "Time from a tool call reaching the MCP door to its answer, by tool and outcome.",
    ["tool", "outcome"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
REFUSALS = Counter(
    "draftgate_refusals",
    "Refused attempts recorded in the audit log (any door, the worker), by error code.",
    ["reason"],
    registry=REGISTRY,
)
APPROVAL_SECONDS = Histogram(
    "draftgate_approval_latency_seconds",
    "Time from a draft's creation to the approval that completed its quorum, by action.",
    ["action"],
    buckets=(1, 10, 60, 300, 900, 1800, 3600, 4 * 3600, 8 * 3600, 86_400, 3 * 86_400, 7 * 86_400),
    registry=REGISTRY,
)
REVIEW_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)
DWELL_SECONDS = Histogram(
    "draftgate_review_dwell_seconds",
    "Time from an approver first seeing a draft's revision to signing their decision on it, "
    "by action and decision (decisions with a recorded view only).",
    ["action", "decision"],
    buckets=REVIEW_BUCKETS,
    registry=REGISTRY,
)
DECISION_SECONDS = Histogram(
    "draftgate_decision_latency_seconds",
    "Time from a draft's proposal to each signed decision on it, by action and decision.",
    ["action", "decision"],
    buckets=(1, 10, 60, 300, 900, 1800, 3600, 4 * 3600, 8 * 3600, 86_400, 3 * 86_400, 7 * 86_400),
    registry=REGISTRY,
)
OVERSIGHT_FLAGS = Counter(
    "draftgate_oversight_flags",
    "Approvers flagged for hasty decisions (oversight.flagged), by the action of the last one.",
    ["action"],
    registry=REGISTRY,
)
EXECUTION_SECONDS = Histogram(
    "draftgate_execution_duration_seconds",
    "Time from an execution request to its final state (succeeded, failed, expired).",
    ["action", "status"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
    registry=REGISTRY,
)
AUDIT_APPEND_SECONDS = Histogram(
    "draftgate_audit_append_duration_seconds",
    "Time to append one unit of work's events to the hash chains (head lock and inserts).",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
    registry=REGISTRY,
)


def multiprocess() -> bool:
    """True when prometheus_client was imported with PROMETHEUS_MULTIPROC_DIR set."""
    return prometheus_values.ValueClass is not prometheus_values.MutexValue


# --- bounded label values -------------------------------------------------------------------


@cache
def _catalogue_codes() -> frozenset[str]:
    from service.catalogue import declared  # imports every domain's errors: once, when needed

    return frozenset(declared())


def bounded_code(code: object) -> str:
    """``code`` if it is in the error catalogue, else ``OTHER`` (a label set stays bounded)."""
    return code if isinstance(code, str) and code in _catalogue_codes() else OTHER_CODE


def outcome_of(error: BaseException | None) -> str:
    """``ok``, or the catalogue code of the refusal (any other exception: ``INTERNAL_ERROR``)."""
    if error is None:
        return OK
    return bounded_code(error.code if isinstance(error, DomainError) else "INTERNAL_ERROR")


# --- observations -----------------------------------------------------------------------------


def tool_call_ended(tool: str, outcome: str, seconds: float) -> None:
    """One tool call answered; ``tool`` and ``outcome`` must already be bounded."""
    TOOL_CALLS.labels(tool, outcome).inc()
    TOOL_CALL_SECONDS.labels(tool, outcome).observe(seconds)


def audit_appended(session: Session, events: Iterable[Any], started: float) -> None:
    """The chain append of one unit of work took from ``started`` (perf_counter) to now; its
    refusal events count once the unit commits (a flood's record carries its suppressed
    count, ``suppressed_before``)."""
    AUDIT_APPEND_SECONDS.observe(time.perf_counter() - started)
    refusals: dict[str, int] = {}
    for recorded in events:
        if recorded.type.endswith("refused"):
            reason = _refusal_reason(recorded.data)
            suppressed = recorded.data.get("suppressed_before")
            count = 1 + (suppressed if isinstance(suppressed, int) and suppressed > 0 else 0)
            refusals[reason] = refusals.get(reason, 0) + count
    for reason, count in refusals.items():
        on_commit(session, REFUSALS.labels(reason).inc, count)


def _refusal_reason(data: dict[str, Any]) -> str:
    """The code of a refusal's error (service.audit.refusals records one with every refusal;
    an alarm such as ``security.checkpoint_refused`` has none and counts as ``OTHER``)."""
    error = data.get("error")
    return bounded_code(error.get("code") if isinstance(error, dict) else None)


def quorum_reached(session: Session, draft: Draft, now: datetime) -> None:
    """The approval that completes ``draft``'s quorum; counted when it commits."""
    seconds = max((now - draft.created_at).total_seconds(), 0.0)
    on_commit(session, APPROVAL_SECONDS.labels(draft.action).observe, seconds)


def decision_reviewed(
    session: Session, action: str, decision: str, dwell_ms: int | None, latency_ms: int
) -> None:
    """A signed decision's dwell (if its revision was seen first) and latency; counted when
    the decision commits."""
    if dwell_ms is not None:
        on_commit(session, DWELL_SECONDS.labels(action, decision).observe, dwell_ms / 1000)
    on_commit(session, DECISION_SECONDS.labels(action, decision).observe, latency_ms / 1000)


def oversight_flagged(session: Session, action: str) -> None:
    on_commit(session, lambda _: OVERSIGHT_FLAGS.labels(action).inc(), 1.0)


def execution_finished(session: Session, execution: Execution) -> None:
    """``execution`` reached a final state in this unit of work; counted when it commits."""
    finished = execution.finished_at or utcnow()
    seconds = max((finished - execution.created_at).total_seconds(), 0.0)
    histogram = EXECUTION_SECONDS.labels(execution.action, execution.status.value)
    on_commit(session, histogram.observe, seconds)


# --- after commit -----------------------------------------------------------------------------

_ON_COMMIT = "draftgate.metrics.on_commit"


def on_commit(session: Session, observe: Callable[[float], None], value: float) -> None:
    """Call ``observe(value)`` when the session's transaction commits; drop it on rollback."""
    session.info.setdefault(_ON_COMMIT, []).append((observe, value))


@event.listens_for(Session, "after_commit")
def _after_commit(session: Session) -> None:
    if session.in_nested_transaction():  # a savepoint released: the unit has not committed
        return
    for observe, value in session.info.pop(_ON_COMMIT, ()):
        observe(value)


@event.listens_for(Session, "after_transaction_end")
def _after_transaction_end(session: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None:  # the unit ended without a commit: nothing happened
        session.info.pop(_ON_COMMIT, None)


# --- state read at scrape time ------------------------------------------------------------------


class DatabaseCollector(Collector):
    """Drafts by status, queued executions and outbox lag, read in one read-only snapshot
    (indexed aggregates); ``draftgate_database_up`` says whether that worked."""

    def __init__(self, engine: Engine, *, redis_url: str | None = None, queue: str = "") -> None:
        self.engine = engine
        self.redis_url = redis_url
        self.queue = queue

    def describe(self) -> list[Metric]:
        return list(state_families(broker=bool(self.redis_url)))

    def collect(self) -> Iterator[Metric]:
        drafts, up, queued, lag = state_families(broker=False)
        try:
            state = self._read()
        except Exception as exc:  # a scrape reports the outage, it does not fail
            logger.warning("metrics: the database could not be read (%s)", type(exc).__name__)
            up.add_metric([], 0)
            yield up
        else:
            up.add_metric([], 1)
            counts, waiting, oldest = state
            for status in DraftStatus:
                drafts.add_metric([status.value], counts.get(status.value, 0))
            queued.add_metric([], waiting)
            lag.add_metric([], max((utcnow() - oldest).total_seconds(), 0.0) if oldest else 0.0)
            yield from (up, drafts, queued, lag)
        if self.redis_url:
            yield from self._broker()

    def _read(self) -> tuple[dict[str, int], int, datetime | None]:
        from service.db import read_scope  # service.db imports the chain, which imports us

        status = col(Draft.status)
        with read_scope(self.engine) as session:
            by_status = session.execute(
                select(status, func.count()).group_by(col(Draft.tenant), status)
            ).all()
            waiting = session.execute(
                select(func.count()).where(col(Execution.status) == ExecutionStatus.QUEUED)
            ).scalar_one()
            oldest = session.execute(
                select(func.min(col(OutboxMessage.created_at))).where(
                    col(OutboxMessage.published_at).is_(None)
                )
            ).scalar_one()
        counts: dict[str, int] = {}
        for value, count in by_status:  # summed over tenants: tenants are not labels
            counts[str(value)] = counts.get(str(value), 0) + int(count)
        return counts, int(waiting), oldest

    def _broker(self) -> Iterator[Metric]:
        family = _broker_family()
        try:
            family.add_metric([], float(_redis_client(self.redis_url or "").llen(self.queue)))
        except Exception as exc:  # the broker is down: the gauge is absent, the scrape answers
            logger.warning("metrics: the broker queue could not be read (%s)", type(exc).__name__)
            return
        yield family


def state_families(*, broker: bool) -> list[GaugeMetricFamily]:
    """The gauges ``DatabaseCollector`` yields, without samples."""
    families = [
        GaugeMetricFamily(
            "draftgate_drafts", "Drafts by stored status (all tenants).", labels=["status"]
        ),
        GaugeMetricFamily(
            "draftgate_database_up", "1 if this scrape could read the database, else 0."
        ),
        GaugeMetricFamily(
            "draftgate_executions_queued",
            "Executions requested and waiting to run (queued, or queued again for a retry).",
        ),
        GaugeMetricFamily(
            "draftgate_outbox_lag_seconds",
            "Age of the oldest outbox message not yet published to the broker (0: none).",
        ),
    ]
    return [*families, _broker_family()] if broker else families


def _broker_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "draftgate_broker_queue_messages",
        "Messages waiting in the broker's execution queue (Redis only).",
    )


@cache
def _redis_client(url: str) -> Any:
    import redis  # only a Redis broker needs it

    return redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)


# --- exposition -----------------------------------------------------------------------------------


class _Scrape(Collector):
    """The collectors of one scrape, read as one."""

    def __init__(self, sources: list[Collector]) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        for source in self.sources:
            yield from source.collect()


def live_collectors() -> list[Collector]:
    """This process's live metrics, or every process's in multiprocess mode (where the
    process_*/python_* metrics of one process would mean nothing, so they are left out)."""
    if multiprocess():
        return [MultiProcessCollector(None)]  # type: ignore[no-untyped-call]
    return [REGISTRY, PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR]


def scrape(state: DatabaseCollector | None = None) -> bytes:
    """The Prometheus text exposition: live metrics, and ``state`` read now if given."""
    sources = live_collectors()
    if state is not None:
        sources.append(state)
    return generate_latest(_Scrape(sources))


def database_collector(engine: Engine, broker_url: str, queue: str) -> DatabaseCollector:
    """The state collector of an API process; the broker's queue is read only for Redis."""
    redis_url = broker_url if broker_url.startswith(("redis://", "rediss://")) else None
    return DatabaseCollector(engine, redis_url=redis_url, queue=queue)


def metric_names() -> set[str]:
    """Every draftgate metric family name, as exposed (counters with ``_total``)."""
    live = {
        f"{family.name}_total" if family.type == "counter" else family.name
        for family in REGISTRY.collect()
    }
    return live | {family.name for family in state_families(broker=True)}


def check_bearer(expected: str, authorization: str | None) -> bool:
    """Whether a scrape may read /metrics: no token configured, or the right bearer token."""
    if not expected:
        return True
    scheme, _, presented = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode(), expected.encode()
    )
