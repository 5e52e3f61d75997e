"""Load balancers and their backends, with the health their node last reported.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "load_balancers",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("org_id", sa.String, sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("port", sa.Integer, nullable=False),
        sa.Column("tls", sa.Boolean, nullable=False),
        sa.Column("hostname", sa.String, nullable=True),
        sa.Column("node_server_id", sa.String, sa.ForeignKey("servers.id", ondelete="CASCADE"), nullable=False),
        sa.Column("engine", sa.String, nullable=False),
        sa.Column("algorithm", sa.String, nullable=False),
        sa.Column("health_check", sa.String, nullable=False),
        sa.Column("state", sa.String, nullable=False),
        sa.Column("state_error", sa.String, nullable=True),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("applied_revision", sa.Integer, nullable=True),
        sa.Column("applied_at", sa.String, nullable=True),
        sa.Column("created_at", sa.String, nullable=False),
        sa.Column("updated_at", sa.String, nullable=False),
        sa.UniqueConstraint("org_id", "name"),
    )
    op.create_table(
        "lb_backends",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("lb_id", sa.String, sa.ForeignKey("load_balancers.id", ondelete="CASCADE"), nullable=False),
        sa.Column("server_id", sa.String, sa.ForeignKey("servers.id", ondelete="CASCADE"), nullable=False),
        sa.Column("port", sa.Integer, nullable=False),
        sa.Column("weight", sa.Integer, nullable=False),
        sa.Column("drained", sa.Boolean, nullable=False),
        sa.Column("health", sa.String, nullable=True),
        sa.Column("last_check_at", sa.String, nullable=True),
        sa.Column("stats", sa.String, nullable=True),
        sa.Column("created_at", sa.String, nullable=False),
    )
    op.create_index("ix_lb_backends_lb", "lb_backends", ["lb_id"])


def downgrade() -> None:
    op.drop_table("lb_backends")
    op.drop_table("load_balancers")
