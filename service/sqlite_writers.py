"""SQLite's writers of one process queue for the write lock instead of polling for it.

SQLite lets one writer in at a time; the others' ``BEGIN IMMEDIATE`` sleeps and polls in its
busy handler (1, 2, 5 … 100 ms between tries), so under load a call waits far longer than the
writer ahead of it takes, and the unlucky ones wait longest (issue 9: 74 of 91 ms per call at
8 concurrent sessions, p99 up to 1.6 s). Here a process's writers wait on a queue instead.
"""

from __future__ import annotations

import sqlite3
import threading
import weakref
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.exc import OperationalError


class WriterQueue:
    """The writers of one SQLite file in this process, one at a time, in arrival order.

    A writer's turn lasts from its BEGIN IMMEDIATE until its COMMIT or ROLLBACK has returned,
    and the next starts the moment it ends. Other processes (a worker, the API) still meet
    SQLite's own lock and busy timeout, which remain what makes writes safe; a writer that
    waits here longer than the busy timeout is refused as SQLite would refuse it.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._turns: list[threading.Lock] = []  # the waiting writers, first come first served
        self._holder: int | None = None  # id() of the DBAPI connection in its write transaction

    def acquire(self, dbapi_connection: Any, *, timeout_seconds: float) -> None:
        """Wait for ``dbapi_connection``'s turn; "database is locked" after ``timeout_seconds``."""
        with self._guard:
            if self._holder is None and not self._turns:
                self._holder = id(dbapi_connection)
                return
            turn = threading.Lock()
            turn.acquire()
            self._turns.append(turn)
        handed_over = turn.acquire(timeout=timeout_seconds)
        with self._guard:
            if not handed_over and turn in self._turns:  # give up, as SQLite's timeout would
                self._turns.remove(turn)
                raise _database_locked()
            self._holder = id(dbapi_connection)  # (handed over, perhaps just as the wait ended)

    def release(self, dbapi_connection: Any) -> None:
        """End ``dbapi_connection``'s turn, if it has one (safe to call more than once)."""
        with self._guard:
            if self._holder != id(dbapi_connection):
                return
            self._holder = None
            if self._turns:
                self._holder = -1  # reserved for the next in line until it takes over
                self._turns.pop(0).release()


# Weak: a file's queue lives as long as an engine on it does.
_QUEUES: weakref.WeakValueDictionary[str, WriterQueue] = weakref.WeakValueDictionary()
_QUEUES_GUARD = threading.Lock()


def serialise_writers(engine: Engine) -> WriterQueue:
    """Queue this engine's write transactions with every other engine's on the same file."""
    database = engine.url.database or ""
    key = str(Path(database).resolve()) if database and database != ":memory:" else f"{id(engine)}"
    with _QUEUES_GUARD:
        writers = _QUEUES.get(key) or WriterQueue()
        _QUEUES[key] = writers
    dialect = engine.dialect
    commit, rollback = dialect.do_commit, dialect.do_rollback

    def do_commit(dbapi_connection: Any) -> None:
        try:
            commit(dbapi_connection)
        finally:  # a failed COMMIT is rolled back next; either way this writer is done
            writers.release(_raw(dbapi_connection))

    def do_rollback(dbapi_connection: Any) -> None:
        try:
            rollback(dbapi_connection)
        finally:
            writers.release(_raw(dbapi_connection))

    # Released once the COMMIT or ROLLBACK has returned (the "commit" event fires before it).
    dialect.do_commit = do_commit  # type: ignore[method-assign]
    dialect.do_rollback = do_rollback  # type: ignore[method-assign]
    for name in ("checkin", "invalidate", "soft_invalidate", "close", "close_detached"):
        # A connection that ends without a rollback (invalidated, closed) ends its turn too.
        event.listen(engine, name, lambda dbapi_connection, *_: writers.release(dbapi_connection))
    return writers


def _raw(connection: Any) -> Any:
    # SQLAlchemy hands the dialect the pool's proxy, and pool events the DBAPI connection.
    return getattr(connection, "dbapi_connection", None) or connection


def _database_locked() -> OperationalError:
    return OperationalError("BEGIN IMMEDIATE", None, sqlite3.OperationalError("database is locked"))
