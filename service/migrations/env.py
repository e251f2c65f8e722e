"""Alembic environment: the only way draftgate's schema is created or changed."""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from sqlalchemy import Connection
from sqlmodel.sql.sqltypes import AutoString

from service.config import get_settings
from service.db import make_engine
from service.sql import EnumText, UTCDateTime
from service.tables import metadata


def _render_item(kind: str, obj: Any, _autogen_context: Any) -> str | Literal[False]:
    # Migrations spell plain SQLAlchemy types, so they never break when app types move.
    if kind == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    if kind == "type" and isinstance(obj, EnumText):
        return f"sa.String(length={obj.length})"
    if kind == "type" and isinstance(obj, AutoString):
        return f"sa.String(length={obj.length})" if obj.length else "sa.String()"
    return False


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copy
        compare_type=True,
        render_item=_render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url") or get_settings().resolved_database_url()
    engine = make_engine(url)
    try:
        with engine.connect() as new_connection:
            _run(new_connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit(
        "draftgate migrations run online only: point DRAFTGATE_DATABASE_URL at the database"
    )
run_migrations_online()
