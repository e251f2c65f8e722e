"""webhooks: webhook endpoints, deliveries and their outbox

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 17:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("description", sa.String(length=200), nullable=False),
        sa.Column("sealed_secret", sa.String(length=200), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("removed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("webhook_endpoints", schema=None) as batch_op:
        batch_op.create_index(
            "ix_webhook_endpoints_tenant_removed", ["tenant", "removed_at"], unique=False
        )

    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("endpoint_id", sa.String(length=40), nullable=False),
        sa.Column("event_type", sa.String(length=64), nullable=False),
        sa.Column("draft_id", sa.String(length=64), nullable=True),
        sa.Column("execution_id", sa.String(length=64), nullable=True),
        sa.Column("revision", sa.Integer(), nullable=True),
        sa.Column("action", sa.String(length=64), nullable=True),
        sa.Column("subject_status", sa.String(length=32), nullable=True),
        sa.Column("audit_seq", BIG_ID, nullable=True),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("republish_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("publishes", sa.Integer(), nullable=False),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(length=300), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["endpoint_id"], ["webhook_endpoints.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.create_index(
            "ix_webhook_deliveries_endpoint_created", ["endpoint_id", "created_at"], unique=False
        )
        batch_op.create_index(
            "ix_webhook_deliveries_status_republish", ["status", "republish_at"], unique=False
        )

    op.create_table(
        "webhook_attempts",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("delivery_id", sa.String(length=40), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("error", sa.String(length=300), nullable=True),
        sa.ForeignKeyConstraint(["delivery_id"], ["webhook_deliveries.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("delivery_id", "number", name="uq_webhook_attempts"),
    )
    with op.batch_alter_table("webhook_attempts", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_webhook_attempts_delivery_id"), ["delivery_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("webhook_attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_webhook_attempts_delivery_id"))
    op.drop_table("webhook_attempts")
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.drop_index("ix_webhook_deliveries_status_republish")
        batch_op.drop_index("ix_webhook_deliveries_endpoint_created")
    op.drop_table("webhook_deliveries")
    with op.batch_alter_table("webhook_endpoints", schema=None) as batch_op:
        batch_op.drop_index("ix_webhook_endpoints_tenant_removed")
    op.drop_table("webhook_endpoints")
