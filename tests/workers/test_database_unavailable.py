"""A worker that meets an unavailable database retries the delivery soon, instead of failing
the task and leaving the execution to the sweeper (a minute later by default)."""

from __future__ import annotations

import pytest
from celery.exceptions import Retry

from service.config import Settings
from service.db import unavailable
from service.runtime import build_runtime
from tests.support.servers import free_port
from workers import tasks


@pytest.fixture
def unreachable_runtime(tmp_path):
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/gone?connect_timeout=2"
    runtime = build_runtime(Settings(state_dir=tmp_path / "state", database_url=url))
    yield runtime
    runtime.engine.dispose()


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
