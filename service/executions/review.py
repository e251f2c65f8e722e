"""What approvers and auditors read about executions."""

from __future__ import annotations

from sqlmodel import Session

from service.executions import errors, repository
from service.executions.models import Execution
from service.executions.schemas import AttemptView, ExecutionView
from service.principal import Principal, Role


def get(session: Session, principal: Principal, execution_id: str) -> ExecutionView:
    principal.require(Role.APPROVER, Role.AUDITOR)
    execution = repository.for_tenant(session, principal.tenant, execution_id)
    if execution is None:
        raise errors.execution_unavailable()
    return view(session, execution)


def view(session: Session, execution: Execution) -> ExecutionView:
    return ExecutionView(
        execution_id=execution.id,
        draft_id=execution.draft_id,
        revision=execution.revision,
        action=execution.action,
        status=execution.status,
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
