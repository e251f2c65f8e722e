"""The PostgreSQL and Redis servers a deployment uses, and private databases on them.

The URLs come from ``DRAFTGATE_TEST_POSTGRES_URL`` / ``DRAFTGATE_TEST_REDIS_URL`` (CI sets
them), else this machine's servers on their default ports. Only databases created here
(named ``<prefix><hex>``) are ever dropped here.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

POSTGRES_URL = os.environ.get(
    "DRAFTGATE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("DRAFTGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379")
PREFIX = "dg_test_"


def reachable(url: str, default_port: int) -> str | None:
    """None when something listens at ``url``'s host and port; else why not."""
    parts = urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or default_port), 2
        ):
            return None
    except OSError as exc:
        return str(exc)


def libpq_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def with_database(url: str, database: str) -> str:
    return urlsplit(url)._replace(path=f"/{database}").geturl()


def create_database(
    template: str | None = None, *, server: str = POSTGRES_URL, prefix: str = PREFIX
) -> str:
    """Create a uniquely named database (optionally a copy of ``template``); its name."""
    name = f"{prefix}{secrets.token_hex(6)}"
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template)
        )
    with psycopg.connect(libpq_url(server), autocommit=True) as connection:
        connection.execute(statement)
    return name


def drop_database(name: str, *, server: str = POSTGRES_URL, prefix: str = PREFIX) -> None:
    assert name.startswith(prefix), "only databases created here are ever dropped"
    with psycopg.connect(libpq_url(server), autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@contextmanager
def private_database(server: str = POSTGRES_URL, *, prefix: str = PREFIX) -> Iterator[str]:
    """An empty database of its own on ``server``, dropped (forcibly) when the block ends;
    yields its SQLAlchemy URL."""
    name = create_database(server=server, prefix=prefix)
    try:
        yield with_database(server, name)
    finally:
        drop_database(name, server=server, prefix=prefix)
