"""Replicas' heartbeats, and which replica holds each agent's link."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from control_plane.clock import now_iso
from control_plane.storage.schema import presence_events, replicas, servers

Row = dict[str, Any]


def beat(conn: Connection, replica_id: str) -> bool:
    """This replica is alive now (its row made on the first beat). False when its row had to be
    made: on the first beat, or after the others took it for dead and released its links."""
    now = time.time()
    updated = conn.execute(replicas.update().where(replicas.c.id == replica_id).values(heartbeat_at=now))
    if updated.rowcount == 0:
        conn.execute(replicas.insert().values(id=replica_id, started_at=now_iso(), heartbeat_at=now))
        return False
    return True


def leave(conn: Connection, replica_id: str) -> None:
    """A replica that stops is dead at once, rather than once its heartbeat is stale: the others
    release its links (and say so on their feeds) on their next beat."""
    conn.execute(replicas.update().where(replicas.c.id == replica_id).values(heartbeat_at=0.0))


def live_replicas(conn: Connection, stale_after_s: float) -> set[str]:
    threshold = time.time() - stale_after_s
    return set(conn.execute(sa.select(replicas.c.id).where(replicas.c.heartbeat_at > threshold)).scalars())


def link_holders(conn: Connection, server_ids: Sequence[str] | None = None) -> dict[str, str]:
    """The replica that says it holds each server's link (servers without one are left out)."""
    query = sa.select(servers.c.id, servers.c.agent_replica_id).where(servers.c.agent_replica_id.is_not(None))
    if server_ids is not None:
        query = query.where(servers.c.id.in_(list(server_ids)))
    return {row.id: row.agent_replica_id for row in conn.execute(query)}


def count_linked(conn: Connection, replica_ids: set[str]) -> int:
    """How many servers have their agent's link on one of `replica_ids`."""
    if not replica_ids:
        return 0
    query = sa.select(sa.func.count()).select_from(servers).where(servers.c.agent_replica_id.in_(sorted(replica_ids)))
    return int(conn.execute(query).scalar_one())


def claim_link(conn: Connection, server_id: str, replica_id: str, link_id: str, peer: str | None = None) -> None:
    """A new link on `replica_id` from `peer`: the newest link is the one that counts, wherever it is."""
    conn.execute(
        servers.update()
        .where(servers.c.id == server_id)
        .values(agent_replica_id=replica_id, agent_link_id=link_id, agent_peer=peer)
    )


def link_peer(conn: Connection, server_id: str, replica_ids: set[str]) -> str | None:
    """The address the server's agent link comes from, if one of `replica_ids` holds it."""
    query = sa.select(servers.c.agent_peer).where(
        servers.c.id == server_id, servers.c.agent_replica_id.in_(sorted(replica_ids))
    )
    peer: str | None = conn.execute(query).scalar()
    return peer


def release_link(conn: Connection, server_id: str, link_id: str) -> bool:
    """The link `link_id` ended: forget it, unless a newer link (here or on another replica)
    took its place meanwhile. False: the late "offline" of an old link, to be kept quiet."""
    released = conn.execute(
        servers.update()
        .where(servers.c.id == server_id, servers.c.agent_link_id == link_id)
        .values(agent_replica_id=None, agent_link_id=None, agent_peer=None)
    )
    return released.rowcount > 0


def reap_dead_links(conn: Connection, stale_after_s: float) -> int:
    """Forget the replicas whose heartbeat is stale and release their links, each with an
    "offline" presence event, in one transaction: how many servers were released (each by one
    replica only).

    A replica's row is deleted first, and only its links are released: one that beats again
    meanwhile (late, not dead: starved of CPU in a relink storm) either keeps its row, and its
    links, or finds its row gone on that beat and claims its links again (`beat`). Releasing by
    a list of dead replicas read before the delete would release the links of one that beat in
    between, and it would never know."""
    threshold = time.time() - stale_after_s
    # In one order on every reaper: two reaping the same dead replicas never wait on each other in a cycle.
    query = sa.select(replicas.c.id).where(replicas.c.heartbeat_at <= threshold).order_by(replicas.c.id)
    stale = conn.execute(query).scalars().all()
    dead = [
        replica_id
        for replica_id in stale
        if conn.execute(
            replicas.delete().where(replicas.c.id == replica_id, replicas.c.heartbeat_at <= threshold)
        ).rowcount
    ]
    if not dead:
        return 0
    rows = conn.execute(
        sa.select(
            servers.c.id, servers.c.org_id, servers.c.agent_version, servers.c.agent_job_kinds, servers.c.agent_link_id
        ).where(servers.c.agent_replica_id.in_(dead))
    ).all()
    released = 0
    for row in rows:
        done = conn.execute(
            servers.update()
            .where(servers.c.id == row.id, servers.c.agent_link_id == row.agent_link_id)
            .values(agent_replica_id=None, agent_link_id=None, agent_peer=None, agent_last_seen_at=now_iso())
        )
        if done.rowcount:
            kinds = orjson.loads(row.agent_job_kinds) if row.agent_job_kinds is not None else None
            event = {"server_id": row.id, "online": False, "version": row.agent_version, "job_kinds": kinds}
            add_presence_event(conn, row.org_id, {**event, "at": now_iso()})
            released += 1
    return released


# Feeds read "events after id N". PostgreSQL hands ids out before commit, so an event whose lower
# id committed late would be passed over by a feed that had already read a higher one. Writers of
# events queue on one lock held to their commit, so ids commit in the order they are handed out.
# (SQLite writes one transaction at a time already.)
PRESENCE_EVENTS_LOCK = 0x66645F70  # a fixed key of PostgreSQL's advisory locks: "fd_p"


def add_presence_event(conn: Connection, org_id: str, payload: dict[str, Any]) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": PRESENCE_EVENTS_LOCK})
    conn.execute(presence_events.insert().values(org_id=org_id, payload=orjson.dumps(payload).decode()))


def presence_events_after(conn: Connection, after: int) -> list[tuple[int, str, dict[str, Any]]]:
    query = sa.select(presence_events).where(presence_events.c.id > after).order_by(presence_events.c.id)
    return [(row.id, row.org_id, orjson.loads(row.payload)) for row in conn.execute(query)]


def last_presence_event(conn: Connection) -> int:
    return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(presence_events.c.id), 0))).scalar_one())


def prune_presence_events(conn: Connection, keep: int) -> None:
    """Forget all but the newest `keep` events (what a feed holds in memory)."""
    conn.execute(presence_events.delete().where(presence_events.c.id <= last_presence_event(conn) - keep))
