"""Publishing tasks after commit (the transactional outbox).

The row that asks for a task is written in the same transaction as the
execution; publishing happens only after that commit, so a rolled-back request
never sends a message. A publish that fails, or a process that dies before
publishing, leaves the row unpublished for the sweeper.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import Engine

from service.db import session_scope
from service.executions import repository, state
from service.executions.models import Execution
from service.sql import utcnow
from service.tracing import continued

logger = logging.getLogger(__name__)

# Sends one task by name with its arguments; raises if the broker cannot take it.
Publisher = Callable[[str, list[str]], None]


def publish_execution(publish: Publisher, task: str, execution: Execution) -> None:
    """Publish an execution's task inside the trace of the request that asked for it (its
    stored traceparent, else its trace id), however long after and from whichever process."""
    with continued(execution.traceparent, execution.trace_id):
        publish(task, [execution.id])


def publish_pending(
    engine: Engine,
    publish: Publisher,
    *,
    created_before: datetime | None = None,
    execution_id: str | None = None,
    limit: int = 100,
    republish_after: int = 60,
) -> int:
    """Publish unpublished outbox rows (oldest first); returns how many were published.

    Each row is locked (skipping rows another publisher holds), published, and
    marked in its own transaction. Publishing twice is harmless: the worker
    task is idempotent.
    """
    cutoff = created_before or utcnow()
    with session_scope(engine) as session:
        pending = repository.unpublished(
            session, created_before=cutoff, execution_id=execution_id, limit=limit
        )
        ids = [message.id for message in pending]
    published = 0
    for message_id in ids:
        assert message_id is not None
        try:
            with session_scope(engine) as session:
                message = repository.outbox_message(session, message_id, for_update=True)
                if message is None or message.published_at is not None:
                    continue
                execution = repository.get(session, message.execution_id)
                assert execution is not None  # a foreign key
                publish_execution(publish, message.task, execution)
                now = utcnow()
                message.published_at = now
                message.publish_count += 1
                session.add(message)
                state.mark_published(session, execution, now=now, after=republish_after)
        except Exception:  # the broker is down: leave the row for the sweeper
            logger.warning(
                "could not publish outbox message %s; the sweeper will retry",
                message_id,
                exc_info=True,
            )
            break
        published += 1
    return published
