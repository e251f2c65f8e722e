"""The Celery application of workers and beat, configured from settings."""

from __future__ import annotations

import logging
import os
from functools import cache
from typing import Any

from celery import Celery, signals
from sqlalchemy.orm import configure_mappers

from service import telemetry
from service.config import Settings, get_settings
from service.executions.queue import celery_config
from service.executions.schemas import CHECKPOINT_TASK, SWEEP_TASK
from service.logs import configure_logging
from service.runtime import Runtime, build_runtime
from service.webhooks.schemas import SWEEP_TASK as WEBHOOK_SWEEP_TASK
from workers import metrics as _metrics  # noqa: F401 - serves the worker's /metrics
from workers.warmup import warm_up


def create_celery(settings: Settings) -> Celery:
    app = Celery("draftgate", set_as_current=True)
    app.conf.update(celery_config(settings))
    app.conf.beat_schedule = {
        "sweep": {"task": SWEEP_TASK, "schedule": settings.sweep_interval_seconds},
        "checkpoint": {"task": CHECKPOINT_TASK, "schedule": settings.checkpoint_interval_seconds},
        "webhooks": {
            "task": WEBHOOK_SWEEP_TASK,
            "schedule": settings.webhook_sweep_interval_seconds,
        },
    }
    app.conf.beat_schedule_filename = str(settings.state_dir / "beat-schedule")
    app.conf.include = ["workers.tasks", "workers.webhooks"]
    return app


celery_app = create_celery(get_settings())


def runtime() -> Runtime:
    """This process's runtime; built after fork, so each pool process has its own engine."""
    return _runtime_for(os.getpid())


@cache
def _runtime_for(_pid: int) -> Runtime:
    return build_runtime(get_settings())


@signals.setup_logging.connect  # type: ignore[untyped-decorator]
def _configure_logging(loglevel: int | str | None = None, **_: Any) -> None:
    """Ours instead of Celery's (a receiver here tells Celery not to configure logging): the
    worker's and beat's lines, Celery's own included, in the format of every other process."""
    settings = get_settings()
    configure_logging(fmt=settings.log_format, level=loglevel or settings.log_level)


def _trace_tasks() -> None:
    """Spans for the tasks of this process, when an OTLP endpoint is configured; where the
    tasks run, after any fork (the exporter's thread would not survive one)."""
    if telemetry.configure("worker"):
        telemetry.instrument_celery_worker()


# Warm up where the tasks will run, before the worker reports ready (the first execution
# after start otherwise paid for it): each prefork child after the fork, or the worker
# process itself when its pool (solo, threads) runs tasks in it.
@signals.worker_process_init.connect  # type: ignore[untyped-decorator]
def _warm_pool_process(**_: Any) -> None:
    _trace_tasks()  # first: the runtime's engine is instrumented when it is built
    _log_warm_up(warm_up(runtime()))


@signals.worker_init.connect  # type: ignore[untyped-decorator]
def _warm_worker_process(sender: Any = None, **_: Any) -> None:
    pool = getattr(sender, "pool_cls", "prefork")  # a name until Celery resolves it
    name = pool if isinstance(pool, str) else f"{pool.__module__}.{pool.__qualname__}"
    if "prefork" in name.lower():
        # No connection here (it must not cross the fork); what the children inherit, yes.
        configure_mappers()
    else:
        _trace_tasks()
        _log_warm_up(warm_up(runtime()))


def _log_warm_up(seconds: float) -> None:
    logging.getLogger(__name__).info("warmed up in %.0f ms", seconds * 1000)
