"""Execution use cases for people: request an approved draft's execution."""

from __future__ import annotations

from datetime import datetime

from sqlmodel import Session

from service.approvals import progress
from service.approvals.actions import check_contract
from service.audit import actions as audit
from service.drafts import repository as drafts_repository
from service.drafts import state as draft_state
from service.drafts.errors import draft_expired, draft_unavailable
from service.drafts.models import Draft, DraftStatus
from service.executions import errors, repository, state
from service.executions.models import Execution, OutboxMessage
from service.executions.schemas import EXECUTE_TASK
from service.principal import Principal, Role
from service.runtime import Runtime


def request(
    session: Session,
    principal: Principal,
    *,
    runtime: Runtime,
    draft_id: str,
    now: datetime,
    trace_id: str | None = None,
) -> tuple[Execution, bool]:
    """Create the execution of the draft's current revision and its outbox message;
    (execution, created).

    A repeated request returns the existing execution. Only an approved,
    unexpired draft whose approvals verify is accepted; the worker checks again.
    """
    principal.require(Role.APPROVER)
    draft = drafts_repository.get(session, principal.tenant, draft_id, for_update=True)
    if draft is None:
        raise draft_unavailable()
    existing = repository.for_revision(session, draft.id, draft.revision)
    if existing is not None:
        return existing, False
    approvers = _check_executable(session, runtime, draft, now=now)
    execution = state.queued(
        draft,
        requested_by=principal.actor,
        now=now,
        republish_after=runtime.settings.republish_after_seconds,
    )
    if not repository.insert_unless_exists(session, execution):
        winner = repository.for_revision(session, draft.id, draft.revision)
        assert winner is not None
        return winner, False
    session.add(OutboxMessage(task=EXECUTE_TASK, execution_id=execution.id, created_at=now))
    trace = trace_id or draft.trace_id
    audit.record(
        session,
        tenant=draft.tenant,
        actor=principal.actor,
        type="execution.requested",
        draft_id=draft.id,
        execution_id=execution.id,
        trace_id=trace,
        data={
            "revision": draft.revision,
            "action": draft.action,
            "idempotency_key": execution.idempotency_key,
            "approvers": approvers,
        },
    )
    draft_state.transition(
        session,
        draft,
        DraftStatus.QUEUED,
        now=now,
        actor=principal.actor,
        trace_id=trace,
        execution_id=execution.id,
    )
    return execution, True


def _check_executable(
    session: Session, runtime: Runtime, draft: Draft, *, now: datetime
) -> list[str]:
    """The verified approvers of an approved, unexpired draft; anything else is refused."""
    if draft_state.expire_if_due(session, draft, now=now):
        raise draft_expired("executed")
    if draft.status is DraftStatus.REJECTED:
        raise errors.draft_rejected()
    if draft.status is not DraftStatus.APPROVED:
        raise errors.not_approved(draft.status.value)
    check_contract(runtime, draft)
    standing = progress.of_draft(session, progress.Rules.of(runtime), draft)
    if not standing.met:
        # The status says approved but the signatures do not carry it: a key was revoked
        # since, or someone changed the database behind our back. Refuse, loudly.
        raise standing.refusal()
    return standing.approvers
