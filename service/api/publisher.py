"""Publishing tasks from the API process: a send-only Celery client (no task code imported)."""

from __future__ import annotations

from celery import Celery

from service.config import Settings
from service.executions.outbox import Publisher
from service.executions.queue import celery_config

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

    def publish(task: str, args: list[str]) -> None:
        client.send_task(task, args=args, retry=True, retry_policy=RETRY_POLICY)

    return publish
