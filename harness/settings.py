"""The two kinds of deployment, as settings, and the environment that carries them.

The one axis every test, bench and drill varies is the **backend**:

- ``sqlite``: the embedded kind ``draftgate dev`` runs, SQLite for data and kombu's
  server-less SQLAlchemy broker on a SQLite file beside it;
- ``postgresql``: the production shape, PostgreSQL for data and Redis as the broker.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any, Literal

from harness import services
from service.config import Settings, child_environment

Backend = Literal["sqlite", "postgresql"]
BACKENDS: tuple[Backend, ...] = ("sqlite", "postgresql")
REDIS_DB = 0


def backend_of(database_url: str) -> Backend:
    return "sqlite" if database_url.startswith("sqlite") else "postgresql"


def deployment_settings(
    root: Path,
    *,
    database_url: str,
    broker_url: str = "",
    queue: str = "",
    **overrides: Any,
) -> Settings:
    """Settings of a private deployment under ``root`` on ``database_url``: its state dir,
    the broker of its backend (SQLite: a broker file under ``root``; PostgreSQL: Redis, or
    ``broker_url``) and a queue of its own (so that deployments sharing a Redis never take
    each other's tasks)."""
    if not broker_url:
        broker_url = (
            f"sqla+sqlite:///{root / 'broker.db'}"
            if backend_of(database_url) == "sqlite"
            else f"{services.REDIS_URL.rstrip('/')}/{REDIS_DB}"
        )
    values: dict[str, Any] = {
        "state_dir": root / "state",
        "database_url": database_url,
        "broker_url": broker_url,
        "broker_queue": queue or f"dg-{secrets.token_hex(6)}",
        **overrides,
    }
    return Settings(**values)


def settings_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment that makes a child process see exactly these settings, its output
    unbuffered (its log is read while it runs)."""
    return {**child_environment(settings), "PYTHONUNBUFFERED": "1", **extra}
