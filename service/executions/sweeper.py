"""The sweeper (run periodically by beat): nothing approved is forgotten, nothing stale lives on.

- publishes outbox rows whose after-commit publish never happened;
- re-publishes executions whose message was lost (queued too long, or running
  with an expired lease because the worker died and the broker forgot);
- marks open drafts past their expiry as expired (deny by default).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from service.audit import actions as audit
from service.db import session_scope
from service.drafts import repository as drafts_repository
from service.drafts.state import expire_if_due
from service.executions import repository
from service.executions.outbox import Publisher, publish_pending
from service.executions.schemas import EXECUTE_TASK
from service.runtime import Runtime
from service.sql import utcnow

OUTBOX_GRACE_SECONDS = 5  # let the request that wrote a row publish it itself first


@dataclass(frozen=True)
class SweepReport:
    published: int
    republished: int
    expired: int


def sweep(runtime: Runtime, publish: Publisher) -> SweepReport:
    engine, settings = runtime.engine, runtime.settings
    now = utcnow()
    published = publish_pending(
        engine, publish, created_before=now - timedelta(seconds=OUTBOX_GRACE_SECONDS)
    )

    republished = 0
    with session_scope(engine) as session:
        stalled = repository.stalled(
            session, quiet_since=now - timedelta(seconds=settings.republish_after_seconds), now=now
        )
        for execution in stalled:
            publish(EXECUTE_TASK, [execution.id])
            execution.updated_at = now  # quiet again only after another full period
            session.add(execution)
            audit.record(
                session,
                tenant=execution.tenant,
                actor="system:sweeper",
                type="execution.republished",
                draft_id=execution.draft_id,
                execution_id=execution.id,
                trace_id=execution.trace_id,
                data={"status": execution.status, "attempts": execution.attempts},
            )
            republished += 1

    with session_scope(engine) as session:
        expired = sum(
            1
            for draft in drafts_repository.open_past_expiry(session, now)
            if expire_if_due(session, draft, now=now)
        )
    return SweepReport(published=published, republished=republished, expired=expired)
