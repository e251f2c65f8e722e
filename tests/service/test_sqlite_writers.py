"""SQLite writers of one process queue for the write lock (service/sqlite_writers.py).

Issue 9: under 8 concurrent sessions on SQLite a call spent 74 of its 91 ms waiting in
``BEGIN IMMEDIATE``, because SQLite's busy handler sleeps and polls (1, 2, 5 … 100 ms) instead
of handing the lock on; p99 reached 0.5-1.6 s.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from sqlalchemy.exc import OperationalError

from service import db
from service.db import make_engine, unavailable
from tests.support.sqlite_locks import write, write_lock_held


def test_sqlite_writers_of_one_process_get_the_write_lock_in_arrival_order(sqlite_engine):
    entered: list[str] = []
    waiters = []
    with write_lock_held(sqlite_engine):
        for label in "abcdef":
            waiter = threading.Thread(target=write, args=(sqlite_engine, label, entered))
            waiter.start()
            waiters.append(waiter)
            time.sleep(0.05)  # each one is waiting before the next arrives
    for waiter in waiters:
        waiter.join(20)

    # SQLite's busy handler would let whichever poller woke first in; the queue hands on in turn.
    assert entered == list("abcdef")


def test_a_writer_that_waits_too_long_in_the_queue_is_refused_as_locked(sqlite_url, monkeypatch):
    monkeypatch.setattr(db, "SQLITE_BUSY_TIMEOUT_MS", 200)
    engine = make_engine(sqlite_url)
    entered: list[str] = []
    with write_lock_held(engine), pytest.raises(OperationalError) as caught:
        write(engine, "late", entered)

    error = unavailable(caught.value)
    assert error is not None
    assert error.code == "DATABASE_UNAVAILABLE"
    assert entered == []
    write(engine, "next", entered)  # the refused writer left no turn behind
    assert entered == ["next"]
    engine.dispose()


def test_a_begin_refused_by_another_process_lock_gives_up_its_turn(sqlite_url, monkeypatch):
    monkeypatch.setattr(db, "SQLITE_BUSY_TIMEOUT_MS", 200)
    engine = make_engine(sqlite_url)
    other_process = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    other_process.execute("BEGIN IMMEDIATE")  # another process's writer: SQLite's lock, not ours
    entered: list[str] = []
    try:
        with pytest.raises(OperationalError, match="database is locked"):
            write(engine, "blocked", entered)
    finally:
        other_process.execute("ROLLBACK")
        other_process.close()

    finished = threading.Thread(target=write, args=(engine, "after", entered))
    finished.start()
    finished.join(5)
    assert entered == ["after"], "a BEGIN that failed must not keep the queue's turn"
    engine.dispose()
