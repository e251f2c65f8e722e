"""The worker warms up at start (the first execution after start took 0.6 to 1 s), changing
nothing; a database that is down at start does not stop the worker from starting."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy import func, select

from service.db import read_scope
from service.runtime import Runtime, build_runtime
from service.tables import metadata
from tests.support.backends import both_backends
from tests.workers.helpers import wait_until
from workers.warmup import warm_up

# Warming up opens a connection of each backend's kind: both backends.
pytestmark = both_backends


def row_counts(runtime: Runtime) -> dict[str, int]:
    with read_scope(runtime.engine) as session:
        return {
            table.name: int(session.execute(select(func.count()).select_from(table)).scalar_one())
            for table in metadata.sorted_tables
        }


def test_warming_up_opens_a_connection_and_changes_nothing(
    runtime: Runtime, demo: dict[str, Any]
) -> None:
    before = row_counts(runtime)
    runtime.engine.dispose()
    assert runtime.engine.pool.checkedin() == 0
    seconds = warm_up(runtime)
    assert seconds >= 0
    assert runtime.engine.pool.checkedin() == 1, "no pooled connection left for the first task"
    assert row_counts(runtime) == before


def test_a_database_that_is_down_is_logged_not_raised(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    unreachable = settings.model_copy(
        update={"database_url": "postgresql+psycopg://postgres@127.0.0.1:1/none"}
    )
    runtime = build_runtime(unreachable)
    with caplog.at_level(logging.WARNING, logger="workers.warmup"):
        warm_up(runtime)
    assert "worker warm-up failed" in caplog.text
    runtime.engine.dispose()


def test_the_worker_logs_its_warm_up(stack: Any) -> None:
    # Prefork children warm up right after the fork, which may come just after "ready".
    wait_until(
        lambda: "warmed up in" in stack.worker.log.read_text(errors="replace"),
        timeout=30,
        message="the worker never warmed up",
    )
    assert "warm-up failed" not in stack.worker.log.read_text(errors="replace")
