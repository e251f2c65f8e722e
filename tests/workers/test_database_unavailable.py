"""A worker that meets an unavailable database retries the delivery soon, instead of failing
the task and leaving the execution to the sweeper (a minute later by default)."""

from __future__ import annotations

import pytest
from celery.exceptions import Retry

from service.db import unavailable
from workers import tasks


def test_execute_retries_soon_while_the_database_is_unavailable(monkeypatch, unreachable_runtime):
    asked: list[dict[str, object]] = []

    def retry(**options: object) -> Retry:  # what Celery's Task.retry is asked for
        asked.append(options)
        return Retry("retry", when=options["countdown"])

    monkeypatch.setattr(tasks, "runtime", lambda: unreachable_runtime)
    monkeypatch.setattr(tasks.execute, "retry", retry)
    with pytest.raises(Retry):
        tasks.execute("exe_" + "0" * 24)
    (options,) = asked
    assert options["countdown"] == 1  # the first retry, in one second
    assert unavailable(options["exc"]) is not None


def test_any_other_failure_still_fails_the_task(monkeypatch):
    def broken(*_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(tasks, "runtime", lambda: None)
    monkeypatch.setattr(tasks, "run_execution", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        tasks.execute("exe_" + "0" * 24)
