"""source-bound drafts: a draft's source and its revision; one execution per draft revision

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07 15:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite names no unique constraint it was given unnamed; batch mode needs a name to drop
# the one 0002 made on executions.draft_id (PostgreSQL named it executions_draft_id_key).
SQLITE_NAMES = {"uq": "uq_%(table_name)s_%(column_0_name)s"}


def _source_columns(with_ref: bool) -> list[sa.Column[object]]:
    columns: list[sa.Column[object]] = []
    if with_ref:
        columns.append(sa.Column("source_ref", sa.String(length=200), nullable=True))
    columns.append(sa.Column("source_revision", sa.String(length=128), nullable=True))
    columns.append(sa.Column("source", sa.JSON(), nullable=True))
    return columns


def upgrade() -> None:
    with op.batch_alter_table("drafts") as batch_op:
        for column in _source_columns(with_ref=True):
            batch_op.add_column(column)
        batch_op.create_index("ix_drafts_source", ["tenant", "source_ref", "status"], unique=False)
    with op.batch_alter_table("draft_revisions") as batch_op:
        for column in _source_columns(with_ref=False):
            batch_op.add_column(column)
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.batch_alter_table(
        "executions", naming_convention=SQLITE_NAMES if sqlite else None
    ) as batch_op:
        batch_op.drop_constraint(
            "uq_executions_draft_id" if sqlite else "executions_draft_id_key", type_="unique"
        )
        batch_op.create_unique_constraint(
            "uq_executions_draft_revision", ["draft_id", "revision"]
        )
        batch_op.create_index("ix_executions_draft_id", ["draft_id"], unique=False)


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.batch_alter_table("executions") as batch_op:
        batch_op.drop_index("ix_executions_draft_id")
        batch_op.drop_constraint("uq_executions_draft_revision", type_="unique")
        batch_op.create_unique_constraint(
            "uq_executions_draft_id" if sqlite else "executions_draft_id_key", ["draft_id"]
        )
    with op.batch_alter_table("draft_revisions") as batch_op:
        batch_op.drop_column("source")
        batch_op.drop_column("source_revision")
    with op.batch_alter_table("drafts") as batch_op:
        batch_op.drop_index("ix_drafts_source")
        batch_op.drop_column("source")
        batch_op.drop_column("source_revision")
        batch_op.drop_column("source_ref")
