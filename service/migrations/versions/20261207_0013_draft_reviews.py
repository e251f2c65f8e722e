"""oversight: what each approver did with each revision they decided (draft_reviews)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07 19:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from service.sql import BigInt, UTCDateTime

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "draft_reviews",
        sa.Column(
            "draft_id", sa.String(length=40), sa.ForeignKey("drafts.id"), primary_key=True
        ),
        sa.Column("revision", sa.Integer(), primary_key=True),
        sa.Column("approver", sa.String(length=128), primary_key=True),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("first_viewed_at", UTCDateTime(), nullable=True),
        sa.Column("params_seen_at", UTCDateTime(), nullable=True),
        sa.Column("source_seen_at", UTCDateTime(), nullable=True),
        sa.Column("decided_at", UTCDateTime(), nullable=True),
        sa.Column("decision", sa.String(length=16), nullable=True),
        sa.Column("dwell_ms", BigInt, nullable=True),
        sa.Column("latency_ms", BigInt, nullable=True),
        sa.Column("hasty", sa.Boolean(), nullable=False),
    )
    op.create_index(
        "ix_draft_reviews_approver", "draft_reviews", ["tenant", "approver", "decided_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_draft_reviews_approver", table_name="draft_reviews")
    op.drop_table("draft_reviews")
