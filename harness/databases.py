"""Databases that cost milliseconds, not seconds, and the demo tenant seeded into them.

Every database is migrated by Alembic once; a deployment then gets a copy (SQLite: a file
copy) or a reused one emptied in between (PostgreSQL: a small pool of migrated databases,
rows deleted in foreign-key order, which takes tens of milliseconds where CREATE/DROP
DATABASE takes a second).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import Table

from harness import services
from service.db import make_engine, session_scope
from service.demo import seed_demo
from service.migrate import upgrade
from service.runtime import Runtime
from service.tables import metadata

# Children before parents, so deleting in this order never violates a foreign key.
TABLES: list[Table] = list(reversed(metadata.sorted_tables))
# The demo's URLs when nobody dials them (the caller knows where its servers are).
NOWHERE = {"api_url": "http://api.invalid", "mcp_url": "http://mcp.invalid/mcp"}


def migrated_sqlite(path: Path) -> Path:
    """A migrated SQLite file at ``path`` (its WAL checkpointed, so it can be copied)."""
    url = f"sqlite:///{path}"
    upgrade(url)
    make_engine(url).dispose()
    return path


def sqlite_copy(template: Path, destination: Path) -> str:
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, destination)
    return f"sqlite:///{destination}"


def empty_sqlite(url: str) -> None:
    """Delete every row (for a database that servers of the same deployment keep open)."""
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            for table in TABLES:
                connection.execute(table.delete())
    finally:
        engine.dispose()


class PostgresPool:
    """Migrated PostgreSQL databases for one process, handed out one user at a time."""

    def __init__(self, server: str = services.POSTGRES_URL) -> None:
        self._server = server
        self._template: str | None = None
        self._free: list[str] = []
        self._created: list[str] = []

    def acquire(self) -> str:
        """The URL of an empty, migrated database that nobody else is using."""
        name = self._free.pop() if self._free else self._create()
        return services.with_database(self._server, name)

    def release(self, url: str) -> None:
        """Empty the database and return it to the pool (or drop it if it cannot be emptied)."""
        name = url.rsplit("/", 1)[-1]
        try:
            empty_postgres(url)
        except psycopg.Error:
            services.drop_database(name, server=self._server)
            self._created.remove(name)
            return
        self._free.append(name)

    def close(self) -> None:
        for name in [*self._created, *([self._template] if self._template else [])]:
            services.drop_database(name, server=self._server)
        self._created.clear()
        self._free.clear()

    def _create(self) -> str:
        if self._template is None:
            self._template = services.create_database(server=self._server)
            template_url = services.with_database(self._server, self._template)
            upgrade(template_url)
            make_engine(template_url).dispose()
        name = services.create_database(template=self._template, server=self._server)
        self._created.append(name)
        return name


def empty_postgres(url: str) -> None:
    """Delete every row in one transaction; connections left open are ended first if they
    hold locks for longer than a moment (one user's leak must not stall the next)."""
    dsn = services.libpq_url(url)
    try:
        _delete_rows(dsn)
    except psycopg.errors.LockNotAvailable:
        _terminate_other_connections(dsn)
        _delete_rows(dsn)


def _delete_rows(dsn: str) -> None:
    with psycopg.connect(dsn) as connection:
        connection.execute("SET lock_timeout = '3s'")
        for table in TABLES:
            connection.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(table.name)))
        connection.commit()


def _terminate_other_connections(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


def seed(
    runtime: Runtime, *, api_url: str = NOWHERE["api_url"], mcp_url: str = NOWHERE["mcp_url"]
) -> dict[str, Any]:
    """Seed the demo tenant into the runtime's database; returns its manifest."""
    with session_scope(runtime.engine) as session:
        return seed_demo(
            session,
            tenant=runtime.settings.default_tenant,
            state_dir=runtime.settings.state_dir,
            api_url=api_url,
            mcp_url=mcp_url,
        )


def fresh_demo(
    runtime: Runtime, *, api_url: str = NOWHERE["api_url"], mcp_url: str = NOWHERE["mcp_url"]
) -> dict[str, Any]:
    """A shared runtime ready for one more user: its database and rate-limit counters
    emptied, the demo seeded again; returns the demo manifest."""
    url = runtime.settings.resolved_database_url()
    if url.startswith("sqlite"):
        empty_sqlite(url)
    else:
        empty_postgres(url)
    runtime.limiter.reset()
    return seed(runtime, api_url=api_url, mcp_url=mcp_url)
