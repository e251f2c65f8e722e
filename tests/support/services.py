"""Reaching the real PostgreSQL and Redis of this machine, or skipping (failing in CI)."""

from __future__ import annotations

import os
import secrets
import socket
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

POSTGRES_URL = os.environ.get(
    "DRAFTGATE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("DRAFTGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379")


def services_required() -> bool:
    return os.environ.get("DRAFTGATE_REQUIRE_SERVICES") == "1"


def unavailable(service: str, reason: str) -> None:
    """Skip locally; fail when DRAFTGATE_REQUIRE_SERVICES=1 (CI must not skip silently)."""
    message = f"{service} is not reachable: {reason}"
    if services_required():
        pytest.fail(message + " (DRAFTGATE_REQUIRE_SERVICES=1)")
    pytest.skip(message)


def reachable(url: str, default_port: int) -> str | None:
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
    parts = urlsplit(url)
    return parts._replace(path=f"/{database}").geturl()


def create_database(template: str | None = None) -> str:
    """Create a uniquely named database (optionally copied from a template); returns its name."""
    name = f"dg_test_{secrets.token_hex(6)}"
    with psycopg.connect(libpq_url(POSTGRES_URL), autocommit=True) as connection:
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        connection.execute(statement)
    return name


def drop_database(name: str) -> None:
    assert name.startswith("dg_test_"), "tests only ever drop databases they created"
    with psycopg.connect(libpq_url(POSTGRES_URL), autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
