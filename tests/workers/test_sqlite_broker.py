"""The embedded broker's transport: a publish wakes an idle consumer at once (kombu's own
transport sleeps its poll out, 1 s), the file runs in WAL mode, and every process that uses
``celery_config`` goes through it while ``broker_url`` keeps kombu's ``sqla+`` form."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection, Queue

from service.config import Settings
from service.executions import doorbell, sqlite_broker
from service.executions.doorbell import Doorbell
from service.executions.queue import celery_config

# Far beyond the test's patience: a consumer that only polls would never see the message.
CEILING_SECONDS = 30.0
WAKE_BOUND_SECONDS = 0.5


@pytest.fixture(params=["inotify", "data_version"])
def wake_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "data_version":
        monkeypatch.setattr(doorbell, "_inotify_watch", lambda _directory: None)
    monkeypatch.setattr(sqlite_broker.Transport, "polling_interval", CEILING_SECONDS)
    return str(request.param)


def consume_one(url: str, queue: Queue, received: list[tuple[float, Any]]) -> None:
    with Connection(url, transport=sqlite_broker.TRANSPORT_PATH) as connection:
        consumer = connection.Consumer(
            queue,
            callbacks=[
                lambda body, message: (received.append((time.monotonic(), body)), message.ack())
            ],
        )
        with consumer:
            connection.drain_events(timeout=CEILING_SECONDS)


def test_a_publish_from_another_process_wakes_an_idle_consumer_at_once(
    tmp_path: Path, wake_mode: str
) -> None:
    database = tmp_path / "broker.db"
    queue = Queue("wake-test", routing_key="wake-test")
    received: list[tuple[float, Any]] = []
    consumer = threading.Thread(
        target=consume_one, args=(f"sqlite:///{database}", queue, received), daemon=True
    )
    consumer.start()
    time.sleep(1.5)  # the consumer has polled, found nothing, and is waiting
    assert not received
    # kombu's stock transport, as any other process would publish with it.
    with Connection(f"sqla+sqlite:///{database}") as publisher:
        published = time.monotonic()
        publisher.Producer().publish({"n": 1}, routing_key="wake-test", declare=[queue])
    consumer.join(timeout=CEILING_SECONDS)
    assert received, "the consumer never received the message"
    took, body = received[0][0] - published, received[0][1]
    assert body == {"n": 1}
    assert took < WAKE_BOUND_SECONDS, f"{wake_mode}: delivered {took:.3f} s after the publish"


def test_the_broker_file_runs_in_wal_mode_once_used(tmp_path: Path) -> None:
    database = tmp_path / "broker.db"
    with Connection(f"sqlite:///{database}", transport=sqlite_broker.TRANSPORT_PATH) as c:
        c.Producer().publish({"n": 1}, routing_key="q", declare=[Queue("q", routing_key="q")])
    with sqlite3.connect(database) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_doorbell_rings_for_its_file_only(tmp_path: Path) -> None:
    database, other = tmp_path / "broker.db", tmp_path / "other.db"
    for path in (database, other):
        with sqlite3.connect(path) as connection:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("CREATE TABLE t (x)")
    bell = Doorbell(database)
    try:
        bell.reset()
        with sqlite3.connect(other) as connection:
            connection.execute("INSERT INTO t VALUES (1)")
        assert not bell.wait(0.3), "a write to another file in the directory rang"
        with sqlite3.connect(database) as connection:
            connection.execute("INSERT INTO t VALUES (1)")
        started = time.monotonic()
        assert bell.wait(5)
        assert time.monotonic() - started < WAKE_BOUND_SECONDS
        bell.reset()
        assert not bell.wait(0.2), "a write already seen rang again"
    finally:
        bell.close()


def test_every_process_uses_the_transport_and_broker_url_keeps_kombus_form(
    tmp_path: Path,
) -> None:
    embedded = celery_config(Settings(state_dir=tmp_path))
    plain = f"sqlite:///{(tmp_path / 'broker.db').resolve()}"
    assert embedded["broker_url"] == f"sqla+{plain}"
    assert embedded["broker_read_url"] == embedded["broker_write_url"] == plain
    assert embedded["broker_transport"] == sqlite_broker.TRANSPORT_PATH
    production = celery_config(Settings(state_dir=tmp_path, broker_url="redis://127.0.0.1:1/0"))
    assert {"broker_read_url", "broker_write_url", "broker_transport"}.isdisjoint(production)


def test_the_api_publisher_connects_and_declares_its_queue_before_the_first_publish(
    tmp_path: Path,
) -> None:
    """The first execute request's hand-off took a second or more: the publisher opened its
    broker connection (and, on SQLite, created the broker's tables) on the first publish."""
    from service.api.publisher import celery_publisher

    settings = Settings(state_dir=tmp_path, broker_queue="warm-test")
    celery_publisher(settings)
    database = tmp_path / "broker.db"

    def declared() -> bool:
        if not database.exists():
            return False
        with sqlite3.connect(database) as connection:
            try:
                rows = connection.execute("SELECT name FROM kombu_queue").fetchall()
            except sqlite3.OperationalError:  # the tables are not there yet
                return False
        return ("warm-test",) in rows

    deadline = time.monotonic() + 20
    while not declared():
        assert time.monotonic() < deadline, "the publisher never warmed up"
        time.sleep(0.05)
