"""The first schema: orgs, users, memberships, tokens, servers, audit log.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "orgs",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("name", sa.String, nullable=False, unique=True),
        sa.Column("plan", sa.String, nullable=False),
        sa.Column("created_at", sa.String, nullable=False),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("email", sa.String, nullable=False, unique=True),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("password_hash", sa.String, nullable=False),
        sa.Column("super_admin", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.String, nullable=False),
    )
    op.create_table(
        "memberships",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("user_id", sa.String, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("org_id", sa.String, sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("role", sa.String, nullable=False),
        sa.Column("capabilities", sa.String, nullable=True),
        sa.Column("created_at", sa.String, nullable=False),
        sa.UniqueConstraint("user_id", "org_id"),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("kind", sa.String, nullable=False),
        sa.Column("token_hash", sa.String, nullable=False, unique=True),
        sa.Column("user_id", sa.String, sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("org_id", sa.String, sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String, nullable=True),
        sa.Column("created_at", sa.String, nullable=False),
        sa.Column("expires_at", sa.String, nullable=True),
    )
    op.create_table(
        "servers",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("org_id", sa.String, sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("kind", sa.String, nullable=False),
        sa.Column("address", sa.String, nullable=True),
        sa.Column("agent_token_hash", sa.String, nullable=True, unique=True),
        sa.Column("agent_version", sa.String, nullable=True),
        sa.Column("agent_connected_at", sa.String, nullable=True),
        sa.Column("agent_last_seen_at", sa.String, nullable=True),
        sa.Column("created_at", sa.String, nullable=False),
        sa.UniqueConstraint("org_id", "name"),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.String, nullable=False),
        sa.Column("org_id", sa.String, nullable=True),
        sa.Column("user_id", sa.String, nullable=True),
        sa.Column("actor_email", sa.String, nullable=True),
        sa.Column("server_id", sa.String, nullable=True),
        sa.Column("action", sa.String, nullable=False),
        sa.Column("target", sa.String, nullable=True),
        sa.Column("details", sa.String, nullable=False),
        sa.Column("outcome", sa.String, nullable=False),
        sa.Column("error_code", sa.String, nullable=True),
    )
    op.create_index("ix_audit_org_at", "audit_log", ["org_id", "id"])


def downgrade() -> None:
    for table in ("audit_log", "servers", "tokens", "memberships", "users", "orgs"):
        op.drop_table(table)
