"""The worker's consumer, surviving a broker that goes away while it holds a message.

Celery 5.7.0 with kombu 5.7.0 on Redis: when the connection is lost while a message is
unacknowledged (acks_late: every running task), the consumer's clean-up closes the dead
connection, and closing its channel restores the unacknowledged messages through a
transport that clean-up has already detached. That raises AttributeError (no ``hostname``
on a ``None`` connection info), which Celery calls an unrecoverable error: the worker exits
instead of reconnecting (found by ``python -m reliability.topology``, Redis stopped under
load). Nothing is lost by skipping that restore: Redis keeps each unacknowledged message
and hands it out again after the visibility timeout, and the sweeper republishes whatever
did not finish.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.worker.consumer import Consumer

logger = logging.getLogger(__name__)


class BrokerLossTolerantConsumer(Consumer):  # type: ignore[misc]
    def on_connection_error_after_connected(self, exc: Any) -> None:
        try:
            super().on_connection_error_after_connected(exc)
        except AttributeError as error:
            # The dead connection is already dropped (self.connection is None): the
            # consumer goes on to reconnect, as it would have without the error.
            logger.warning(
                "broker connection lost; its unacknowledged messages return after the "
                "visibility timeout (%s)",
                error,
            )
