"""The unit of work's engine (service/db.py): reads take no write lock, and PostgreSQL
connections are pinged only after idling.

Issue 9: ``pool_pre_ping`` cost PostgreSQL a round trip on every checkout (two per call).
"""

from __future__ import annotations

import time

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from harness.services import POSTGRES_URL, libpq_url
from service import db
from service.db import make_engine, session_scope, unavailable
from tests.support.sqlite_locks import write_lock_held


def test_reads_do_not_queue_behind_a_writer(sqlite_engine):
    with write_lock_held(sqlite_engine):
        started = time.perf_counter()
        with db.read_scope(sqlite_engine) as session:
            session.execute(text("SELECT count(*) FROM shop_customers")).one()
        with db.lookup_scope(sqlite_engine) as session:
            session.execute(text("SELECT count(*) FROM api_tokens")).one()
        assert time.perf_counter() - started < 1.0


# --- PostgreSQL: a ping only for a connection that sat idle ----------------------------------


def _terminate_backends(url: str) -> None:
    database = url.rsplit("/", 1)[-1]
    with psycopg.connect(libpq_url(POSTGRES_URL), autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        )


def _select_one(engine: Engine) -> int:
    with session_scope(engine) as session:
        return int(session.execute(text("SELECT 1")).scalar_one())


def test_a_postgres_connection_in_steady_use_is_not_pinged(postgres_url):
    engine = make_engine(postgres_url)
    _select_one(engine)
    pings: list[object] = []
    original = engine.dialect.do_ping
    engine.dialect.do_ping = lambda connection: pings.append(connection) or original(connection)  # type: ignore[method-assign]

    for _ in range(5):
        _select_one(engine)

    assert pings == []
    engine.dispose()


def test_a_postgres_connection_idle_for_a_while_is_pinged_and_replaced_if_gone(
    postgres_url, monkeypatch
):
    engine = make_engine(postgres_url)
    _select_one(engine)
    _terminate_backends(postgres_url)  # a restart while the pool sat idle
    monkeypatch.setattr(db, "PING_AFTER_IDLE_SECONDS", 0.0)

    assert _select_one(engine) == 1, "the dead connection was found by the ping and replaced"
    engine.dispose()


def test_a_postgres_connection_lost_in_steady_use_fails_one_call_retryably_then_recovers(
    postgres_url,
):
    engine = make_engine(postgres_url)
    _select_one(engine)
    _terminate_backends(postgres_url)

    with pytest.raises(OperationalError) as caught:
        _select_one(engine)
    error = unavailable(caught.value)
    assert error is not None
    assert error.code == "DATABASE_UNAVAILABLE"
    assert error.retryable
    assert _select_one(engine) == 1, "the pool dropped the dead connections"
    engine.dispose()
