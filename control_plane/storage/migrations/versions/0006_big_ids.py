"""64-bit ids and sequence numbers on PostgreSQL: audit entries, job output lines and presence
events (`schema.BIG_ID`). SQLite's INTEGER is 64-bit already, and its rowid keys stay as they are.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# (table, column, numbered by a sequence of its own)
COLUMNS = [
    ("audit_log", "id", True),
    ("presence_events", "id", True),
    ("job_output", "first_seq", False),
    ("job_output", "last_seq", False),
]


def _alter(to: type[sa.Integer]) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    name = "bigint" if to is sa.BigInteger else "integer"
    for table, column, numbered in COLUMNS:
        op.alter_column(table, column, type_=to(), existing_nullable=False)
        if numbered:
            # A serial's sequence has a type of its own: an integer one stops at 2**31 - 1.
            sequence = bind.execute(sa.text(f"SELECT pg_get_serial_sequence('{table}', '{column}')")).scalar_one()
            op.execute(f"ALTER SEQUENCE {sequence} AS {name}")


def upgrade() -> None:
    _alter(sa.BigInteger)


def downgrade() -> None:
    _alter(sa.Integer)
