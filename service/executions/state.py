"""The one owner of an execution row: its creation (queued), its status, its attempts and
lease, its publish bookkeeping, and its draft's matching status.

The use cases, the runner, the outbox and the sweeper decide what happens; these functions
write it, each together with the audit events that describe the change, and move the draft
in step through the draft's own state owner. Nothing else writes the columns
tests/test_row_owners.py guards.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import update
from sqlmodel import Session, col

from service import metrics, republish
from service.audit import actions as audit
from service.audit.refusals import Refusal, record_refusal
from service.drafts import state as draft_state
from service.drafts.models import Draft, DraftStatus
from service.errors import DomainError
from service.executions import errors, repository
from service.executions.models import (
    AttemptResult,
    Execution,
    ExecutionAttempt,
    ExecutionStatus,
)

WORKER = "system:worker"
E = ExecutionStatus

TRANSITIONS: dict[ExecutionStatus, frozenset[ExecutionStatus]] = {
    # QUEUED -> EXPIRED: never started before its deadline (an outage); it will not run late.
    E.QUEUED: frozenset({E.RUNNING, E.FAILED, E.EXPIRED}),
    # RUNNING -> RUNNING: another delivery takes over after the lease expired.
    E.RUNNING: frozenset({E.RUNNING, E.QUEUED, E.SUCCEEDED, E.FAILED}),
    E.SUCCEEDED: frozenset(),
    E.FAILED: frozenset(),
    E.EXPIRED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A move the execution state machine does not allow: a bug, never user input."""


def queued(draft: Draft, *, requested_by: str, now: datetime, republish_after: float) -> Execution:
    """The draft's one execution, queued (not yet inserted: repository.insert_unless_exists).
    Its first publish follows the commit; the sweeper steps in only if that one is lost."""
    return Execution(
        id="exe_" + secrets.token_hex(12),
        tenant=draft.tenant,
        draft_id=draft.id,
        revision=draft.revision,
        action=draft.action,
        idempotency_key=f"{draft.id}:{draft.revision}",
        status=ExecutionStatus.QUEUED,
        requested_by=requested_by,
        trace_id=draft.trace_id,
        created_at=now,
        updated_at=now,
        republish_at=now + timedelta(seconds=republish_after),
    )


def mark_published(session: Session, execution: Execution, *, now: datetime, after: float) -> None:
    """Remember a publish of the execution's task; the sweeper publishes it again only after
    the backoff (service.republish) if nothing happened by then."""
    execution.publishes += 1
    execution.republish_at = now + republish.backoff(execution.publishes, after=after)
    session.add(execution)


def renew_lease(session: Session, execution_id: str, attempt: int, *, until: datetime) -> bool:
    """Extend the lease of a running attempt (the worker's heartbeat, in a statement of its
    own: no row is loaded); False if the attempt no longer owns it."""
    result = session.execute(
        update(Execution)
        .where(
            col(Execution.id) == execution_id,
            col(Execution.attempts) == attempt,
            col(Execution.status) == ExecutionStatus.RUNNING,
        )
        .values(lease_expires_at=until)
    )
    return bool(getattr(result, "rowcount", 0))


def start_attempt(
    session: Session, execution: Execution, draft: Draft, *, now: datetime, lease_seconds: int
) -> bool:
    """Begin the next attempt under a lease; True if it takes over from a worker that died."""
    took_over = execution.status is ExecutionStatus.RUNNING
    if took_over:
        close_attempt(
            session,
            execution,
            AttemptResult.LOST,
            now=now,
            detail={"message": "the worker stopped before recording an outcome"},
        )
    _move(execution, ExecutionStatus.RUNNING, now=now)
    execution.attempts += 1
    execution.lease_expires_at = now + timedelta(seconds=lease_seconds)
    # If this worker dies, the sweeper may publish again as soon as the lease runs out.
    execution.republish_at = execution.lease_expires_at
    execution.next_attempt_at = None
    session.add(execution)
    session.add(
        ExecutionAttempt(
            execution_id=execution.id,
            number=execution.attempts,
            started_at=now,
            result=AttemptResult.RUNNING,
        )
    )
    record(
        session,
        execution,
        "execution.started",
        {"attempt": execution.attempts, "took_over": took_over},
    )
    _move_draft(session, execution, draft, DraftStatus.RUNNING, now=now)
    return took_over


def retry_later(
    session: Session,
    execution: Execution,
    draft: Draft | None,
    *,
    now: datetime,
    delay: float,
    error: dict[str, Any],
    republish_after: float,
) -> None:
    """Close the attempt as a transient failure and queue the execution for a later one
    (the task retries itself; the sweeper only steps in well after it is due)."""
    attempt = execution.attempts
    close_attempt(session, execution, AttemptResult.RETRY, now=now, detail=error)
    _move(execution, ExecutionStatus.QUEUED, now=now)
    execution.lease_expires_at = None
    execution.next_attempt_at = now + timedelta(seconds=delay)
    execution.republish_at = execution.next_attempt_at + timedelta(seconds=republish_after)
    execution.error = error
    session.add(execution)
    record(
        session,
        execution,
        "execution.retry_scheduled",
        {"attempt": attempt, "retry_in_seconds": delay, "error": error},
    )
    _move_draft(session, execution, draft, DraftStatus.QUEUED, now=now)


def succeed(
    session: Session, execution: Execution, draft: Draft | None, *, now: datetime, outcome: Any
) -> None:
    attempt = execution.attempts
    close_attempt(session, execution, AttemptResult.SUCCEEDED, now=now, detail=outcome)
    _finish(session, execution, ExecutionStatus.SUCCEEDED, now=now, outcome=outcome)
    record(session, execution, "execution.succeeded", {"attempt": attempt, "outcome": outcome})
    _move_draft(session, execution, draft, DraftStatus.SUCCEEDED, now=now)


def fail(
    session: Session,
    execution: Execution,
    draft: Draft | None,
    *,
    now: datetime,
    error: dict[str, Any],
    reason: str,
    attempt_detail: dict[str, Any] | None = None,
    event_data: dict[str, Any] | None = None,
) -> None:
    """End the execution as failed (a business failure, or retries used up), and its draft
    with it; ``draft`` None leaves the draft as it is (one rebased because its source moved:
    drafts.actions.rebase)."""
    close_attempt(session, execution, AttemptResult.FAILED, now=now, detail=attempt_detail or error)
    _finish(session, execution, ExecutionStatus.FAILED, now=now, error=error)
    data = event_data or {"attempt": execution.attempts, "error": error}
    record(session, execution, "execution.failed", data)
    _move_draft(session, execution, draft, DraftStatus.FAILED, now=now, reason=reason)


def refuse(
    session: Session,
    execution: Execution,
    draft: Draft | None,
    *,
    now: datetime,
    error: DomainError,
    security: bool,
) -> None:
    """End an execution the worker refused to run at claim time, audited as a refusal
    (``execution.refused``; ``security.execution_refused`` when its approvals do not verify,
    which means the stored rows were changed behind draftgate's back)."""
    detail = {**error.audit_form(), "security": security}
    close_attempt(session, execution, AttemptResult.FAILED, now=now, detail=detail)
    _finish(session, execution, ExecutionStatus.FAILED, now=now, error=detail)
    refusal = Refusal(
        "execution",
        error,
        execution.tenant,
        WORKER,
        draft_id=execution.draft_id,
        execution_id=execution.id,
        trace_id=execution.trace_id,
        security=security,
    )
    record_refusal(session, refusal)
    reason = (
        "the approvals could not be verified, so nothing was executed"
        if security
        else error.message.rstrip(".")
    )
    _move_draft(session, execution, draft, DraftStatus.FAILED, now=now, reason=reason)


def expire(
    session: Session, execution: Execution, draft: Draft | None, *, now: datetime, deadline: int
) -> None:
    """End an execution that never started within ``deadline`` seconds of its request."""
    reason = (
        f"it did not start within {deadline} s of the execution request, so it will not run "
        "late; nothing was executed"
    )
    error = errors.EXECUTION_EXPIRED(reason).audit_form()
    _finish(session, execution, ExecutionStatus.EXPIRED, now=now, error=error)
    record(session, execution, "execution.expired", {"deadline_seconds": deadline})
    _move_draft(session, execution, draft, DraftStatus.EXPIRED, now=now, reason=reason)


def close_attempt(
    session: Session,
    execution: Execution,
    result: AttemptResult,
    *,
    now: datetime,
    detail: dict[str, Any] | None,
) -> None:
    attempt = repository.attempt(session, execution.id, execution.attempts)
    if attempt is not None and attempt.finished_at is None:
        attempt.result = result
        attempt.finished_at = now
        attempt.detail = detail
        session.add(attempt)


def record(session: Session, execution: Execution, type_: str, data: dict[str, Any]) -> None:
    """Audit an execution event under the draft's trace, as the worker."""
    audit.record(
        session,
        tenant=execution.tenant,
        actor=WORKER,
        type=type_,
        draft_id=execution.draft_id,
        execution_id=execution.id,
        trace_id=execution.trace_id,
        data=data,
    )


def _finish(
    session: Session,
    execution: Execution,
    status: ExecutionStatus,
    *,
    now: datetime,
    outcome: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
) -> None:
    _move(execution, status, now=now)
    execution.outcome = outcome
    execution.error = error
    execution.lease_expires_at = None
    execution.next_attempt_at = None
    execution.finished_at = now
    session.add(execution)
    metrics.execution_finished(session, execution)  # every final state passes through here


def _move(execution: Execution, target: ExecutionStatus, *, now: datetime) -> None:
    if target not in TRANSITIONS[execution.status]:
        raise IllegalTransition(
            f"execution {execution.id}: {execution.status.value} -> {target.value}"
        )
    execution.status = target
    execution.updated_at = now


def _move_draft(
    session: Session,
    execution: Execution,
    draft: Draft | None,
    target: DraftStatus,
    *,
    now: datetime,
    reason: str | None = None,
) -> None:
    """Keep the draft in step; a draft someone moved elsewhere by hand is left as it is."""
    if draft is None or draft.status is target or not draft_state.allowed(draft.status, target):
        return
    draft_state.transition(
        session,
        draft,
        target,
        now=now,
        actor=WORKER,
        trace_id=execution.trace_id,
        execution_id=execution.id,
        reason=reason,
    )
