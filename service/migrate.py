"""Run Alembic migrations programmatically (``draftgate migrate``, ``draftgate dev``, tests),
and say whether a database is at the head (``draftgate doctor``)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from service.db import READ_ONLY

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the database at ``database_url`` to ``revision`` (creating it for SQLite)."""
    if database_url.startswith("sqlite:///"):
        Path(database_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(database_url), revision)


def schema_status(engine: Engine) -> str:
    """ "ok" when the database is at the Alembic head of this code; otherwise what is wrong.

    Reads the version table only: it never migrates (``draftgate doctor``, health checks).
    """
    script = ScriptDirectory(str(MIGRATIONS_DIR))
    heads = set(script.get_heads())
    with engine.connect() as connection:
        connection.execution_options(**{READ_ONLY: True})  # SQLite: no write lock
        current = set(MigrationContext.configure(connection).get_current_heads())
    if current == heads:
        return "ok"
    if not current:
        return "not migrated: the database has no draftgate schema; run `draftgate migrate`"
    known = {revision.revision for revision in script.walk_revisions()}
    unknown = sorted(current - known)
    if unknown:
        return (
            f"ahead: the database is at revision {', '.join(unknown)}, which this version of "
            "draftgate does not know (migrated by a newer release?)"
        )
    return (
        f"behind: the database is at revision {', '.join(sorted(current))}, the code at "
        f"{', '.join(sorted(heads))}; run `draftgate migrate`"
    )
