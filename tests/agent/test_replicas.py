"""An agent given several control-plane URLs (the replicas of one cluster): it links to one, goes
round the list when a dial fails or its link is lost, and backs off once per failed sweep.

First against hubs served in this process (real sockets, hypercorn's trio worker), then with two
`fleetdeck serve` processes on one SQLite database and a `fleetdeck agent` process."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import trio

from agent.link.call import Call
from agent.link.client import AgentLink, Backoff, link_url
from control_plane.hub import AgentHub
from fleetdeck.launcher import free_port, start_agent
from tests.helpers import wait_until
from tests.helpers.control_planes import OwnControlPlane
from tests.helpers.link import FAST, NEVER, SERVER_ID, TOKEN, ControlPlane, make_control_plane, serving


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def _echo(call: Call) -> dict[str, object]:
    return {"params": call.params}


@dataclass
class Replica:
    """A hub served on its own port until `stop`, and again on the same port by a later `serve`."""

    cp: ControlPlane = field(default_factory=make_control_plane)
    port: int = 0
    _stop: trio.Event = field(default_factory=trio.Event)
    _stopped: trio.Event = field(default_factory=trio.Event)

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        self._stop, self._stopped = trio.Event(), trio.Event()
        try:
            async with serving(self.cp.hub, self.port) as url:
                self.port = int(url.rsplit(":", 1)[1])
                task_status.started(url)
                await self._stop.wait()
        finally:
            self._stopped.set()

    async def stop(self) -> None:
        self._stop.set()
        await self._stopped.wait()


def _closed_port_url(scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{free_port()}"  # nothing listens there: the dial is refused at once


def _refusing_hub() -> AgentHub:
    """A replica that knows no token: one pointed at another database."""

    async def authenticate(token: str) -> str | None:
        return None

    return AgentHub(authenticate=authenticate)


@pytest.mark.anyio
async def test_the_link_moves_to_the_next_replica_when_its_own_goes_away() -> None:
    first, second = Replica(), Replica()
    async with trio.open_nursery() as nursery:
        urls = [await nursery.start(first.serve), await nursery.start(second.serve)]
        link = AgentLink(urls, TOKEN, {"echo": _echo}, version="1", backoff=FAST, auth_backoff=NEVER)
        nursery.start_soon(link.run)
        await first.cp.wait_presence(online=True)
        assert await first.cp.hub.call(SERVER_ID, "echo", {"on": 1}) == {"params": {"on": 1}}
        assert second.cp.presence == []  # it links to the first URL, and to that one only

        await first.stop()
        await first.cp.wait_presence(online=False)
        await second.cp.wait_presence(online=True)
        assert await second.cp.hub.call(SERVER_ID, "echo", {"on": 2}) == {"params": {"on": 2}}

        await nursery.start(first.serve)  # back, on the same port: the agent stays where it is...
        await second.stop()  # ...until its replica goes away
        await first.cp.wait_presence(online=True)
        assert await first.cp.hub.call(SERVER_ID, "echo", {"on": 1}) == {"params": {"on": 1}}
        nursery.cancel_scope.cancel()


@pytest.mark.anyio
@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_dead_url_first_does_not_delay_the_live_one(scheme: str, caplog: pytest.LogCaptureFixture) -> None:
    """Also when the dead one is https and the live one is not: TLS is a matter of each URL."""
    caplog.set_level(logging.INFO, logger="fleetdeck.agent")
    live = Replica()
    async with trio.open_nursery() as nursery:
        live_url = await nursery.start(live.serve)
        urls = [_closed_port_url(scheme), live_url]  # picked once live holds its port: never the same one
        # Any backoff would be a wait of up to 1000 s (and a "reconnecting" line): none may come.
        link = AgentLink(urls, TOKEN, {}, version="1", backoff=NEVER, auth_backoff=NEVER)
        nursery.start_soon(link.run)
        await live.cp.wait_presence(online=True)
        assert f"cannot connect to {link_url(urls[0])}" in caplog.text and "reconnecting" not in caplog.text
        nursery.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_replica_that_refuses_the_token_does_not_keep_the_agent_off_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="fleetdeck.agent")
    live = Replica()
    async with trio.open_nursery() as nursery:
        refusing = Replica(ControlPlane(_refusing_hub(), []))
        urls = [await nursery.start(refusing.serve), await nursery.start(live.serve)]
        link = AgentLink(urls, TOKEN, {}, version="1", backoff=NEVER, auth_backoff=NEVER)
        nursery.start_soon(link.run)
        await live.cp.wait_presence(online=True)
        assert "refused the agent token" in caplog.text and "retrying in" not in caplog.text
        nursery.cancel_scope.cancel()


class _Sweeps(logging.Handler):
    """The URL of each failed dial and a "wait" for each backoff, in order; cancels `scope` as
    the link starts its `waits`-th backoff (the log line comes right before the sleep)."""

    def __init__(self, link: AgentLink, scope: trio.CancelScope, waits: int) -> None:
        super().__init__()
        self.link, self.scope, self.waits = link, scope, waits
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("reconnecting") or "retrying in" in message:
            self.seen.append("wait")
            if self.seen.count("wait") == self.waits:
                self.scope.cancel()
        elif message.startswith("cannot connect") or "refused the agent token" in message:
            self.seen.append(self.link.url)


async def _sweeps(
    urls: list[str], backoff: Backoff, auth_backoff: Backoff, caplog: pytest.LogCaptureFixture
) -> list[str]:
    """What a link to `urls` did until its third backoff."""
    caplog.set_level(logging.INFO, logger="fleetdeck.agent")
    logger = logging.getLogger("fleetdeck.agent")
    link = AgentLink(urls, TOKEN, {}, version="1", backoff=backoff, auth_backoff=auth_backoff)
    with trio.fail_after(10), trio.CancelScope() as scope:
        sweeps = _Sweeps(link, scope, waits=3)
        logger.addHandler(sweeps)
        try:
            await link.run()
        finally:
            logger.removeHandler(sweeps)
    return sweeps.seen


@pytest.mark.anyio
async def test_one_backoff_step_is_one_failed_sweep_of_every_url(caplog: pytest.LogCaptureFixture) -> None:
    urls = [_closed_port_url() for _ in range(3)]
    seen = await _sweeps(urls, FAST, NEVER, caplog)
    sweep = [link_url(url) for url in urls] + ["wait"]
    assert seen == sweep * 3


@pytest.mark.anyio
async def test_a_sweep_where_the_token_was_refused_waits_the_auth_backoff(caplog: pytest.LogCaptureFixture) -> None:
    refusing = Replica(ControlPlane(_refusing_hub(), []))
    async with trio.open_nursery() as nursery:
        urls = [_closed_port_url(), await nursery.start(refusing.serve)]
        # The network backoff would wait up to 1000 s: only the auth backoff (fast here) goes on.
        seen = await _sweeps(urls, NEVER, FAST, caplog)
        nursery.cancel_scope.cancel()
    sweep = [link_url(url) for url in urls] + ["wait"]
    assert seen == sweep * 3


# --- `fleetdeck agent` and two `fleetdeck serve` replicas on one database -----------------------


@dataclass
class Cluster:
    """Two replicas on one SQLite database, with a server whose agent token is `agent_token`."""

    replicas: tuple[OwnControlPlane, OwnControlPlane]
    server_id: str
    agent_token: str
    user_token: str

    def link_seen_by(self, replica: OwnControlPlane) -> datetime | None:
        """When the agent's link that `replica` sees as online began (None: offline there, or the
        replica is down); through its API, with a file listing it must answer through the link."""
        headers = {"Authorization": f"Bearer {self.user_token}"}
        try:
            with httpx.Client(base_url=replica.base_url, headers=headers, timeout=10) as http:
                agent = http.get(f"/v1/servers/{self.server_id}").json()["agent"]
                if not agent["online"]:
                    return None
                listed = http.get(f"/v1/servers/{self.server_id}/fs/list", params={"scope": "root"})
        except httpx.TransportError:
            return None
        assert listed.status_code == 200, listed.text
        return datetime.fromisoformat(agent["connected_at"])


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    first = OwnControlPlane(tmp_path, name="first")
    second = OwnControlPlane(tmp_path, db_url=first.db_url, name="second")
    try:
        first.start()
        second.start()
        first.admin("create-org", "replicas", "--plan", "max")
        first.admin("create-user", "o@example.com", "--org", "replicas", "--role", "owner", "--password", "pw-replicas")
        created = first.admin("create-server", "web", "--org", "replicas")
        login = {"email": "o@example.com", "password": "pw-replicas"}
        user_token = httpx.post(f"{second.base_url}/v1/auth/login", json=login).json()["token"]
        yield Cluster((first, second), str(created["id"]), str(created["agent_token"]), user_token)
    finally:
        for replica in (first, second):
            if replica.process is not None and replica.process.poll() is None:
                replica.kill()


def _start_agent(tmp_path: Path, token: str, urls: list[str]) -> subprocess.Popen[str]:
    home, state = tmp_path / "home", tmp_path / "state"
    home.mkdir(exist_ok=True)
    state.mkdir(exist_ok=True)
    more = [option for url in urls[1:] for option in ("--url", url)]
    with open(tmp_path / "agent.log", "a") as log:  # the child has its own copy of the file
        return start_agent(urls[0], token, home, state, *more, stderr=log)


def _relinked(cluster: Cluster, replica: OwnControlPlane, since: datetime) -> datetime:
    """Wait until `replica` serves a link of the agent made after `since`; when it began."""
    wait_until(lambda: (at := cluster.link_seen_by(replica)) is not None and at > since, timeout=20)
    linked = cluster.link_seen_by(replica)
    assert linked is not None
    return linked


def test_an_agent_moves_between_replicas_as_they_go_away(cluster: Cluster, tmp_path: Path) -> None:
    first, second = cluster.replicas
    agent = _start_agent(tmp_path, cluster.agent_token, [first.base_url, second.base_url])
    try:
        on_first = _relinked(cluster, first, datetime.min.replace(tzinfo=UTC))
        assert cluster.link_seen_by(second) is None  # linked to the first URL, not to both

        first.kill()
        on_second = _relinked(cluster, second, on_first)

        first.start()  # back on its port: the agent stays on the second...
        assert cluster.link_seen_by(first) is None
        second.kill()  # ...until that one goes away too
        _relinked(cluster, first, on_second)
        assert agent.poll() is None
    finally:
        agent.kill()
        agent.wait()


def test_an_unreachable_url_first_does_not_stop_the_agent_linking_to_the_next(cluster: Cluster, tmp_path: Path) -> None:
    second = cluster.replicas[1]
    agent = _start_agent(tmp_path, cluster.agent_token, [_closed_port_url(), second.base_url])
    try:
        _relinked(cluster, second, datetime.min.replace(tzinfo=UTC))
    finally:
        agent.kill()
        agent.wait()
    log = (tmp_path / "agent.log").read_text()
    assert "cannot connect to ws://127.0.0.1" in log and "reconnecting" not in log, log
