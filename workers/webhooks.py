"""Webhook tasks: deliver one delivery (retrying itself with the core's backoff), and the
beat sweep that publishes due deliveries. Thin, like ``workers.tasks``: ids in, the core
decides."""

from __future__ import annotations

import logging
from typing import Any

from service.db import unavailable
from service.webhooks.delivery import deliver as deliver_once
from service.webhooks.outbox import publish_due
from service.webhooks.schemas import DELIVER_TASK, SWEEP_TASK
from workers.app import celery_app, runtime
from workers.tasks import DATABASE_RETRY_MAX_SECONDS, publish

logger = logging.getLogger(__name__)


@celery_app.task(name=DELIVER_TASK, bind=True, max_retries=None, acks_late=True)  # type: ignore[untyped-decorator]
def deliver(self: Any, delivery_id: str) -> str:
    """One attempt at a delivery; a failed one comes back after the core's backoff."""
    try:
        result = deliver_once(runtime(), delivery_id)
    except Exception as exc:
        if unavailable(exc) is None:
            raise
        retry_in = min(2**self.request.retries, DATABASE_RETRY_MAX_SECONDS)
        raise self.retry(countdown=retry_in, exc=exc) from exc
    logger.info("webhook delivery %s: %s", delivery_id, result.status)
    if result.retry_in is not None:
        raise self.retry(countdown=result.retry_in)
    return result.status


@celery_app.task(name=SWEEP_TASK)  # type: ignore[untyped-decorator]
def sweep() -> int:
    """Publish pending deliveries that are due (new, lost, or whose worker died)."""
    settings = runtime().settings
    return publish_due(runtime().engine, publish, republish_after=settings.republish_after_seconds)
