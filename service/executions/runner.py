"""Running one execution exactly once, whatever fails (DESIGN.md §5).

Three transactions, each short:

1. **claim** — under a row lock: stop if finished; re-verify every counted
   signature against the stored params (no status flag is trusted); take a
   lease and count the attempt.
2. **apply** — the downstream system's own transaction: ask whether the change
   with this idempotency key was already made (a redelivery after a crash),
   else re-run business validation and make it, keyed ``<draft_id>:<revision>``.
3. **record** — under the row lock again: the outcome, the attempt, the
   draft's status and the audit event, together.

A crash between 2 and 3 leaves a running execution whose lease expires; the
redelivered task finds the change already applied and records it. The
downstream unique constraint on the idempotency key makes two racing workers
harmless.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlmodel import Session

from service.actions.base import ActionContext, Outcome
from service.approvals.actions import check_quorum
from service.db import session_scope
from service.drafts import repository as drafts_repository
from service.drafts.models import Draft, DraftStatus
from service.errors import Category, DomainError
from service.executions import repository, state
from service.executions.models import FINISHED, Execution, ExecutionAttempt, ExecutionStatus
from service.principal import Principal, Role
from service.runtime import Runtime
from service.sql import utcnow

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    """What the task should do next: nothing (finished or owned elsewhere) or run again later."""

    status: str
    retry_in: float | None = None


@dataclass(frozen=True)
class Claim:
    execution_id: str
    draft_id: str
    tenant: str
    action: str
    attempt: int
    idempotency_key: str
    params: dict[str, Any]
    proposer: Principal
    trace_id: str | None
    # Taken over after the attempt limit: only record a change already made, never make one.
    recovery_only: bool = False


def run_execution(runtime: Runtime, execution_id: str) -> RunResult:
    """Drive one execution as far as it can go now."""
    claim = _claim(runtime, execution_id)
    if isinstance(claim, RunResult):
        return claim
    try:
        outcome = _apply(runtime, claim)
    except Exception as exc:  # every failure ends visibly: retried within the limit, or final
        error = _as_domain_error(exc, claim)
        # A final refusal may be the world already containing *this* change, made by a
        # racing or crashed attempt: ask the downstream before calling it a failure.
        found = None if error.retryable else _already_applied(runtime, claim)
        if found is None:
            return _record_failure(runtime, claim, error)
        outcome = found
    pause = runtime.settings.fault_pause_after_downstream_ms
    if pause:  # fault injection for crash drills: the change is made, not yet recorded
        time.sleep(pause / 1000)
    return _record_success(runtime, claim, outcome)


def _claim(runtime: Runtime, execution_id: str) -> Claim | RunResult:
    settings = runtime.settings
    with session_scope(runtime.engine) as session:
        execution = repository.get(session, execution_id, for_update=True)
        if execution is None:
            logger.error("execution %s does not exist; dropping the message", execution_id)
            return RunResult("missing")
        status = ExecutionStatus(execution.status)
        if status in FINISHED:
            return RunResult(status.value)
        now = utcnow()
        if status is ExecutionStatus.RUNNING and _after(execution.lease_expires_at, now):
            return RunResult(status.value, retry_in=_seconds_until(execution.lease_expires_at, now))
        if status is ExecutionStatus.QUEUED and _after(execution.next_attempt_at, now):
            return RunResult(status.value, retry_in=_seconds_until(execution.next_attempt_at, now))
        draft = drafts_repository.get(
            session, execution.tenant, execution.draft_id, for_update=True
        )
        problem = _refusal(session, runtime, execution, draft)
        if problem is not None:
            state.finish(
                session,
                execution,
                draft,
                ExecutionStatus.FAILED,
                now=now,
                error={"code": "APPROVALS_UNVERIFIED", "message": problem, "security": True},
                reason="the approvals could not be verified, so nothing was executed",
            )
            state.record(session, execution, "security.execution_refused", {"problem": problem})
            return RunResult(ExecutionStatus.FAILED.value)
        assert draft is not None
        took_over = status is ExecutionStatus.RUNNING
        if took_over:
            state.close_attempt(
                session,
                execution,
                "lost",
                now=now,
                detail={"message": "the worker stopped before recording an outcome"},
            )
        execution.attempts += 1
        execution.status = ExecutionStatus.RUNNING.value
        execution.lease_expires_at = now + timedelta(seconds=settings.execution_lease_seconds)
        execution.next_attempt_at = None
        execution.updated_at = now
        session.add(execution)
        session.add(
            ExecutionAttempt(
                execution_id=execution.id,
                number=execution.attempts,
                started_at=now,
                result="running",
            )
        )
        state.set_draft(session, draft, DraftStatus.RUNNING, now=now)
        state.record(
            session,
            execution,
            "execution.started",
            {"attempt": execution.attempts, "took_over": took_over},
        )
        return Claim(
            execution_id=execution.id,
            draft_id=draft.id,
            tenant=draft.tenant,
            action=draft.action,
            attempt=execution.attempts,
            idempotency_key=execution.idempotency_key,
            params=draft.params,
            proposer=Principal(
                tenant=draft.tenant,
                subject=draft.proposed_by,
                role=Role.AGENT,
                token_id=f"execution:{execution.id}",
                on_behalf_of=draft.on_behalf_of,
            ),
            trace_id=execution.trace_id,
            recovery_only=took_over and execution.attempts > settings.execution_max_attempts,
        )


def _refusal(
    session: Session, runtime: Runtime, execution: Execution, draft: Draft | None
) -> str | None:
    """Why this execution must not run, judged from signatures, never from flags."""
    if draft is None:
        return "the draft no longer exists"
    if runtime.registry.write(draft.action) is None:
        return f"the action {draft.action} is not registered"
    if (draft.revision, draft.action) != (execution.revision, execution.action):
        return "the draft changed after its execution was requested"
    if execution.idempotency_key != f"{draft.id}:{draft.revision}":
        return "the execution's idempotency key does not match its draft"
    quorum = check_quorum(session, draft, runtime)
    if not quorum.met:
        detail = "; ".join(quorum.problems) or "no rejection-free quorum"
        return f"{len(quorum.approvers)} of {quorum.required} required approvals verify ({detail})"
    return None


def _apply(runtime: Runtime, claim: Claim) -> Outcome:
    action = runtime.registry.write(claim.action)
    assert action is not None
    with session_scope(runtime.engine) as session:
        ctx = _context(runtime, claim, session)
        done = action.applied(ctx, claim.idempotency_key)
        if done is not None:
            return done
        if claim.recovery_only:
            raise DomainError(
                "ATTEMPTS_EXHAUSTED",
                Category.PRECONDITION_FAILED,
                f"The worker stopped {claim.attempt - 1} times before recording an outcome; "
                "the change was not made and will not be tried again.",
                suggested_action="Investigate the worker; propose the change again if wanted.",
            )
        params = action.Input.model_validate_json(json.dumps(claim.params))
        action.validate(ctx, params)
        return action.execute(ctx, params, claim.idempotency_key)


def _already_applied(runtime: Runtime, claim: Claim) -> Outcome | None:
    action = runtime.registry.write(claim.action)
    assert action is not None
    with session_scope(runtime.engine) as session:
        return action.applied(_context(runtime, claim, session), claim.idempotency_key)


def _context(runtime: Runtime, claim: Claim, session: Session) -> ActionContext:
    return ActionContext(
        session=session,
        principal=claim.proposer,
        settings=runtime.settings,
        now=utcnow(),
        trace_id=claim.trace_id,
        attempt=claim.attempt,
    )


def _as_domain_error(exc: Exception, claim: Claim) -> DomainError:
    if isinstance(exc, DomainError):
        return exc
    if isinstance(exc, DBAPIError):  # the downstream database hiccupped or two workers raced
        logger.warning(
            "execution %s attempt %s: database error %s",
            claim.execution_id,
            claim.attempt,
            type(exc).__name__,
        )
        return _transient(f"database error ({type(exc).__name__})")
    logger.exception(
        "execution %s attempt %s failed unexpectedly", claim.execution_id, claim.attempt
    )
    return DomainError(
        "INTERNAL_ERROR",
        Category.TRANSIENT,
        f"The action failed unexpectedly ({type(exc).__name__}).",
        suggested_action="The worker retries within its attempt limit; then it fails visibly.",
    )


def _record_success(runtime: Runtime, claim: Claim, outcome: Outcome) -> RunResult:
    with session_scope(runtime.engine) as session:
        execution, draft = _current(session, claim)
        if execution is None:
            return RunResult("superseded")
        now = utcnow()
        result = {"summary": outcome.summary, **outcome.data}
        state.close_attempt(session, execution, "succeeded", now=now, detail=result)
        state.finish(session, execution, draft, ExecutionStatus.SUCCEEDED, now=now, outcome=result)
        state.record(
            session, execution, "execution.succeeded", {"attempt": claim.attempt, "outcome": result}
        )
        return RunResult(ExecutionStatus.SUCCEEDED.value)


def _record_failure(runtime: Runtime, claim: Claim, error: DomainError) -> RunResult:
    settings = runtime.settings
    with session_scope(runtime.engine) as session:
        execution, draft = _current(session, claim)
        if execution is None:
            return RunResult("superseded")
        now = utcnow()
        detail = {"code": error.code, "category": error.category.value, "message": error.message}
        if error.retryable and execution.attempts < settings.execution_max_attempts:
            delay = min(
                settings.execution_retry_base_seconds * 2 ** (execution.attempts - 1),
                settings.execution_retry_max_seconds,
            )
            state.close_attempt(session, execution, "retry", now=now, detail=detail)
            execution.status = ExecutionStatus.QUEUED.value
            execution.lease_expires_at = None
            execution.next_attempt_at = now + timedelta(seconds=delay)
            execution.error = detail
            execution.updated_at = now
            session.add(execution)
            if draft is not None:
                state.set_draft(session, draft, DraftStatus.QUEUED, now=now)
            state.record(
                session,
                execution,
                "execution.retry_scheduled",
                {"attempt": claim.attempt, "retry_in_seconds": delay, "error": detail},
            )
            return RunResult(ExecutionStatus.QUEUED.value, retry_in=delay)
        exhausted = error.retryable
        reason = (
            f"the downstream system kept failing after {execution.attempts} attempts: "
            f"{error.message}"
            if exhausted
            else error.message
        )
        state.close_attempt(session, execution, "failed", now=now, detail=detail)
        state.finish(
            session,
            execution,
            draft,
            ExecutionStatus.FAILED,
            now=now,
            error={**detail, "attempts_exhausted": exhausted},
            reason=reason,
        )
        state.record(
            session,
            execution,
            "execution.failed",
            {"attempt": claim.attempt, "error": detail, "attempts_exhausted": exhausted},
        )
        return RunResult(ExecutionStatus.FAILED.value)


def _current(session: Session, claim: Claim) -> tuple[Execution | None, Draft | None]:
    """The execution if this claim still owns it (not finished, not taken over)."""
    execution = repository.get(session, claim.execution_id, for_update=True)
    if (
        execution is None
        or execution.status != ExecutionStatus.RUNNING
        or execution.attempts != claim.attempt
    ):
        return None, None
    draft = drafts_repository.get(session, claim.tenant, claim.draft_id, for_update=True)
    return execution, draft


def _transient(message: str) -> DomainError:
    return DomainError(
        "DOWNSTREAM_UNAVAILABLE",
        Category.TRANSIENT,
        message,
        suggested_action="The worker retries automatically.",
    )


def _after(moment: datetime | None, now: datetime) -> bool:
    return moment is not None and moment > now


def _seconds_until(moment: datetime | None, now: datetime) -> float:
    assert moment is not None
    return max((moment - now).total_seconds(), 0.0) + 0.1
