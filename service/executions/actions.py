"""Execution use cases for people: request an approved draft's execution, look one up."""

from __future__ import annotations

import secrets
from datetime import datetime

from sqlmodel import Session

from service.approvals.actions import check_quorum
from service.audit import actions as audit
from service.drafts import repository as drafts_repository
from service.drafts.actions import draft_unavailable, expire_if_due
from service.drafts.models import DraftStatus
from service.errors import Category, DomainError
from service.executions import repository
from service.executions.models import Execution, ExecutionStatus, OutboxMessage
from service.executions.schemas import EXECUTE_TASK, AttemptView, ExecutionView
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
    """Create the draft's one execution and its outbox message; (execution, created).

    A repeated request returns the existing execution. Only an approved,
    unexpired draft whose approvals verify is accepted; the worker checks again.
    """
    principal.require(Role.APPROVER)
    draft = drafts_repository.get(session, principal.tenant, draft_id, for_update=True)
    if draft is None:
        raise draft_unavailable()
    existing = repository.for_draft(session, draft.id)
    if existing is not None:
        return existing, False
    if expire_if_due(session, draft, now=now):
        raise _not_executable(
            "DRAFT_EXPIRED",
            "The draft has expired; nothing expired is executed.",
            "Ask for a new proposal if the change is still wanted.",
        )
    if draft.status == DraftStatus.REJECTED:
        raise _not_executable(
            "DRAFT_REJECTED",
            "The draft was rejected; it will never be executed.",
            "Nothing to do; a rejection is final.",
        )
    if draft.status != DraftStatus.APPROVED:
        raise _not_executable(
            "NOT_APPROVED",
            f"The draft is {draft.status}; only an approved draft can be executed.",
            "Collect the approvals its policy requires first.",
        )
    quorum = check_quorum(session, draft, runtime)
    if not quorum.met:
        # The status says approved but the signatures do not carry it: someone
        # changed the database behind our back. Refuse, loudly.
        raise DomainError(
            "APPROVALS_UNVERIFIED",
            Category.CONFLICT,
            "The draft is marked approved but its approvals do not verify; nothing was executed.",
            suggested_action="Treat this as a security incident: inspect the audit log.",
            details={
                "security": True,
                "required": quorum.required,
                "verified_approvers": quorum.approvers,
                "problems": quorum.problems,
            },
        )
    execution = Execution(
        id="exe_" + secrets.token_hex(12),
        tenant=draft.tenant,
        draft_id=draft.id,
        revision=draft.revision,
        action=draft.action,
        idempotency_key=f"{draft.id}:{draft.revision}",
        status=ExecutionStatus.QUEUED.value,
        requested_by=principal.actor,
        trace_id=draft.trace_id,
        created_at=now,
        updated_at=now,
    )
    if not repository.insert_unless_exists(session, execution):
        winner = repository.for_draft(session, draft.id)
        assert winner is not None
        return winner, False
    session.add(OutboxMessage(task=EXECUTE_TASK, execution_id=execution.id, created_at=now))
    draft.status = DraftStatus.QUEUED.value
    draft.open_dedupe_key = None  # no longer open: an identical proposal is a new draft
    draft.updated_at = now
    session.add(draft)
    audit.record(
        session,
        tenant=draft.tenant,
        actor=principal.actor,
        type="execution.requested",
        draft_id=draft.id,
        execution_id=execution.id,
        trace_id=trace_id or draft.trace_id,
        data={
            "revision": draft.revision,
            "action": draft.action,
            "idempotency_key": execution.idempotency_key,
            "approvers": quorum.approvers,
        },
    )
    session.flush()
    created = repository.get(session, execution.id)
    assert created is not None
    return created, True


def get(session: Session, principal: Principal, execution_id: str) -> ExecutionView:
    principal.require(Role.APPROVER, Role.AUDITOR)
    execution = repository.for_tenant(session, principal.tenant, execution_id)
    if execution is None:
        raise DomainError(
            "EXECUTION_UNAVAILABLE",
            Category.UNAVAILABLE,
            "No execution with that id is available.",
            suggested_action="Use the execution_id returned by the execute endpoint.",
        )
    return view(session, execution)


def view(session: Session, execution: Execution) -> ExecutionView:
    return ExecutionView(
        execution_id=execution.id,
        draft_id=execution.draft_id,
        revision=execution.revision,
        action=execution.action,
        status=ExecutionStatus(execution.status),
        attempts=[
            AttemptView(
                number=a.number,
                started_at=a.started_at,
                finished_at=a.finished_at,
                result=a.result,
                detail=a.detail,
            )
            for a in repository.attempts(session, execution.id)
        ],
        outcome=execution.outcome,
        error=execution.error,
        requested_by=execution.requested_by,
        created_at=execution.created_at,
        finished_at=execution.finished_at,
    )


def _not_executable(code: str, message: str, suggested_action: str) -> DomainError:
    return DomainError(code, Category.CONFLICT, message, suggested_action=suggested_action)
