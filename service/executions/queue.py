"""How executions travel: the Celery configuration shared by every process that talks to
the broker (the worker, beat, and the API publishing tasks). Plain data: no Celery here."""

from __future__ import annotations

from typing import Any

from service.config import Settings
from service.executions.sqlite_broker import TRANSPORT_PATH


def celery_config(settings: Settings) -> dict[str, Any]:
    broker_url = settings.resolved_broker_url()
    if broker_url.startswith("sqla+"):
        # kombu hands these straight to SQLAlchemy's create_engine.
        transport_options: dict[str, Any] = {"connect_args": {"timeout": 30}}
    else:
        # Redis redelivers a task nobody acknowledged within this window. It must
        # exceed any task's run time and retry countdown, or live tasks run twice.
        transport_options = {"visibility_timeout": settings.broker_visibility_timeout_seconds}
    return {
        "broker_url": broker_url,
        **_consumer_transport(broker_url),
        "broker_transport_options": transport_options,
        "broker_connection_retry_on_startup": True,
        "broker_connection_timeout": 5,
        "task_default_queue": settings.broker_queue,
        # Acknowledge after the task ran (it is idempotent), and give the message
        # back if the process running it dies, so no approved execution is lost.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        # A worker that reconnects when Redis goes away while it runs a task, instead of
        # exiting on a Celery 5.7 clean-up error (see workers/consumer.py). A path, not an
        # import: this module stays free of Celery.
        "worker_consumer": "workers.consumer:BrokerLossTolerantConsumer",
        # Below the lease (Settings.execution_soft_time_limit). Enforced by the prefork
        # pool; the embedded solo pool has none.
        "task_soft_time_limit": settings.execution_soft_time_limit(),
        "task_time_limit": settings.execution_lease_seconds * 0.9,
        "task_ignore_result": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        # A prefork child warms up (the runtime, and a gateway's upstreams: stdio servers to
        # start, catalogues to read) before it reports alive; Celery's 4 s is too short then.
        "worker_proc_alive_timeout": 30.0 if settings.gateway_file else 4.0,
        "worker_hijack_root_logger": False,
        "worker_send_task_events": False,
        "enable_utc": True,
    }


def _consumer_transport(broker_url: str) -> dict[str, Any]:
    """On the embedded SQLite broker, every process goes through draftgate's transport: the
    worker wakes on a commit instead of sleeping kombu's 1 s poll out, and both sides write
    without fsyncing a journal (``sqlite_broker``). ``broker_url`` (what health checks and
    other settings readers see) stays kombu's own ``sqla+`` URL."""
    if not broker_url.startswith("sqla+sqlite:"):
        return {}
    # Celery hands an explicit transport to kombu only for a URL without a "<name>+" prefix.
    plain = broker_url.removeprefix("sqla+")
    return {"broker_read_url": plain, "broker_write_url": plain, "broker_transport": TRANSPORT_PATH}
