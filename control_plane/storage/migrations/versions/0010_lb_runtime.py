"""What a load-balancer node reports beyond health (issue 25, hatop's level): the port a load
balancer really listens on (a port map's), and each backend's state in its engine (status, last
change, check failures, runtime weight, drift from the definition) as JSON. Both are NULL until
the node reports them, and stay NULL from an agent too old to.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("load_balancers", sa.Column("listen_port", sa.Integer, nullable=True))
    op.add_column("lb_backends", sa.Column("runtime", sa.String, nullable=True))


def downgrade() -> None:
    op.drop_column("lb_backends", "runtime")
    op.drop_column("load_balancers", "listen_port")
