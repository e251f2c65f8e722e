"""Thin tasks (Celery's own advice): take an id, let the core assert the world, map the result.

``draftgate.execute`` is acknowledged late and is safe to deliver twice: the
core claims the execution under a row lock and the downstream change is keyed
by ``<draft_id>:<revision>``.
"""

from __future__ import annotations

import logging
from typing import Any

from service import logs
from service.audit import checkpoints
from service.db import session_scope, unavailable
from service.errors import DomainError
from service.executions import sweeper
from service.executions.runner import run_execution
from service.executions.schemas import CHECKPOINT_TASK, EXECUTE_TASK, SWEEP_TASK
from service.health import KEY_FILE_ERRORS, checkpoint_key_status
from service.sql import utcnow
from service.telemetry import publishing
from service.tracing import bound, parse_traceparent
from workers.app import celery_app, runtime

logger = logging.getLogger(__name__)
# The longest wait between deliveries while the database is unavailable (1, 2, 4, … s).
DATABASE_RETRY_MAX_SECONDS = 30


def publish(task: str, args: list[str]) -> None:
    with publishing(task) as headers:  # the trace travels in the message's headers
        celery_app.send_task(task, args=args, headers=headers)


@celery_app.task(name=EXECUTE_TASK, bind=True, max_retries=None, acks_late=True)  # type: ignore[untyped-decorator]
def execute(self: Any, execution_id: str) -> str:
    """Run one execution; when the core asks for later, retry with its countdown."""
    # The publisher's trace (its span is this task's parent when tracing): logs name it.
    published_in = parse_traceparent(getattr(self.request, "traceparent", None))
    with bound(published_in[0] if published_in else None), logs.bound(execution_id=execution_id):
        try:
            result = run_execution(runtime(), execution_id)
        except Exception as exc:
            # The database went away (a restart, a failover, a pooled connection it dropped):
            # nothing was claimed, so try again soon rather than wait for the sweeper.
            if unavailable(exc) is None:
                raise
            retry_in = min(2**self.request.retries, DATABASE_RETRY_MAX_SECONDS)
            logger.warning(
                "execution %s: database unavailable, retry in %s s", execution_id, retry_in
            )
            raise self.retry(countdown=retry_in, exc=exc) from exc
        logger.info("execution %s: %s", execution_id, result.status)
    if result.retry_in is not None:
        raise self.retry(countdown=result.retry_in)
    return result.status


@celery_app.task(name=SWEEP_TASK)  # type: ignore[untyped-decorator]
def sweep() -> dict[str, int]:
    """Publish what the outbox holds, re-publish lost executions, expire stale drafts."""
    report = sweeper.sweep(runtime(), publish)
    if report.published or report.republished or report.expired:
        logger.info("sweep: %s", report)
    return {
        "published": report.published,
        "republished": report.republished,
        "expired": report.expired,
    }


@celery_app.task(name=CHECKPOINT_TASK)  # type: ignore[untyped-decorator]
def checkpoint() -> int:
    """Sign every tenant's chain head that moved since its last checkpoint."""
    settings = runtime().settings
    try:
        key = checkpoints.load_key(settings.resolved_checkpoint_key_file())
    except (DomainError, *KEY_FILE_ERRORS):
        # Loudly, whatever is wrong with the key (missing, unreadable by this user, not a
        # key): the task fails, and readiness, doctor and verify report the log unanchored.
        logger.error("audit checkpoints are NOT being made: %s", checkpoint_key_status(settings))
        raise
    with session_scope(runtime().engine) as session:
        return len(checkpoints.create(session, key, now=utcnow()))
