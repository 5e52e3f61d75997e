"""Jobs, their captured output (in chunks of lines), and the cache of read results for offline agents.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String, primary_key=True),
        sa.Column("org_id", sa.String, sa.ForeignKey("orgs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("server_id", sa.String, sa.ForeignKey("servers.id", ondelete="CASCADE"), nullable=False),
        sa.Column("kind", sa.String, nullable=False),
        sa.Column("args", sa.String, nullable=False),
        sa.Column("argv", sa.String, nullable=False),
        sa.Column("status", sa.String, nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("result", sa.String, nullable=True),
        sa.Column("cached", sa.Boolean, nullable=False),
        sa.Column("cached_at", sa.String, nullable=True),
        sa.Column("created_by", sa.String, nullable=True),
        sa.Column("idempotency_key", sa.String, nullable=True),
        sa.Column("agent_boot_id", sa.String, nullable=True),
        sa.Column("created_at", sa.String, nullable=False),
        sa.Column("started_at", sa.String, nullable=True),
        sa.Column("finished_at", sa.String, nullable=True),
        sa.UniqueConstraint("server_id", "created_by", "idempotency_key"),
    )
    op.create_index("ix_jobs_server_created", "jobs", ["server_id", "created_at"])
    op.create_table(
        "job_output",
        sa.Column("job_id", sa.String, sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("first_seq", sa.Integer, primary_key=True),
        sa.Column("last_seq", sa.Integer, nullable=False),
        sa.Column("lines", sa.LargeBinary, nullable=False),
    )
    op.create_table(
        "read_cache",
        sa.Column("server_id", sa.String, sa.ForeignKey("servers.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("kind", sa.String, primary_key=True),
        sa.Column("args_key", sa.String, primary_key=True),
        sa.Column("job_id", sa.String, nullable=False),
        sa.Column("result", sa.String, nullable=True),
        sa.Column("at", sa.String, nullable=False),
    )


def downgrade() -> None:
    for table in ("read_cache", "job_output", "jobs"):
        op.drop_table(table)
