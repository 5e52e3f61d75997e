"""A server's address is an IP address or a host name (`contract.models.ServerAddress`); it
was free text. Addresses written before are normalised the same way (a host name lowercased,
an IP address in its short form); one that is neither (`-oProxyCommand=...`) is removed: the
server then has no address, which every use of it handles already (a load balancer refuses it as
a backend, a cross-server copy reaches it at its agent's `--ssh-host` or says it has none).

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

from contract.models import server_address

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def _normalised(address: str) -> str | None:
    try:
        return server_address(address.strip().lower())
    except ValueError:
        return None


def upgrade() -> None:
    servers = sa.table("servers", sa.column("id", sa.String), sa.column("address", sa.String))
    bind = op.get_bind()
    rows = bind.execute(sa.select(servers.c.id, servers.c.address).where(servers.c.address.is_not(None))).all()
    for server_id, address in rows:
        normalised = _normalised(address)
        if normalised != address:
            bind.execute(servers.update().where(servers.c.id == server_id).values(address=normalised))


def downgrade() -> None:
    pass  # the addresses removed were not addresses
