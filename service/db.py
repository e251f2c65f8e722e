"""The database engine and the unit of work. Nothing else lives here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlmodel import Session

from service.audit import chain
from service.errors import DATABASE_UNAVAILABLE, DomainError

T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_UNAVAILABLE = ("database is locked", "unable to open", "disk i/o error")


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Create an engine; SQLite gets the settings that make it safe under concurrency."""
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs
        )
        event.listen(engine, "connect", _configure_sqlite_connection)
        event.listen(engine, "begin", _begin)
        return engine
    return create_engine(url, pool_pre_ping=True, **kwargs)


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


def _begin(connection: Any) -> None:
    if connection.get_execution_options().get(READ_ONLY):
        # A reader in WAL mode needs no lock: a deferred BEGIN keeps one snapshot.
        connection.exec_driver_sql("BEGIN")
        return
    # Every other draftgate transaction writes (at least its audit event), so take
    # the write lock up front: a deferred transaction that later upgrades its lock
    # fails with SQLITE_BUSY instead of waiting.
    connection.exec_driver_sql("BEGIN IMMEDIATE")


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any exception.

    Audit events recorded during the unit of work are appended to the tenant's
    hash chain just before the commit, inside the same transaction.
    """
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
            chain.append_recorded(session)
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
        if not postgres:  # SQLite has no read-only transaction; the connection refuses writes
            connection.exec_driver_sql("PRAGMA query_only = ON")
        try:
            with Session(bind=connection, expire_on_commit=False) as session:
                try:
                    yield session
                finally:
                    session.rollback()
        finally:
            if not postgres:  # the connection goes back to the pool for writers
                connection.exec_driver_sql("PRAGMA query_only = OFF")


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
    return DATABASE_UNAVAILABLE("The database is unavailable; nothing was changed.")
