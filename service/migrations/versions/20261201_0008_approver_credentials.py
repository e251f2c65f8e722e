"""approver credentials: passkeys, key enrolments and the WebAuthn sign counter

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 17:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "approver_passkeys",
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("approver", sa.String(length=128), nullable=False),
        sa.Column("credential_id", sa.String(length=1400), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("algorithm", sa.Integer(), nullable=False),
        sa.Column("sign_count", sa.BigInteger(), nullable=False),
        sa.Column("transports", sa.JSON(), nullable=False),
        sa.Column("aaguid", sa.String(length=36), nullable=False),
        sa.Column("rp_id", sa.String(length=253), nullable=False),
        sa.Column("origin", sa.String(length=2048), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("key_id"),
        sa.UniqueConstraint("credential_id"),
    )
    with op.batch_alter_table("approver_passkeys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_approver_passkeys_tenant"), ["tenant"], unique=False)

    op.create_table(
        "key_enrolments",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("approver", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=False),
        sa.Column("material", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=2000), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decided_by", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("key_enrolments", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_key_enrolments_tenant"), ["tenant"], unique=False)
        batch_op.create_index(batch_op.f("ix_key_enrolments_key_id"), ["key_id"], unique=False)

    op.create_table(
        "webauthn_challenges",
        sa.Column("challenge", sa.String(length=100), nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("subject", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("challenge"),
    )
    with op.batch_alter_table("webauthn_challenges", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_webauthn_challenges_expires_at"), ["expires_at"], unique=False
        )

    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.alter_column(
            "signature",
            existing_type=sa.String(length=200),
            type_=sa.String(length=700),
            existing_nullable=False,
        )
        batch_op.add_column(
            sa.Column("scheme", sa.String(length=16), nullable=False, server_default="ed25519")
        )
        batch_op.add_column(sa.Column("authenticator_data", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("client_data_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.drop_column("client_data_json")
        batch_op.drop_column("authenticator_data")
        batch_op.drop_column("scheme")
        batch_op.alter_column(
            "signature",
            existing_type=sa.String(length=700),
            type_=sa.String(length=200),
            existing_nullable=False,
        )
    with op.batch_alter_table("webauthn_challenges", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_webauthn_challenges_expires_at"))
    op.drop_table("webauthn_challenges")
    with op.batch_alter_table("key_enrolments", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_key_enrolments_key_id"))
        batch_op.drop_index(batch_op.f("ix_key_enrolments_tenant"))
    op.drop_table("key_enrolments")
    with op.batch_alter_table("approver_passkeys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_approver_passkeys_tenant"))
    op.drop_table("approver_passkeys")
