"""Publishing deliveries (the outbox): a pending delivery row is its own outbox message.

Delivery rows are written in the transaction of the event they announce, by whichever
process made it (the MCP server, which has no broker, included), so none of them publishes:
beat runs ``publish_due`` every ``webhook_sweep_interval_seconds``. It publishes each pending
delivery whose ``republish_at`` has come: new ones (null), retries whose own message was lost,
attempts whose worker died (the lease ran out). Publishing twice is harmless: the task
claims under a row lock and drops what is not due.
"""

from __future__ import annotations

import logging

from sqlalchemy import Engine

from service.db import session_scope
from service.executions.outbox import Publisher
from service.sql import utcnow
from service.webhooks import repository, state
from service.webhooks.models import DeliveryStatus
from service.webhooks.schemas import DELIVER_TASK

logger = logging.getLogger(__name__)


def publish_due(
    engine: Engine,
    publish: Publisher,
    *,
    republish_after: int,
    delivery_id: str | None = None,
    limit: int = 200,
) -> int:
    """Publish due pending deliveries (oldest first, or only ``delivery_id``); how many."""
    now = utcnow()
    if delivery_id is not None:
        ids = [delivery_id]
    else:
        with session_scope(engine) as session:
            ids = repository.due_for_publishing(session, now=now, limit=limit)
    published = 0
    for due_id in ids:
        try:
            with session_scope(engine) as session:
                delivery = repository.delivery(session, due_id, for_update=True)
                if delivery is None or delivery.status is not DeliveryStatus.PENDING:
                    continue
                if delivery.republish_at is not None and delivery.republish_at > now:
                    continue  # published meanwhile, or its attempt is in flight
                publish(DELIVER_TASK, [delivery.id])
                state.mark_published(session, delivery, now=now, after=republish_after)
        except Exception:  # the broker is down: the rows wait for the next sweep
            logger.warning("could not publish webhook delivery %s", due_id, exc_info=True)
            break
        published += 1
    return published
