"""Small SQL helpers shared by every repository: UTC timestamps and atomic claims."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from sqlalchemy import BigInteger, DateTime, Integer, String, Table, TypeDecorator
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlmodel import Session

# 64-bit integers everywhere money or counters live (PostgreSQL's INTEGER is 32-bit).
# SQLite needs plain INTEGER for an auto-incrementing primary key (the rowid alias).
BigInt = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    """UTC, microseconds, ``Z`` suffix: one spelling per instant (it is hashed and signed)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339_seconds(moment: datetime) -> str:
    """UTC to the second with ``Z``, as approvers write ``issued_at``: 2026-11-29T10:00:00Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class UTCDateTime(TypeDecorator[datetime]):
    """An aware UTC datetime on every backend (SQLite would hand back naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are ambiguous; pass an aware UTC datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


E = TypeVar("E", bound=StrEnum)


class EnumText(TypeDecorator[E], Generic[E]):
    """A ``StrEnum`` stored as its plain string value (VARCHAR), read back as the enum.

    Plain strings keep the schema portable and migrations simple; an unknown value in
    the database fails loudly on read instead of travelling on as a bare string.
    """

    impl = String
    cache_ok = True

    def __init__(self, enum: type[E], length: int = 16) -> None:
        super().__init__(length=length)
        self.enum = enum
        self.length = length

    def process_bind_param(self, value: E | str | None, dialect: Dialect) -> str | None:
        return None if value is None else self.enum(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> E | None:
        return None if value is None else self.enum(value)


def insert_or_ignore(session: Session, table: Table, values: dict[str, Any]) -> bool:
    """INSERT a row unless it would violate a unique constraint; True if inserted.

    On PostgreSQL a conflicting insert by a concurrent, uncommitted transaction
    makes this wait for that transaction, so exactly one caller wins a claim.
    """
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        statement: Any = postgresql.insert(table).values(**values).on_conflict_do_nothing()
    elif dialect == "sqlite":
        statement = sqlite.insert(table).values(**values).on_conflict_do_nothing()
    else:  # pragma: no cover - only the two supported backends exist
        raise RuntimeError(f"unsupported database dialect {dialect}")
    # RETURNING tells the truth on every driver; rowcount of ON CONFLICT DO NOTHING does not.
    returned = session.execute(statement.returning(*table.primary_key.columns))
    return returned.first() is not None
