"""standing grants: an approver's signed grant, and the draft revisions it covered

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 18:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from service.sql import BigInt, UTCDateTime

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "grants",
        sa.Column("id", sa.String(length=40), primary_key=True),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("approver", sa.String(length=128), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("statement", sa.JSON(), nullable=False),
        sa.Column("signature", sa.String(length=700), nullable=False),
        sa.Column("scheme", sa.String(length=16), nullable=False),
        sa.Column("authenticator_data", sa.Text(), nullable=True),
        sa.Column("client_data_json", sa.Text(), nullable=True),
        sa.Column("not_before", UTCDateTime(), nullable=False),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("revoked_at", UTCDateTime(), nullable=True),
        sa.Column("revoked_by", sa.String(length=200), nullable=True),
    )
    op.create_index("ix_grants_tenant_action", "grants", ["tenant", "action"])
    op.create_table(
        "grant_uses",
        sa.Column(
            "draft_id", sa.String(length=40), sa.ForeignKey("drafts.id"), primary_key=True
        ),
        sa.Column("grant_id", sa.String(length=40), sa.ForeignKey("grants.id"), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("params_sha256", sa.String(length=64), nullable=False),
        sa.Column("amount_minor", BigInt, nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("grant_id", "seq", name="uq_grant_uses_grant_seq"),
    )


def downgrade() -> None:
    op.drop_table("grant_uses")
    op.drop_index("ix_grants_tenant_action", table_name="grants")
    op.drop_table("grants")
