"""execution publishes and republish backoff; draft policy keys

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 11:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("publishes", sa.Integer(), nullable=False, server_default="0")
        )
        batch_op.add_column(sa.Column("republish_at", sa.DateTime(timezone=True), nullable=True))
    # The default only filled the existing rows; the models set the value themselves.
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.alter_column("publishes", server_default=None)
    with op.batch_alter_table("drafts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("policy_key", sa.String(length=64), nullable=True))
        batch_op.create_index(
            "ix_drafts_peers", ["tenant", "action", "policy_key", "created_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("drafts", schema=None) as batch_op:
        batch_op.drop_index("ix_drafts_peers")
        batch_op.drop_column("policy_key")
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.drop_column("republish_at")
        batch_op.drop_column("publishes")
