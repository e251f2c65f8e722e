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
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlmodel import Session

from service.approvals import progress
from service.catalogue import error_code
from service.db import session_scope
from service.drafts import actions as drafts_actions
from service.drafts import repository as drafts_repository
from service.drafts.errors import contract_changed
from service.drafts.models import Draft
from service.drafts.world import as_proposer
from service.errors import DomainError
from service.executions import errors, repository, state
from service.executions.models import FINISHED, Execution, ExecutionStatus
from service.principal import Principal
from service.registry.base import ActionContext, Outcome, SourceState, source_name
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
    # The source revision the approvals bind (None: the action declares no source), and the
    # source the draft names (a grant's scope is checked against it).
    source_revision: str | None = None
    source_ref: str | None = None
    # Taken over after the attempt limit: only record a change already made, never make one.
    recovery_only: bool = False


class LeaseLost(Exception):
    """Another delivery took the execution over while this attempt ran: it must not commit."""


class SourceMoved(Exception):
    """The draft's source is not in the state its approvals bind: nothing may be changed."""

    def __init__(self, source: SourceState) -> None:
        super().__init__(source.ref)
        self.source = source


def run_execution(runtime: Runtime, execution_id: str) -> RunResult:
    """Drive one execution as far as it can go now."""
    claim = _claim(runtime, execution_id)
    if isinstance(claim, RunResult):
        return claim
    try:
        with _heartbeat(runtime, claim):
            outcome = _apply(runtime, claim)
    except LeaseLost:
        logger.warning("execution %s attempt %s lost its lease", execution_id, claim.attempt)
        return RunResult("superseded")
    except SourceMoved as moved:
        return _record_source_moved(runtime, claim, moved.source)
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
    """Under the execution's row lock: decide whether this delivery may run an attempt now."""
    with session_scope(runtime.engine) as session:
        execution = repository.get(session, execution_id, for_update=True)
        if execution is None:
            logger.error("execution %s does not exist; dropping the message", execution_id)
            return RunResult("missing")
        now = utcnow()
        wait = _not_now(execution, now)
        if wait is not None:
            return wait
        draft = drafts_repository.get(
            session, execution.tenant, execution.draft_id, for_update=True
        )
        deadline = runtime.settings.execution_start_deadline_seconds
        if _too_late(execution, now, deadline):
            state.expire(session, execution, draft, now=now, deadline=deadline)
            return RunResult(ExecutionStatus.EXPIRED.value)
        refusal = _refusal(session, runtime, execution, draft)
        if refusal is not None:
            state.refuse(
                session,
                execution,
                draft,
                now=now,
                error=refusal.as_error(),
                security=refusal.security,
            )
            return RunResult(ExecutionStatus.FAILED.value)
        assert draft is not None
        took_over = state.start_attempt(
            session,
            execution,
            draft,
            now=now,
            lease_seconds=runtime.settings.execution_lease_seconds,
        )
        return _claim_of(execution, draft, runtime, recovery_only=took_over)


def _not_now(execution: Execution, now: datetime) -> RunResult | None:
    """Nothing to do (finished), or not yet (a live lease, a retry not yet due)."""
    status = execution.status
    if status in FINISHED:
        return RunResult(status.value)
    if status is ExecutionStatus.RUNNING and _after(execution.lease_expires_at, now):
        return RunResult(status.value, retry_in=_seconds_until(execution.lease_expires_at, now))
    if status is ExecutionStatus.QUEUED and _after(execution.next_attempt_at, now):
        return RunResult(status.value, retry_in=_seconds_until(execution.next_attempt_at, now))
    return None


def _too_late(execution: Execution, now: datetime, deadline: int) -> bool:
    """Never started, and requested longer ago than the deadline allows."""
    never_started = execution.status is ExecutionStatus.QUEUED and execution.attempts == 0
    return never_started and now - execution.created_at > timedelta(seconds=deadline)


def _claim_of(
    execution: Execution, draft: Draft, runtime: Runtime, *, recovery_only: bool
) -> Claim:
    return Claim(
        execution_id=execution.id,
        draft_id=draft.id,
        tenant=draft.tenant,
        action=draft.action,
        attempt=execution.attempts,
        idempotency_key=execution.idempotency_key,
        params=draft.params,
        proposer=as_proposer(draft, token_id=f"execution:{execution.id}"),
        trace_id=execution.trace_id,
        source_revision=draft.source_revision,
        source_ref=draft.source_ref,
        recovery_only=recovery_only
        and execution.attempts > runtime.settings.execution_max_attempts,
    )


@dataclass(frozen=True)
class Refusal:
    """Why an execution must not run: a security problem, or a rule that fails closed."""

    code: str
    message: str
    security: bool

    def as_error(self) -> DomainError:
        return error_code(self.code)(self.message)


def _refusal(
    session: Session, runtime: Runtime, execution: Execution, draft: Draft | None
) -> Refusal | None:
    """Why this execution must not run, judged from signatures, never from flags."""
    problem = _tampered(runtime, execution, draft)
    if problem is not None:
        return Refusal(errors.APPROVALS_UNVERIFIED.code, problem, security=True)
    assert draft is not None
    action = runtime.registry.write(draft.action)
    assert action is not None
    if action.contract_version != draft.contract_version:
        changed = contract_changed(draft.action, draft.contract_version, action.contract_version)
        return Refusal(changed.code, changed.message, security=False)
    quorum = progress.of_draft(session, progress.Rules.of(runtime), draft)
    if quorum.met:
        return None
    refusal = quorum.refusal()
    if refusal.code != errors.APPROVALS_UNVERIFIED.code:  # a revoked key: fail closed
        return Refusal(refusal.code, refusal.message, security=False)
    detail = "; ".join(quorum.problems) or "no rejection-free quorum"
    message = f"{len(quorum.approvers)} of {quorum.required} required approvals verify ({detail})"
    return Refusal(errors.APPROVALS_UNVERIFIED.code, message, security=True)


def _tampered(runtime: Runtime, execution: Execution, draft: Draft | None) -> str | None:
    """What in the stored rows disagrees with the execution that was requested."""
    if draft is None:
        return "the draft no longer exists"
    if runtime.registry.write(draft.action) is None:
        return f"the action {draft.action} is not registered"
    if (draft.revision, draft.action) != (execution.revision, execution.action):
        return "the draft changed after its execution was requested"
    if execution.idempotency_key != f"{draft.id}:{draft.revision}":
        return "the execution's idempotency key does not match its draft"
    action = runtime.registry.write(draft.action)
    if action is not None and action.declares_source and draft.source_revision is None:
        return "the draft names no source revision, but its action binds one"
    return None


def _apply(runtime: Runtime, claim: Claim) -> Outcome:
    action = runtime.registry.write(claim.action)
    assert action is not None
    with session_scope(runtime.engine) as session:
        ctx = _context(runtime, claim, session)
        params = action.Input.model_validate_json(json.dumps(claim.params))
        # Lock the source, then look: a change already made with this key (which moved the
        # source itself) is reported; otherwise the source must be as the approvers saw it,
        # and stays so under the lock until this change commits.
        source = None
        if claim.source_revision is not None:
            source = action.source(ctx, params, lock=True)
            if source is not None and source.ref != claim.source_ref:
                # The params name another record than the draft's source column: a row
                # edited around draftgate (a grant's source scope reads that column).
                raise errors.APPROVALS_UNVERIFIED(
                    f"The params change {source.ref}, but the draft names "
                    f"{claim.source_ref or 'no source'}; nothing was executed.",
                    details={"security": True},
                )
        done = action.applied(ctx, claim.idempotency_key)
        if done is not None:
            return done
        if claim.recovery_only:
            raise errors.attempts_exhausted(claim.attempt - 1)
        # On a retry of a call whose effect only the upstream knows (knows_applied False),
        # the move may be this very change, made by an attempt that died before recording
        # it: the call is repeated with the same key, which the upstream dedupes.
        moved = source is not None and source.revision != claim.source_revision
        if moved and (claim.attempt == 1 or action.knows_applied):
            assert source is not None
            raise SourceMoved(source)
        action.validate(ctx, params)
        outcome = action.execute(ctx, params, claim.idempotency_key)
        # The fencing check, in the downstream's own transaction: if another delivery took
        # over meanwhile, this change rolls back instead of happening twice.
        if not repository.owned_by(session, claim.execution_id, claim.attempt):
            raise LeaseLost
        return outcome


@contextmanager
def _heartbeat(runtime: Runtime, claim: Claim) -> Iterator[None]:
    """Renew the attempt's lease while it runs, so a slow downstream call is not taken over."""
    lease = runtime.settings.execution_lease_seconds
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(lease / 3):
            try:
                with session_scope(runtime.engine) as session:
                    until = utcnow() + timedelta(seconds=lease)
                    if not state.renew_lease(
                        session, claim.execution_id, claim.attempt, until=until
                    ):
                        return  # taken over: the fencing check stops this attempt's commit
            except Exception:  # a missed beat only shortens the lease; the fence still holds
                logger.warning("could not renew the lease of %s", claim.execution_id, exc_info=True)

    thread = threading.Thread(target=beat, name=f"lease-{claim.execution_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


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
        return errors.downstream_unavailable(f"database error ({type(exc).__name__})")
    logger.exception(
        "execution %s attempt %s failed unexpectedly", claim.execution_id, claim.attempt
    )
    return errors.action_failed(exc)


def _record_success(runtime: Runtime, claim: Claim, outcome: Outcome) -> RunResult:
    with session_scope(runtime.engine) as session:
        execution, draft = _current(session, claim)
        if execution is None:
            return RunResult("superseded")
        result = {"summary": outcome.summary, **outcome.data}
        state.succeed(session, execution, draft, now=utcnow(), outcome=result)
        return RunResult(ExecutionStatus.SUCCEEDED.value)


def _record_failure(runtime: Runtime, claim: Claim, error: DomainError) -> RunResult:
    """Retry a transient failure within the attempt limit; anything else is final."""
    settings = runtime.settings
    with session_scope(runtime.engine) as session:
        execution, draft = _current(session, claim)
        if execution is None:
            return RunResult("superseded")
        now = utcnow()
        detail = error.audit_form()
        if error.retryable and execution.attempts < settings.execution_max_attempts:
            delay = min(
                settings.execution_retry_base_seconds * 2 ** (execution.attempts - 1),
                settings.execution_retry_max_seconds,
            )
            state.retry_later(
                session,
                execution,
                draft,
                now=now,
                delay=delay,
                error=detail,
                republish_after=settings.republish_after_seconds,
            )
            return RunResult(ExecutionStatus.QUEUED.value, retry_in=delay)
        exhausted = error.retryable
        reason = (
            f"the downstream system kept failing after {execution.attempts} attempts: "
            f"{error.message}"
            if exhausted
            else error.message
        )
        state.fail(
            session,
            execution,
            draft,
            now=now,
            error={**detail, "attempts_exhausted": exhausted},
            attempt_detail=detail,
            reason=reason,
            event_data={"attempt": claim.attempt, "error": detail, "attempts_exhausted": exhausted},
        )
        return RunResult(ExecutionStatus.FAILED.value)


def _record_source_moved(runtime: Runtime, claim: Claim, source: SourceState) -> RunResult:
    """Refuse the execution (nothing was changed) and bind the draft to the source's new state
    at a new revision to approve again; if the change no longer holds there, the draft fails
    with that business error instead (and the execution with it)."""
    action = runtime.registry.write(claim.action)
    assert action is not None
    with session_scope(runtime.engine) as session:
        execution, draft = _current(session, claim)
        if execution is None or draft is None:
            return RunResult("superseded")
        changes = source.changes_from(draft.source)
        moved = {"source_ref": source.ref, "changes": changes}
        why = source_changed_reason(source.ref, changes)
        if claim.attempt > 1:
            # An earlier attempt may have reached a system outside this database before it
            # failed: a new revision would run under a new idempotency key, which that system
            # would take for another change. Fail closed; the outcome is reconciled, not
            # re-approved (docs/approvals.md, "Source-bound approvals").
            unknown = errors.source_changed_after_attempts(source.ref, claim.attempt)
            why += " after an earlier attempt; it is not rebased (propose it again if wanted)"
            return _fail_moved(session, execution, draft, unknown, moved, why)
        try:  # a refused revalidation writes nothing
            drafts_actions.rebase(
                _context(runtime, claim, session),
                action,
                draft,
                policies=runtime.policies,
                actor=state.WORKER,
                reason=why + "; it awaits approval again",
                data={**moved, "execution_id": execution.id},
            )
        except DomainError as no_longer:
            return _fail_moved(
                session, execution, draft, no_longer, moved, f"{why}; {no_longer.message}"
            )
        refused = errors.source_changed(source.ref, changes, draft.revision)
        error = {**refused.audit_form(), "source_changed": moved, "revision": draft.revision}
        # The draft was rebased, not ended: only the execution fails.
        state.fail(session, execution, None, now=utcnow(), error=error, reason=why)
        return RunResult(ExecutionStatus.FAILED.value)


def _fail_moved(
    session: Session,
    execution: Execution,
    draft: Draft,
    error: DomainError,
    moved: dict[str, Any],
    reason: str,
) -> RunResult:
    """End the execution and its draft failed with ``error``, noting what moved."""
    detail = {**error.audit_form(), "attempts_exhausted": False, "source_changed": moved}
    state.fail(session, execution, draft, now=utcnow(), error=detail, reason=reason)
    return RunResult(ExecutionStatus.FAILED.value)


def source_changed_reason(ref: str, changes: list[dict[str, str]]) -> str:
    what = ", ".join(change["label"].lower() for change in changes) or "its revision"
    return f"{source_name(ref)} changed after the approval ({what}), so nothing was executed"


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


def _after(moment: datetime | None, now: datetime) -> bool:
    return moment is not None and moment > now


def _seconds_until(moment: datetime | None, now: datetime) -> float:
    assert moment is not None
    return max((moment - now).total_seconds(), 0.0) + 0.1
