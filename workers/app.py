"""The Celery application of workers and beat, configured from settings."""

from __future__ import annotations

import os
from functools import cache

from celery import Celery

from service.config import Settings, get_settings
from service.executions.queue import celery_config
from service.executions.schemas import CHECKPOINT_TASK, SWEEP_TASK
from service.runtime import Runtime, build_runtime


def create_celery(settings: Settings) -> Celery:
    app = Celery("draftgate", set_as_current=True)
    app.conf.update(celery_config(settings))
    app.conf.beat_schedule = {
        "sweep": {"task": SWEEP_TASK, "schedule": settings.sweep_interval_seconds},
        "checkpoint": {"task": CHECKPOINT_TASK, "schedule": settings.checkpoint_interval_seconds},
    }
    app.conf.beat_schedule_filename = str(settings.state_dir / "beat-schedule")
    app.conf.include = ["workers.tasks"]
    return app


celery_app = create_celery(get_settings())


def runtime() -> Runtime:
    """This process's runtime; built after fork, so each pool process has its own engine."""
    return _runtime_for(os.getpid())


@cache
def _runtime_for(_pid: int) -> Runtime:
    return build_runtime(get_settings())
