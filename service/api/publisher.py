"""Publishing tasks from the API process: a send-only Celery client (no task code imported)."""

from __future__ import annotations

import logging
import threading

from celery import Celery

from service.config import Settings
from service.executions.outbox import Publisher
from service.executions.queue import celery_config
from service.telemetry import publishing

# Fail fast when the broker is down: the outbox keeps the message for the sweeper.
RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}


def celery_publisher(settings: Settings) -> Publisher:
    client = Celery("draftgate-api", set_as_current=False)
    config = celery_config(settings)
    if not config["broker_url"].startswith("sqla+"):
        # A broker that accepts connections but never answers must not hang a request.
        config["broker_transport_options"] = {
            **config["broker_transport_options"],
            "socket_connect_timeout": 2,
            "socket_timeout": 5,
        }
    client.conf.update(config)
    # In the background, so that a broker that is down never delays the API's start.
    threading.Thread(target=_warm_up, args=(client,), name="publisher-warm-up", daemon=True).start()

    def publish(task: str, args: list[str]) -> None:
        with publishing(task) as headers:  # the trace travels in the message's headers
            client.send_task(
                task, args=args, headers=headers, retry=True, retry_policy=RETRY_POLICY
            )

    return publish


def _warm_up(client: Celery) -> None:
    """Pay now what the first publish would: the first execute request's hand-off took a
    second or more (Celery imports its result backend on the first send_task, the pool
    opens its first broker connection). Best effort: the first publish retries anyway."""
    try:
        _ = client.backend
        with client.producer_or_acquire() as producer:
            producer.connection.ensure_connection(max_retries=1)
            # Declaring the queue opens the channel (on the SQLite broker: its engine and
            # tables) and is remembered, so the first send_task does not declare it again.
            producer.maybe_declare(client.amqp.queues[client.conf.task_default_queue])
    except Exception as exc:  # warming is an optimisation, never a failure
        logging.getLogger(__name__).info("publisher warm-up: broker not reachable yet (%s)", exc)
