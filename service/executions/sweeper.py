"""The sweeper (run periodically by beat): nothing approved is forgotten, nothing stale lives on.

- publishes outbox rows whose after-commit publish never happened;
- re-publishes executions whose message was lost (queued too long, or running
  with an expired lease because the worker died and the broker forgot);
- ends executions that never started within their deadline (they never run late);
- marks open drafts past their expiry as expired (deny by default);
- forgets idempotency keys past their retention;
- escalates drafts waiting for approval past their policy's ``escalate_after_seconds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlmodel import Session

from service.approvals import oversight
from service.audit import actions as audit
from service.db import session_scope
from service.drafts import repository as drafts_repository
from service.drafts.state import expire_if_due
from service.executions import repository, state
from service.executions.models import ExecutionStatus
from service.executions.outbox import Publisher, publish_execution, publish_pending
from service.executions.schemas import EXECUTE_TASK
from service.runtime import Runtime
from service.sql import utcnow

OUTBOX_GRACE_SECONDS = 5  # let the request that wrote a row publish it itself first


@dataclass(frozen=True)
class SweepReport:
    published: int
    republished: int
    expired: int  # drafts past their expiry, and executions that never started in time
    idempotency_keys_removed: int = 0
    escalated: int = 0  # drafts waiting past their policy's escalate_after_seconds


def sweep(runtime: Runtime, publish: Publisher) -> SweepReport:
    engine, settings = runtime.engine, runtime.settings
    now = utcnow()
    published = publish_pending(
        engine,
        publish,
        created_before=now - timedelta(seconds=OUTBOX_GRACE_SECONDS),
        republish_after=settings.republish_after_seconds,
    )
    with session_scope(engine) as session:
        late = _expire_late_executions(session, runtime, now=now)
    with session_scope(engine) as session:
        republished = _republish_stalled(session, runtime, publish, now=now)
    with session_scope(engine) as session:
        expired = sum(
            1
            for draft in drafts_repository.open_past_expiry(session, now)
            if expire_if_due(session, draft, now=now)
        )
        forgotten = drafts_repository.delete_expired_idempotency_keys(session, now=now)
    with session_scope(engine) as session:
        escalated = oversight.escalate_waiting(session, runtime.policies, now=now)
    return SweepReport(
        published=published,
        republished=republished,
        expired=expired + late,
        idempotency_keys_removed=forgotten,
        escalated=escalated,
    )


def _expire_late_executions(session: Session, runtime: Runtime, *, now: datetime) -> int:
    deadline = runtime.settings.execution_start_deadline_seconds
    late = repository.never_started(session, requested_before=now - timedelta(seconds=deadline))
    for execution in late:
        locked = repository.get(session, execution.id, for_update=True)
        if locked is None or locked.status is not ExecutionStatus.QUEUED or locked.attempts:
            continue  # a worker got to it in the meantime
        draft = drafts_repository.get(session, locked.tenant, locked.draft_id, for_update=True)
        state.expire(session, locked, draft, now=now, deadline=deadline)
    return len(late)


def _republish_stalled(
    session: Session, runtime: Runtime, publish: Publisher, *, now: datetime
) -> int:
    stalled = repository.stalled(session, now=now)
    for execution in stalled:
        publish_execution(publish, EXECUTE_TASK, execution)
        state.mark_published(
            session, execution, now=now, after=runtime.settings.republish_after_seconds
        )
        audit.record(
            session,
            tenant=execution.tenant,
            actor="system:sweeper",
            type="execution.republished",
            draft_id=execution.draft_id,
            execution_id=execution.id,
            trace_id=execution.trace_id,
            data={
                "status": execution.status.value,
                "attempts": execution.attempts,
                "publishes": execution.publishes,
            },
        )
    return len(stalled)
