"""Writing an execution's state: its status, its attempts, its draft, and the audit record.

The runner decides; these functions write, always together with the audit event that
describes the change.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlmodel import Session

from service.audit import actions as audit
from service.drafts.models import Draft, DraftStatus
from service.executions import repository
from service.executions.models import Execution, ExecutionStatus

WORKER = "system:worker"


def finish(
    session: Session,
    execution: Execution,
    draft: Draft | None,
    status: ExecutionStatus,
    *,
    now: datetime,
    outcome: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    reason: str | None = None,
) -> None:
    execution.status = status.value
    execution.outcome = outcome
    execution.error = error
    execution.lease_expires_at = None
    execution.next_attempt_at = None
    execution.finished_at = now
    execution.updated_at = now
    session.add(execution)
    if draft is not None:
        set_draft(session, draft, DraftStatus(status.value), now=now, reason=reason)


def set_draft(
    session: Session, draft: Draft, status: DraftStatus, *, now: datetime, reason: str | None = None
) -> None:
    draft.status = status.value
    draft.status_reason = reason
    draft.open_dedupe_key = None  # executing or executed: an identical proposal is a new draft
    draft.updated_at = now
    session.add(draft)


def close_attempt(
    session: Session,
    execution: Execution,
    result: str,
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
