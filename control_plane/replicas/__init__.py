"""Replicas: several control-plane processes on one database, talking over the bus (NATS).

Each replica has an id and a heartbeat row (`replicas`). A server's row says which replica
holds its agent's link and which link that is (`agent_replica_id`, `agent_link_id`), so any
replica knows where to send a call (`calls`), and whether the agent is online at all: linked to
a replica whose heartbeat is fresh. A replica whose heartbeat went stale is dead with its links;
the first replica to notice releases them and says so on the presence feed. A late "offline"
from an old link never hides a newer one: it releases the row only if the row still names it.

Presence events are numbered by the database (`presence_events`), so every replica's feed has
the same ids and a client resumes on any of them; the bus only says there is more to read.
A job runs on the replica holding its agent's link (one created elsewhere is handed over the bus,
its secrets with it, never stored); its streams on the others read the database, woken by the
bus as lines are stored; a link that moves takes its running jobs along (`JobRunner`). A server
deleted on one replica has its link cut on the one that holds it. The agents' pulses go to every
replica over the bus (`PULSES_SUBJECT`), so that each keeps every agent's ring; a replica that
starts, or whose bus comes back, asks the others for theirs.

Outages: every loop here rides out one of the database (`Database.run_retrying`, or a turn
skipped) and of the bus (nats-py reconnects). Each replica says on the bus every second that it is
there (`BEACON_SUBJECT`), so a replica knows which others it can reach now: a call for an agent
linked to one it cannot reach (its own bus away, the other's, or the other not yet subscribed
again after NATS came back) fails at once with `BusAway`, rather than being published into the
void and waiting for its timeout. A job handed to another replica is handed again until it
starts, so a message the bus lost leaves no job queued for good. A replica that could not reach the database
takes nobody for dead until it has beaten for `STALE_AFTER_S` again: after an outage every
heartbeat is stale, and the others need that long to beat once more.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from typing import Any

import anyio
import orjson
from anyio.abc import TaskStatus

from control_plane.auth.secrets import new_id
from control_plane.bus import Bus, BusAway, Inbox
from control_plane.hub import AgentHub
from control_plane.jobs import store as jobs_store
from control_plane.jobs.runner import JobRunner
from control_plane.replicas import store
from control_plane.replicas.calls import RelayedCalls, RemoteLink, message, subject
from control_plane.servers.presence import PresenceFeed
from control_plane.servers.pulses import PulseRings
from control_plane.storage import Database
from control_plane.storage.outage import is_outage

log = logging.getLogger("fleetdeck.replicas")

HEARTBEAT_S = 1.0
# A replica silent this long is dead, and so are its agents' links.
STALE_AFTER_S = 5.0
PRESENCE_SUBJECT = "fleetdeck.presence"
# A job's stored lines or status changed: its streams on other replicas read the database again.
JOBS_SUBJECT = "fleetdeck.jobs"
# A server was deleted: whichever replica holds its agent's link cuts it.
DELETED_SUBJECT = "fleetdeck.servers.deleted"
# Every replica says it is on the bus this often; one not heard from for UNHEARD_AFTER_S cannot be
# reached over it (calls for its agents fail at once). A replica that starts, or whose bus comes
# back, asks the others to say so at once; it waits up to HEAR_AT_START_S for the live ones.
BEACON_SUBJECT = "fleetdeck.replicas.beacon"
BEACON_S = 1.0
UNHEARD_AFTER_S = 5.0
HEAR_AT_START_S = 2.0
# The pulses of the agents linked here, and their links gone, gathered for this long into one
# message (a pulse comes every few seconds per agent: thousands of agents, a few messages a second);
# a message asking for every replica's rings, and their answers.
PULSES_SUBJECT = "fleetdeck.pulses"
PULSES_GATHER_S = 0.25
# An agent pulsing faster than this many per message (it chooses its interval: 5 s by default)
# has the rest kept here only: an agent's word costs the bus and every replica a bounded amount.
PULSES_PER_SERVER_GATHERED = 4
# A job handed to another replica is handed again this often until its row says it started.
DISPATCH_AGAIN_S = 2.0
NOT_STARTED_NOTE = "fleetdeck: its agent went away before the job started"


class Replicas:
    """This replica: its identity, its heartbeat, and its way to the others."""

    def __init__(
        self, db: Database, bus: Bus, hub: AgentHub, presence: PresenceFeed, pulses: PulseRings, runner: JobRunner
    ) -> None:
        self.id = new_id("rpl")
        self._db = db
        self.bus = bus
        self._hub = hub
        self._presence = presence
        self._pulses = pulses
        self._runner = runner
        self.calls = RelayedCalls(self.id, bus, hub, self._start_job)
        self._link_ids = itertools.count(1)
        self.live: set[str] = {self.id}
        self._presence_lock = anyio.Lock()
        self._beating_since: float | None = None  # time.monotonic() since its beats succeed
        self._group: anyio.abc.TaskGroup | None = None
        self._heard: dict[str, float] = {}  # replica id -> time.monotonic() of its last beacon
        self._heard_more = anyio.Event()
        hub.elsewhere = self.path_to
        runner.linked_elsewhere = self.is_linked_elsewhere
        runner.on_stored = lambda job_id: self.bus.publish(JOBS_SUBJECT, job_id.encode())
        self._pulses_out: list[dict[str, Any]] = []  # gathered for the next message, in their order
        self._pulses_out_of: Counter[str] = Counter()  # server id -> its pulses among them
        self._pulses_waiting = anyio.Event()
        pulses.share = self._share_pulse
        pulses.share_drop = self._share_drop

    # --- where agents are ------------------------------------------------------------------

    async def path_to(self, server_id: str) -> RemoteLink | None:
        """The way to a server's agent linked to another live replica (None: it is not).
        Raises `BusAway` when there is one but the bus to it is down."""
        holders = await self._db.run(store.link_holders, [server_id])
        holder = holders.get(server_id)
        if holder is None or holder == self.id or holder not in self.live:
            return None
        if not self.reachable(holder):
            raise BusAway(f"server {server_id}: its agent is linked to a replica the bus cannot reach now")
        return RemoteLink(self.calls, holder, server_id)

    def reachable(self, replica_id: str) -> bool:
        """Whether a call published for `replica_id` reaches it: the bus is here, and it said on
        it lately that it is there (and so subscribed: its subscriptions come before its beacon)."""
        heard = self._heard.get(replica_id)
        return self.bus.connected and heard is not None and time.monotonic() - heard < UNHEARD_AFTER_S

    async def is_linked_elsewhere(self, server_id: str) -> bool:
        return bool(await self.linked_elsewhere([server_id]))

    async def linked_elsewhere(self, server_ids: list[str]) -> set[str]:
        """Those of `server_ids` whose agents are linked to another live replica."""
        holders = await self._db.run(store.link_holders, server_ids)
        return {sid for sid, holder in holders.items() if holder != self.id and holder in self.live}

    async def peer_elsewhere(self, server_id: str) -> str | None:
        """The address a server's agent link comes from, as the other live replica holding it sees it."""
        peer: str | None = await self._db.run(store.link_peer, server_id, self.live - {self.id})
        return peer

    async def count_linked_elsewhere(self) -> int:
        """How many agents are linked to the other live replicas."""
        count: int = await self._db.run(store.count_linked, self.live - {self.id})
        return count

    def disconnect_everywhere(self, server_id: str) -> None:
        """The server was deleted: its agent's link is cut on whichever replica holds it."""
        self.bus.publish(DELETED_SUBJECT, server_id.encode())

    # --- jobs ------------------------------------------------------------------------------

    def dispatch(self, job: dict[str, Any], secrets: dict[str, str], *, read: bool) -> None:
        """Have the job run by the replica holding its agent's link, handed over the bus (its
        secrets along: they are never stored, and only the runner needs them), and handed again
        until its row says it started: a message the bus lost (away, or the holder restarting)
        must not leave it queued. The handing runs in the replica's task group."""
        if self._group is None:
            raise RuntimeError("jobs are handed over only while the replica runs")
        self._group.start_soon(self._dispatch, job, secrets, read, name=f"dispatch {job['id']}")

    async def _dispatch(self, job: dict[str, Any], secrets: dict[str, str], read: bool) -> None:
        header = {"t": "job", "job_id": job["id"], "org_id": job["org_id"], "secrets": secrets, "read": read}
        unlinked_since: float | None = None
        while True:
            holders = await self._db.run_retrying(store.link_holders, [job["server_id"]])
            holder = holders.get(job["server_id"])
            if holder == self.id:
                self._runner.start(job, secrets=secrets, read=read)  # the link moved here
                return
            if holder is not None and holder in self.live:
                unlinked_since = None
                if self.reachable(holder):
                    self.bus.publish(subject(holder), message(header))
            elif unlinked_since is None:
                unlinked_since = time.monotonic()
            elif time.monotonic() - unlinked_since > self._runner.grace_s:
                # As a job whose agent left between its creation and its start (`JobRunner`).
                await self._db.run_retrying(jobs_store.end_queued, job["id"], "interrupted", NOT_STARTED_NOTE)
                self._runner.stored(job["id"])
                self.bus.publish(JOBS_SUBJECT, job["id"].encode())
                return
            await anyio.sleep(DISPATCH_AGAIN_S)
            row = await self._db.run_retrying(jobs_store.get_job, job["org_id"], job["id"])
            if row is None or row["status"] != "queued":
                return

    async def _start_job(self, request: dict[str, Any]) -> None:
        try:
            job = await self._db.run(jobs_store.get_job, str(request["org_id"]), str(request["job_id"]))
        except Exception as exc:
            if not is_outage(exc):
                raise
            return  # its dispatcher hands it again (`dispatch`)
        secrets = request.get("secrets")
        if job is None or job["status"] != "queued" or not isinstance(secrets, dict):
            return
        self._runner.start(job, secrets={str(k): str(v) for k, v in secrets.items()}, read=request.get("read") is True)

    # --- presence --------------------------------------------------------------------------

    async def claim(self, server_id: str, peer: str | None) -> str:
        """A link here from `peer`: the server's row names this replica and a new link id, returned."""
        link_id = f"{self.id}.{next(self._link_ids)}"
        await self._db.run(store.claim_link, server_id, self.id, link_id, peer)
        return link_id

    async def release(self, server_id: str, link_id: str) -> bool:
        """The link ended: False when a newer link (on any replica) holds the row already."""
        released: bool = await self._db.run(store.release_link, server_id, link_id)
        return released

    async def publish_presence(self, org_id: str, payload: dict[str, Any]) -> None:
        """A presence change made here, for every replica's feed (this one's included): stored,
        so that its id is the same on every replica, and announced on the bus."""
        await self._db.run(store.add_presence_event, org_id, payload)
        await self._load_presence()
        self.bus.publish(PRESENCE_SUBJECT, b"{}")

    async def _load_presence(self) -> None:
        """Into this replica's feed: the stored events it does not hold yet, in their order. An
        agent said offline has its pulses go (its replica may have died without saying so)."""
        async with self._presence_lock:
            for seq, org_id, payload in await self._db.run(store.presence_events_after, self._presence.last_seq):
                self._presence.publish(org_id, payload, seq)
                if payload.get("online") is False:
                    self._pulses.gone(str(payload["server_id"]))

    # --- pulses ----------------------------------------------------------------------------

    def _share_pulse(self, server_id: str, org_id: str, sample: dict[str, Any]) -> None:
        if self._pulses_out_of[server_id] >= PULSES_PER_SERVER_GATHERED:
            return
        self._pulses_out_of[server_id] += 1
        self._pulses_out.append({"server_id": server_id, "org_id": org_id, "sample": sample})
        self._pulses_waiting.set()

    def _share_drop(self, server_id: str) -> None:
        # After its last pulses in the same message stream: no replica gets one of them after it.
        self._pulses_out.append({"server_id": server_id, "dropped": True})
        self._pulses_waiting.set()

    def _send_pulses_now(self) -> None:
        if self._pulses_out:
            self.bus.publish(PULSES_SUBJECT, orjson.dumps({"from": self.id, "pulses": self._pulses_out}))
            self._pulses_out = []
            self._pulses_out_of.clear()

    async def _send_pulses(self) -> None:
        while True:
            await self._pulses_waiting.wait()
            await anyio.sleep(PULSES_GATHER_S)  # the others that come meanwhile go along
            self._pulses_waiting = anyio.Event()
            self._send_pulses_now()

    def _ask_for_rings(self) -> None:
        self.bus.publish(PULSES_SUBJECT, orjson.dumps({"from": self.id, "ask": True}))

    def _send_rings(self) -> None:
        """Every ring of the agents linked here, after the pulses gathered so far (they are in it)."""
        self._send_pulses_now()
        rings = [{"server_id": s, "org_id": o, "samples": samples} for s, o, samples in self._pulses.held_here()]
        self.bus.publish(PULSES_SUBJECT, orjson.dumps({"from": self.id, "rings": rings}))

    async def _follow_pulses(self, inbox: Inbox[bytes]) -> None:
        while True:
            for data in await inbox.take():
                try:
                    self._on_pulses(orjson.loads(data))
                except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
                    log.warning("a bad pulses message on the bus")

    def _on_pulses(self, message: dict[str, Any]) -> None:
        sender = str(message["from"])
        if sender == self.id:
            return
        if message.get("ask") is True:
            self._send_rings()
        for ring in message.get("rings", []):
            self._pulses.replaced(sender, str(ring["server_id"]), str(ring["org_id"]), list(ring["samples"]))
        for pulse in message.get("pulses", []):
            if pulse.get("dropped") is True:
                self._pulses.dropped_elsewhere(sender, str(pulse["server_id"]))
            else:
                self._pulses.received(sender, str(pulse["server_id"]), str(pulse["org_id"]), [dict(pulse["sample"])])

    # --- running ---------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect, beat, serve the bus until cancelled; leave the database when stopping."""
        await self.bus.connect()
        try:
            await self._db.run(store.beat, self.id)
            self._beating_since = time.monotonic()
            # The feed starts with the newest events already stored: a client resuming here
            # with an id another replica gave it gets what followed.
            last = await self._db.run(store.last_presence_event)
            self._presence.start_after(max(0, last - self._presence.capacity))
            await self._load_presence()
            calls = await self.bus.subscribe(subject(self.id))
            presence = await self.bus.subscribe(PRESENCE_SUBJECT)
            stored = await self.bus.subscribe(JOBS_SUBJECT)
            deleted = await self.bus.subscribe(DELETED_SUBJECT)
            beacons = await self.bus.subscribe(BEACON_SUBJECT)
            pulses = await self.bus.subscribe(PULSES_SUBJECT)
            async with anyio.create_task_group() as group:
                self.calls.task_group = self._group = group
                group.start_soon(self._beat)
                group.start_soon(self._keep_house)
                group.start_soon(self._serve_calls, calls)
                group.start_soon(self._follow_presence, presence)
                group.start_soon(self._follow_jobs, stored)
                group.start_soon(self._follow_deletes, deleted)
                assert self.bus.changes is not None
                group.start_soon(self._follow_bus, self.bus.changes)
                group.start_soon(self._follow_beacons, beacons)
                group.start_soon(self._send_beacons)
                group.start_soon(self._follow_pulses, pulses)
                group.start_soon(self._send_pulses)
                self._ask_for_rings()
                await self._hear_the_others()
                log.info("replica %s on the bus at %s", self.id, self.bus.url)
                task_status.started()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                try:
                    await self._db.run(store.leave, self.id)
                except Exception as exc:
                    if not is_outage(exc):
                        raise
                    log.warning("replica %s: the database is away: the others see it dead by its heartbeat", self.id)
                await self.bus.close()

    async def _serve_calls(self, inbox: Inbox[bytes]) -> None:
        while True:
            for data in await inbox.take():
                await self.calls.on_message(data)

    async def _follow_presence(self, inbox: Inbox[bytes]) -> None:
        while True:
            await inbox.take()  # one load for however many wake-ups came meanwhile
            try:
                await self._load_presence()
            except Exception as exc:
                if not is_outage(exc):
                    raise  # during an outage, housekeeping loads them once the database is back

    async def _follow_jobs(self, inbox: Inbox[bytes]) -> None:
        while True:
            for job_id in set(await inbox.take()):
                self._runner.stored(job_id.decode())

    async def _follow_deletes(self, inbox: Inbox[bytes]) -> None:
        while True:
            for server_id in await inbox.take():
                self._hub.disconnect(server_id.decode())

    async def _follow_bus(self, changes: Inbox[bool]) -> None:
        """The bus went away: the calls waiting on other replicas fail now, not at their timeout,
        and no other replica counts as reachable until it is heard from again. It came back: the
        others are asked to say at once that they are there."""
        while True:
            if (await changes.take())[-1]:
                self._beacon(ask=True)
                self._ask_for_rings()  # pulses were lost meanwhile
            else:
                self._heard.clear()
                self.calls.bus_lost()

    def _beacon(self, *, ask: bool = False) -> None:
        self.bus.publish(BEACON_SUBJECT, orjson.dumps({"from": self.id, "ask": ask}))

    async def _send_beacons(self) -> None:
        """Say so every second; and fail the calls relayed to (or for) replicas gone unheard:
        their own bus is away, so nothing they send or are sent arrives."""
        self._beacon(ask=True)
        while True:
            await anyio.sleep(BEACON_S)
            if self.bus.connected:
                self._beacon()
                self.calls.replicas_gone({self.id} | {replica for replica in self._heard if self.reachable(replica)})

    async def _follow_beacons(self, inbox: Inbox[bytes]) -> None:
        while True:
            for data in await inbox.take():
                try:
                    beacon = orjson.loads(data)
                    sender, ask = str(beacon["from"]), beacon.get("ask") is True
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    log.warning("a bad beacon on the bus")
                    continue
                if sender == self.id:
                    continue
                self._heard[sender] = time.monotonic()
                if ask:
                    self._beacon()
            self._heard_more.set()
            self._heard_more = anyio.Event()

    async def _hear_the_others(self) -> None:
        """At start, until every live replica (by its heartbeat) said it is there, for a while at most."""
        self.live = await self._db.run(store.live_replicas, STALE_AFTER_S) | {self.id}
        with anyio.move_on_after(HEAR_AT_START_S):
            while not all(self.reachable(replica) for replica in self.live - {self.id}):
                await self._heard_more.wait()

    async def _beat(self) -> None:
        """The heartbeat alone, so that slow housekeeping (below) never makes it late, on a
        database thread of its own (`Database.run_first`) for the same reason. A replica late
        all the same (stopped, starved of CPU or database) is taken for dead by the others, who
        release its links: once it beats again, it says again that it holds them."""
        while True:
            try:
                beaten = await self._db.run_first(store.beat, self.id)
            except Exception as exc:
                if not is_outage(exc):
                    raise
                self._beating_since = None
            else:
                if self._beating_since is None:
                    self._beating_since = time.monotonic()
                if not beaten:
                    log.warning("replica %s: taken for dead while it ran; claiming its links again", self.id)
                    await self._hub.report_all_again()
            await anyio.sleep(HEARTBEAT_S)

    def _steady(self) -> bool:
        """Whether this replica's beats have succeeded for long enough to judge the others'."""
        return self._beating_since is not None and time.monotonic() - self._beating_since >= STALE_AFTER_S

    async def _keep_house(self) -> None:
        while True:
            try:
                await self._house_turn()
            except Exception as exc:
                if not is_outage(exc):
                    raise  # an outage: the next turn does it all again
            await anyio.sleep(HEARTBEAT_S)

    async def _house_turn(self) -> None:
        await self._db.run(store.prune_presence_events, self._presence.capacity)
        await self._load_presence()  # also what a lost wake-up did not bring
        live = await self._db.run(store.live_replicas, STALE_AFTER_S) | {self.id}
        if not self._steady():
            # Just back from an outage: the others' heartbeats are stale because the database
            # was away, not because they are. Nobody is taken for dead (or their calls failed).
            self.live |= live
            return
        self.live = live
        self.calls.replicas_gone(self.live)
        released = await self._db.run(store.reap_dead_links, STALE_AFTER_S)
        if released:
            log.info("%d servers: their links' replica is gone, so are their links", released)
            await self._load_presence()
            self.bus.publish(PRESENCE_SUBJECT, b"{}")
