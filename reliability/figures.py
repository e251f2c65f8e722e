"""What a scenario left behind, read from the database and the API after it settled:
executions by outcome, downstream refunds per draft, lost executions, and the audit chain."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Engine, func
from sqlmodel import Session, col, select

from reliability.stack import TENANT, Stack
from service.audit.models import AuditEvent
from service.drafts.models import Draft
from service.executions.models import FINISHED, AttemptResult, Execution, ExecutionAttempt
from service.shop.models import Refund

CHECKED_EVENTS = ("execution.requested", "execution.succeeded", "execution.failed")


@dataclass
class Figures:
    scenario: str
    faults: dict[str, Any]
    requested: int = 0
    succeeded: int = 0
    failed: int = 0
    expired: int = 0
    duplicates: int = 0  # downstream refunds beyond the first for one draft: must be 0
    lost: int = 0  # requested executions that never finished: must be 0
    refunds: int = 0
    mismatches: list[str] = field(default_factory=list)  # records disagreeing with the world
    attempts: int = 0
    lost_attempts: int = 0  # attempts whose worker died before recording an outcome
    republished: int = 0  # execution.republished events (the sweeper stepping in)
    chain: dict[str, Any] = field(default_factory=dict)
    unfinished: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    http_statuses: dict[str, int] = field(default_factory=dict)
    http_5xx_samples: dict[str, str] = field(default_factory=dict)
    client_retries: int = 0
    beat_errors: dict[str, int] = field(default_factory=dict)
    drill_errors: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    settle_seconds: float = 0.0  # from the last request until every execution had finished
    max_finish_seconds: float = 0.0  # the slowest execution, from its request to its end

    @property
    def chain_ok(self) -> bool:
        return bool(self.chain.get("ok")) and bool(self.chain.get("anchored"))

    @property
    def passed(self) -> bool:
        return (
            self.duplicates == 0
            and self.lost == 0
            and self.chain_ok
            and not self.mismatches
            and not self.drill_errors
            and self.requested > 0
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "chain_ok": self.chain_ok, "passed": self.passed}


def collect(engine: Engine, ids: list[str], figures: Figures) -> Figures:
    """Fill in the figures of the executions ``ids`` from the database (one snapshot per
    query); every refund of the tenant is counted, so one nobody requested shows too."""
    figures.requested = len(ids)
    with Session(engine) as session:
        executions = _executions(session, ids)
        refunds = _refunds_by_draft(session)
        drafts = _draft_statuses(session, [e.draft_id for e in executions.values()])
        events = _event_counts(session, ids)
        attempts = _attempt_results(session, ids)
        republished = _count_events(session, "execution.republished")
    statuses = Counter(e.status.value for e in executions.values())
    figures.succeeded = statuses["succeeded"]
    figures.failed = statuses["failed"]
    figures.expired = statuses["expired"]
    figures.refunds = sum(len(r) for r in refunds.values())
    figures.duplicates = sum(len(r) - 1 for r in refunds.values() if len(r) > 1)
    figures.attempts = sum(attempts.values())
    figures.lost_attempts = attempts[AttemptResult.LOST.value]
    figures.republished = republished
    unfinished = [e for e in executions.values() if e.status not in FINISHED]
    figures.lost = len(ids) - len(executions) + len(unfinished)
    figures.unfinished = [_describe(e) for e in unfinished]
    figures.failures = [_describe(e) for e in executions.values() if e.status.value == "failed"]
    figures.mismatches = _mismatches(executions, refunds, drafts, events)
    figures.max_finish_seconds = max(
        (
            (e.finished_at - e.created_at).total_seconds()
            for e in executions.values()
            if e.finished_at
        ),
        default=0.0,
    )
    return figures


def apply_client_stats(stack: Stack, figures: Figures) -> None:
    stats = stack.client.stats
    figures.http_statuses = {str(k): v for k, v in sorted(stats.statuses.items())}
    figures.http_5xx_samples = {str(k): v for k, v in stats.samples.items()}
    figures.client_retries = stats.retries
    figures.beat_errors = dict(stack.beat.errors)


def verify_chain(stack: Stack, timeout: float = 60) -> dict[str, Any]:
    """Sign a checkpoint of the final head, then ask the API to verify chain and checkpoints."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            stack.beat.checkpoint()
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    return stack.client.verify_audit()


# --- queries ----------------------------------------------------------------------------------


def _executions(session: Session, ids: list[str]) -> dict[str, Execution]:
    if not ids:
        return {}
    rows = session.exec(select(Execution).where(col(Execution.id).in_(ids))).all()
    return {e.id: e for e in rows}


def _refunds_by_draft(session: Session) -> dict[str, list[Refund]]:
    """Every refund of the tenant, by the draft its idempotency key names (any revision)."""
    grouped: dict[str, list[Refund]] = {}
    for refund in session.exec(select(Refund).where(col(Refund.tenant) == TENANT)).all():
        grouped.setdefault(refund.idempotency_key.rsplit(":", 1)[0], []).append(refund)
    return grouped


def _draft_statuses(session: Session, draft_ids: list[str]) -> dict[str, str]:
    if not draft_ids:
        return {}
    rows = session.exec(select(Draft.id, Draft.status).where(col(Draft.id).in_(draft_ids))).all()
    return {draft_id: str(getattr(status, "value", status)) for draft_id, status in rows}


def _event_counts(session: Session, ids: list[str]) -> Counter[tuple[str, str]]:
    if not ids:
        return Counter()
    statement = (
        select(AuditEvent.execution_id, AuditEvent.type, func.count())
        .where(col(AuditEvent.execution_id).in_(ids), col(AuditEvent.type).in_(CHECKED_EVENTS))
        .group_by(col(AuditEvent.execution_id), col(AuditEvent.type))
    )
    return Counter({(str(e), str(t)): int(n) for e, t, n in session.exec(statement).all()})


def _attempt_results(session: Session, ids: list[str]) -> Counter[str]:
    if not ids:
        return Counter()
    statement = (
        select(ExecutionAttempt.result, func.count())
        .where(col(ExecutionAttempt.execution_id).in_(ids))
        .group_by(col(ExecutionAttempt.result))
    )
    return Counter({str(getattr(r, "value", r)): int(n) for r, n in session.exec(statement).all()})


def _count_events(session: Session, type_: str) -> int:
    statement = select(func.count()).where(
        col(AuditEvent.tenant) == TENANT, col(AuditEvent.type) == type_
    )
    return int(session.exec(statement).one())


def _describe(execution: Execution) -> dict[str, Any]:
    return {
        "execution_id": execution.id,
        "draft_id": execution.draft_id,
        "status": execution.status.value,
        "attempts": execution.attempts,
        "publishes": execution.publishes,
        "error": execution.error,
        "lease_expires_at": str(execution.lease_expires_at),
        "republish_at": str(execution.republish_at),
        "updated_at": str(execution.updated_at),
    }


def _mismatches(
    executions: dict[str, Execution],
    refunds: dict[str, list[Refund]],
    drafts: dict[str, str],
    events: Counter[tuple[str, str]],
) -> list[str]:
    """Every way the records disagree with the downstream world or with the audit log."""
    problems = []
    known = {e.draft_id for e in executions.values()}
    problems += [
        f"refund for a draft the drill never executed: {d}" for d in refunds if d not in known
    ]
    for execution in executions.values():
        problems += _execution_problems(
            execution, refunds.get(execution.draft_id, []), drafts, events
        )
    return problems


def _execution_problems(
    execution: Execution,
    refunds: list[Refund],
    drafts: dict[str, str],
    events: Counter[tuple[str, str]],
) -> list[str]:
    status, name = execution.status.value, execution.id
    problems = []
    if status == "succeeded":
        recorded = (execution.outcome or {}).get("refund_id")
        if [r.id for r in refunds][:1] != [recorded]:
            problems.append(f"{name} succeeded with refund {recorded}, downstream has {refunds}")
    elif status in ("failed", "expired") and refunds:
        problems.append(f"{name} is {status} but the refund was made: {refunds[0].id}")
    if status in ("succeeded", "failed") and drafts.get(execution.draft_id) != status:
        problems.append(f"{name} is {status}, its draft {drafts.get(execution.draft_id)}")
    expected = {"execution.requested": 1, "execution.succeeded": int(status == "succeeded")}
    for type_, count in expected.items():
        if events[(name, type_)] != count:
            problems.append(f"{name}: {events[(name, type_)]} {type_} events, expected {count}")
    return problems
