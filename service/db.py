"""The database engine and the unit of work. Nothing else lives here."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError
from sqlmodel import Session

from service.audit import chain
from service.errors import DATABASE_UNAVAILABLE, DomainError
from service.sqlite_writers import WriterQueue, serialise_writers
from service.webhooks.announce import announce

T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_UNAVAILABLE = ("database is locked", "unable to open", "disk i/o error")
# A pooled PostgreSQL connection idle for longer than this is pinged before use (a restart
# while idle is found then, not by a failed call); one in steady use is not, so a call does not
# pay a round trip for the ping. Connections are also replaced after POOL_RECYCLE_SECONDS.
PING_AFTER_IDLE_SECONDS = 5.0
POOL_RECYCLE_SECONDS = 1800
_CHECKED_IN_AT = "draftgate_checked_in_at"


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Create an engine; SQLite gets the settings that make it safe under concurrency."""
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs
        )
        event.listen(engine, "connect", _configure_sqlite_connection)
        event.listen(engine, "begin", partial(_begin, serialise_writers(engine)))
        return engine
    kwargs.setdefault("pool_recycle", POOL_RECYCLE_SECONDS)
    engine = create_engine(url, **kwargs)
    event.listen(engine, "checkin", _remember_checkin)
    event.listen(engine, "checkout", _ping_if_idle(engine))
    return engine


def _remember_checkin(_dbapi_connection: Any, record: Any) -> None:
    record.info[_CHECKED_IN_AT] = time.monotonic()


def _ping_if_idle(engine: Engine) -> Callable[[Any, Any, Any], None]:
    def ping(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get(_CHECKED_IN_AT)
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_SECONDS:
            return  # new, or in steady use: a dead one fails its call, which invalidates the pool
        try:
            engine.dialect.do_ping(dbapi_connection)
            dbapi_connection.rollback()  # the ping began a transaction; the unit's own comes next
        except Exception as exc:
            # The pool drops this connection (and those older) and checks out a fresh one.
            raise DisconnectionError("the pooled connection is gone") from exc

    return ping


def _configure_sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    # Let SQLAlchemy, not the sqlite3 module, decide when transactions begin,
    # so that SAVEPOINTs work and the BEGIN below is the one that counts.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


READ_ONLY = "draftgate_read_only"


def _begin(writers: WriterQueue, connection: Any) -> None:
    if connection.get_execution_options().get(READ_ONLY):
        # A reader in WAL mode needs no lock: a deferred BEGIN keeps one snapshot.
        connection.exec_driver_sql("BEGIN")
        return
    # Every other draftgate transaction writes (at least its audit event), so take
    # the write lock up front: a deferred transaction that later upgrades its lock
    # fails with SQLITE_BUSY instead of waiting. In this process, writers queue for it.
    dbapi_connection = connection.connection.dbapi_connection
    writers.acquire(dbapi_connection, timeout_seconds=SQLITE_BUSY_TIMEOUT_MS / 1000)
    try:
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    except BaseException:
        writers.release(dbapi_connection)
        raise


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any exception.

    Audit events recorded during the unit of work are appended to the tenant's
    hash chain just before the commit, inside the same transaction, and so are the
    webhook deliveries the appended events announce.
    """
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
            appended = chain.append_recorded(session)
            announce(session, appended)
            session.commit()
        except BaseException:
            session.rollback()
            raise


@contextmanager
def read_scope(engine: Engine) -> Iterator[Session]:
    """A read-only transaction that sees one snapshot from start to end.

    For long reads (exports, chain verification) while others keep appending:
    on SQLite it takes no write lock; on PostgreSQL it is REPEATABLE READ, READ
    ONLY. Nothing is ever committed.
    """
    options: dict[str, Any] = {READ_ONLY: True}
    postgres = engine.dialect.name == "postgresql"
    if postgres:
        options.update(isolation_level="REPEATABLE READ", postgresql_readonly=True)
    with engine.connect() as connection:
        connection.execution_options(**options)
        # SQLite has no read-only transaction; the connection refuses writes. Set on the
        # driver's connection, outside any transaction (a pragma needs none, and going through
        # SQLAlchemy would begin one for it, and another to undo it).
        query_only = None if postgres else connection.connection.driver_connection
        if query_only is not None:
            query_only.execute("PRAGMA query_only = ON")
        try:
            with Session(bind=connection, expire_on_commit=False) as session:
                try:
                    yield session
                finally:
                    session.rollback()
        finally:
            if query_only is not None:  # the connection goes back to the pool for writers
                query_only.execute("PRAGMA query_only = OFF")


@contextmanager
def lookup_scope(engine: Engine) -> Iterator[Session]:
    """A lookup of a row or two by our own code (a bearer token, before every request) that
    needs no transaction of its own: it takes no lock and commits nothing.

    On PostgreSQL each statement runs on its own in autocommit (no BEGIN and COMMIT round
    trips); on SQLite in a deferred transaction (no write lock). Either way it reads the last
    committed state, so a revocation committed before the lookup is seen by it.
    """
    postgres = engine.dialect.name == "postgresql"
    options: dict[str, Any] = {"isolation_level": "AUTOCOMMIT"} if postgres else {READ_ONLY: True}
    with engine.connect() as connection:
        connection.execution_options(**options)
        with Session(bind=connection, expire_on_commit=False) as session:
            try:
                yield session
            finally:
                session.rollback()


@contextmanager
def read_only(session: Session) -> Iterator[None]:
    """Run a stretch of a read-write unit of work (a read tool's handler) unable to write.

    The unit's own writes (its audit event) happen outside. Inside, any write fails:
    PostgreSQL refuses it in a READ ONLY savepoint; SQLite's connection is ``query_only``.
    The savepoint is rolled back at the end, which also restores read-write mode.
    """
    session.flush()  # the unit's pending writes are not the handler's
    savepoint = session.begin_nested()
    connection = session.connection()
    postgres = connection.dialect.name == "postgresql"
    connection.exec_driver_sql(
        "SET LOCAL transaction_read_only = on" if postgres else "PRAGMA query_only = ON"
    )
    try:
        yield
        session.flush()  # a write the handler only staged fails here, inside
    finally:
        if savepoint.is_active:
            savepoint.rollback()
        if not postgres:
            connection.exec_driver_sql("PRAGMA query_only = OFF")


def run_unit(
    engine: Engine,
    work: Callable[[Session], T],
    *,
    on_refusal: Callable[[Session, DomainError], None],
) -> T:
    """Run ``work`` in one transaction; if it refuses, roll it all back and record the refusal.

    Nothing a refused request did survives except the refusal's own audit
    event, written in a second, separate transaction.
    """
    return _run(session_scope, engine, work, on_refusal)


def run_read(
    engine: Engine,
    work: Callable[[Session], T],
    *,
    on_refusal: Callable[[Session, DomainError], None],
) -> T:
    """``run_unit`` for reads: one snapshot, no write lock; a refusal is still recorded."""
    return _run(read_scope, engine, work, on_refusal)


def _run(
    scope: Callable[[Engine], AbstractContextManager[Session]],
    engine: Engine,
    work: Callable[[Session], T],
    on_refusal: Callable[[Session, DomainError], None],
) -> T:
    try:
        with scope(engine) as session:
            return work(session)
    except DomainError as error:
        with session_scope(engine) as session:
            on_refusal(session, error)
        raise


def unavailable(exc: BaseException) -> DomainError | None:
    """DATABASE_UNAVAILABLE when ``exc`` says the database went away (a restart, a failover,
    a dropped connection), so the doors answer a retryable refusal instead of crashing;
    None for any other failure. The unit of work did not commit either way."""
    lost = isinstance(exc, OperationalError | InterfaceError) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    )
    if lost and type(getattr(exc, "orig", None)).__module__.startswith("sqlite3"):
        # SQLite says OperationalError for misuse too ("attempt to write a readonly database").
        lost = any(word in str(exc).lower() for word in SQLITE_UNAVAILABLE)
    if not lost:
        return None
    # A restart or failover takes seconds: a client may try again soon (Retry-After).
    return DATABASE_UNAVAILABLE(
        "The database is unavailable; nothing was changed.", details={"retry_after_seconds": 1}
    )
