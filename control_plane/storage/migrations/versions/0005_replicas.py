"""Replicas of the control plane on one database: each one's heartbeat, which of them holds
each agent's link, and the presence events they share (numbered by the database).

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "replicas",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("started_at", sa.String, nullable=False),
        # Seconds since the epoch: compared with arithmetic, to tell a dead replica.
        sa.Column("heartbeat_at", sa.Float, nullable=False),
    )
    op.create_table(
        "presence_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("org_id", sa.String, nullable=False),
        sa.Column("payload", sa.String, nullable=False),
    )
    with op.batch_alter_table("servers") as batch:
        batch.add_column(sa.Column("agent_replica_id", sa.String, nullable=True))
        batch.add_column(sa.Column("agent_link_id", sa.String, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("servers") as batch:
        batch.drop_column("agent_link_id")
        batch.drop_column("agent_replica_id")
    op.drop_table("presence_events")
    op.drop_table("replicas")
