"""The agent link end to end: the hub served by hypercorn's trio worker, a real agent link, real sockets."""

from __future__ import annotations

import hashlib
import logging
import random
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import httpx
import pytest
import trio
import trio.testing
from hypercorn.config import Config
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute

from agent.link.call import Call, Handler
from agent.link.client import AgentLink, Backoff, LinkAuthRefused, link_url
from contract.link import protocol
from contract.link.protocol import RpcError
from control_plane.hub import (
    AgentCallError,
    AgentHub,
    AgentOfflineError,
    AgentSession,
    AgentTimeoutError,
)
from fleetdeck.launcher import free_port
from tests.conftest import Stack
from tests.helpers import eventually
from tests.helpers.link import (
    FAST,
    NEVER,
    SERVER_ID,
    TOKEN,
    ControlPlane,
    hello_from,
    hypercorn_config,
    listening_socket,
    make_control_plane,
    serving,
    serving_app,
)


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


# --- harness -----------------------------------------------------------------------------


@dataclass
class Agent:
    """Test handlers and what they observed."""

    cancelled: trio.Event = field(default_factory=trio.Event)
    started: trio.Event = field(default_factory=trio.Event)
    sent: int = 0
    blob: bytes = b""

    def handlers(self) -> dict[str, Handler]:
        return {
            "echo": self.echo,
            "fail": self.fail,
            "crash": self.crash,
            "sleep": self.sleep,
            "lines": self.lines,
            "blob": self.send_blob,
            "upload": self.upload,
            "upload_fail": self.upload_fail,
        }

    async def echo(self, call: Call) -> Any:
        return {"params": call.params}

    async def fail(self, call: Call) -> Any:
        raise RpcError("conflict", "the etag is stale", {"etag": "abc"})

    async def crash(self, call: Call) -> Any:
        raise ValueError("a bug with a secret path /etc/shadow")

    async def sleep(self, call: Call) -> Any:
        self.started.set()
        try:
            await trio.sleep_forever()
        finally:
            self.cancelled.set()

    async def lines(self, call: Call) -> Any:
        count = int(call.params["count"])
        batch = 5000
        for start in range(0, count, batch):
            await call.send_items([f"line {i}" for i in range(start, min(count, start + batch))])
        return {"count": count}

    async def send_blob(self, call: Call) -> Any:
        piece = 64 * 1024
        try:
            for offset in range(0, len(self.blob), piece):
                await call.send_bytes(self.blob[offset : offset + piece])
                self.sent = offset + piece
        except trio.Cancelled:
            self.cancelled.set()
            raise
        return {"size": len(self.blob)}

    async def upload_fail(self, call: Call) -> Any:
        await call.receive_bytes()
        raise RpcError("too_large", "disk full")

    async def upload(self, call: Call) -> Any:
        digest, size = hashlib.sha256(), 0
        while (chunk := await call.receive_bytes()) is not None:
            digest.update(chunk)
            size += len(chunk)
        return {"size": size, "sha256": digest.hexdigest()}


@dataclass
class Linked:
    cp: ControlPlane
    agent: Agent
    agent_scope: trio.CancelScope  # cancel it to take the agent away
    url: str


@asynccontextmanager
async def linked(agent: Agent | None = None, *, backoff: Backoff = FAST) -> AsyncIterator[Linked]:
    """A control plane with one agent linked to it."""
    cp = make_control_plane()
    agent = agent or Agent()
    async with serving(cp.hub) as url, trio.open_nursery() as nursery:
        link = AgentLink(url, TOKEN, agent.handlers(), version="9.9", backoff=backoff, auth_backoff=NEVER)
        agent_scope = trio.CancelScope()

        async def run_agent() -> None:
            with agent_scope:
                await link.run()

        nursery.start_soon(run_agent)
        await cp.wait_presence(online=True)
        yield Linked(cp, agent, agent_scope, url)
        nursery.cancel_scope.cancel()


# --- request / response ------------------------------------------------------------------


@pytest.mark.anyio
async def test_request_response_and_session() -> None:
    async with linked() as setup:
        cp = setup.cp
        session = cp.hub.session(SERVER_ID)
        assert session is not None and session.version == "9.9"
        assert "echo" in session.handlers and session.boot_id and session.hostname
        assert cp.hub.is_online(SERVER_ID) and cp.hub.online_count == 1
        assert await cp.hub.call(SERVER_ID, "echo", {"a": [1, "é"]}) == {"params": {"a": [1, "é"]}}
        # Many calls at once share the link.
        results: list[Any] = [None] * 50
        async with anyio.create_task_group() as tg:
            for i in range(50):

                async def one(i: int = i) -> None:
                    results[i] = await cp.hub.call(SERVER_ID, "echo", {"i": i})

                tg.start_soon(one)
        assert results == [{"params": {"i": i}} for i in range(50)]


@pytest.mark.anyio
async def test_error_answers() -> None:
    async with linked() as setup:
        cp = setup.cp
        with pytest.raises(AgentCallError) as info:
            await cp.hub.call(SERVER_ID, "fail", {})
        assert (info.value.code, info.value.details) == ("conflict", {"etag": "abc"})
        with pytest.raises(AgentCallError) as info:
            await cp.hub.call(SERVER_ID, "crash", {})
        assert info.value.code == "internal" and "shadow" not in info.value.message
        with pytest.raises(AgentCallError) as info:
            await cp.hub.call(SERVER_ID, "no.such.method", {})
        assert info.value.code == "unknown_method"
        # The link survived all of it.
        assert await cp.hub.call(SERVER_ID, "echo", {}) == {"params": {}}


@pytest.mark.anyio
async def test_deadline_raises_timeout_and_cancels_the_handler() -> None:
    async with linked() as setup:
        cp, agent = setup.cp, setup.agent
        with trio.fail_after(3):
            with pytest.raises(AgentTimeoutError):
                await cp.hub.call(SERVER_ID, "sleep", {}, timeout=0.2)
            await agent.cancelled.wait()


@pytest.mark.anyio
async def test_caller_cancellation_reaches_the_agent_handler() -> None:
    async with linked() as setup:
        cp, agent = setup.cp, setup.agent
        with trio.move_on_after(5) as outer:
            async with anyio.create_task_group() as tg:
                tg.start_soon(cp.hub.call, SERVER_ID, "sleep", {})
                await agent.started.wait()
                tg.cancel_scope.cancel()
            await agent.cancelled.wait()
        assert not outer.cancelled_caught


# --- streams -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_streamed_items_arrive_complete_and_in_order() -> None:
    count = 200_000
    async with linked() as setup:
        cp = setup.cp
        received: list[str] = []
        async with cp.hub.open_stream(SERVER_ID, "lines", {"count": count}, window=256 * 1024) as stream:
            async for chunk in stream:
                assert isinstance(chunk, list)
                received.extend(chunk)
            assert stream.result == {"count": count}
        assert received == [f"line {i}" for i in range(count)]


@pytest.mark.anyio
async def test_streamed_bytes_are_exact_and_flow_control_blocks_the_sender() -> None:
    agent = Agent(blob=random.Random(7).randbytes(32 * 1024 * 1024))
    window = 256 * 1024
    async with linked(agent) as setup:
        cp = setup.cp
        digest, size = hashlib.sha256(), 0
        async with cp.hub.open_stream(SERVER_ID, "blob", {}, window=window) as stream:
            first = await stream.__anext__()
            assert isinstance(first, bytes)
            digest.update(first)
            size += len(first)
            # The consumer stalls: the agent spends its credit, and once nothing is left in flight
            # (every task of the run waits: the agent on credit), it has stopped there.
            await eventually(lambda: agent.sent >= window)
            with trio.fail_after(10):
                await trio.testing.wait_all_tasks_blocked()
            assert agent.sent <= window + 64 * 1024 < len(agent.blob)
            async for chunk in stream:
                assert isinstance(chunk, bytes)
                digest.update(chunk)
                size += len(chunk)
            assert stream.result == {"size": len(agent.blob)}
        assert size == len(agent.blob)
        assert digest.digest() == hashlib.sha256(agent.blob).digest()


@pytest.mark.anyio
async def test_leaving_a_stream_early_cancels_the_handler() -> None:
    agent = Agent(blob=bytes(8 * 1024 * 1024))
    async with linked(agent) as setup:
        cp = setup.cp
        async with cp.hub.open_stream(SERVER_ID, "blob", {}, window=128 * 1024) as stream:
            await stream.__anext__()
        with trio.fail_after(3):
            await agent.cancelled.wait()
        assert agent.sent < len(agent.blob)
        assert await cp.hub.call(SERVER_ID, "echo", {}) == {"params": {}}


@pytest.mark.anyio
async def test_stream_error_answer_raises() -> None:
    async with linked() as setup:
        cp = setup.cp
        with pytest.raises(AgentCallError) as info:
            async with cp.hub.open_stream(SERVER_ID, "fail", {}) as stream:
                async for _ in stream:
                    pass
        assert info.value.code == "conflict"


@pytest.mark.anyio
async def test_upload_arrives_byte_exact() -> None:
    data = random.Random(3).randbytes(16 * 1024 * 1024 + 123)
    async with linked() as setup:
        cp = setup.cp
        async with cp.hub.open_upload(SERVER_ID, "upload", {"path": "x"}) as upload:
            for offset in range(0, len(data), 1024 * 1024):
                await upload.send(data[offset : offset + 1024 * 1024])
            result = await upload.finish()
        assert result == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@pytest.mark.anyio
async def test_upload_stops_when_the_handler_fails() -> None:
    async with linked() as setup:
        with trio.fail_after(5), pytest.raises(AgentCallError) as info:
            async with setup.cp.hub.open_upload(SERVER_ID, "upload_fail", {}) as upload:
                await upload.send(bytes(64 * 1024 * 1024))  # far more than the window: must not hang
                await upload.finish()
        assert info.value.code == "too_large"


# --- auth, presence, reconnect -----------------------------------------------------------


@pytest.mark.anyio
async def test_refused_token_gets_4401_and_the_long_backoff(caplog: pytest.LogCaptureFixture) -> None:
    cp = make_control_plane()
    async with serving(cp.hub) as url:
        link = AgentLink(url, "wrong", {}, version="1", backoff=NEVER, auth_backoff=FAST)
        with pytest.raises(LinkAuthRefused) as info:
            await link.run_once()
        assert info.value.close_code == protocol.CLOSE_AUTH_REFUSED
        # run(): only the auth backoff (fast here) lets it retry; the network one would wait 1000 s.
        caplog.set_level(logging.ERROR, logger="fleetdeck.agent")
        with trio.move_on_after(1.0):
            await link.run()
        assert cp.auth_calls >= 4
        assert "refused the agent token" in caplog.text
        assert cp.presence == [] and not cp.hub.is_online(SERVER_ID)


@pytest.mark.anyio
async def test_a_server_deleted_while_its_agent_says_hello_is_not_left_linked() -> None:
    """The token was checked, then the server was deleted before the link registered (its hello
    on the way): the delete found no link to cut, so the link must be refused when it registers."""
    checked, deleted = trio.Event(), trio.Event()

    async def authenticate(token: str) -> str | None:
        checked.set()
        await deleted.wait()
        return SERVER_ID if token == TOKEN else None

    hub = AgentHub(authenticate=authenticate)
    async with serving(hub) as url, trio.open_nursery() as nursery:
        link = AgentLink(url, TOKEN, {}, version="1", backoff=NEVER, auth_backoff=NEVER)
        refused: list[LinkAuthRefused] = []
        ended = trio.Event()

        async def run_once() -> None:
            with pytest.raises(LinkAuthRefused) as info:
                await link.run_once()
            refused.append(info.value)
            ended.set()

        nursery.start_soon(run_once)
        with trio.fail_after(5):
            await checked.wait()
        hub.disconnect(SERVER_ID)  # the delete: its token row is gone, and no link is registered yet
        deleted.set()
        with trio.fail_after(5):
            await ended.wait()
        assert refused[0].close_code == protocol.CLOSE_AUTH_REFUSED
        assert not hub.is_online(SERVER_ID)


@pytest.mark.anyio
async def test_http_rejection_counts_as_auth_refusal() -> None:
    # A route that closes before accepting: hypercorn answers the handshake with HTTP 403.
    async def endpoint(websocket: Any) -> None:
        await websocket.close()

    async with serving_app(Starlette(routes=[WebSocketRoute(protocol.LINK_PATH, endpoint)])) as url:
        link = AgentLink(url, TOKEN, {}, version="1")
        with pytest.raises(LinkAuthRefused) as info:
            await link.run_once()
        assert info.value.status == 403


@pytest.mark.anyio
async def test_presence_and_fast_offline_errors() -> None:
    async with linked() as setup:
        cp, agent = setup.cp, setup.agent
        assert cp.presence[-1][0] == SERVER_ID
        call_failed = trio.Event()

        async def call_in_flight() -> None:
            with pytest.raises(AgentOfflineError):
                await cp.hub.call(SERVER_ID, "sleep", {}, timeout=10)
            call_failed.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call_in_flight)
            await agent.started.wait()
            setup.agent_scope.cancel()  # the agent goes away mid-call
            with trio.fail_after(5):
                await call_failed.wait()
        assert await cp.wait_presence(online=False) is None
        assert not cp.hub.is_online(SERVER_ID) and cp.hub.session(SERVER_ID) is None
        # Offline is the answer at once, not after the call's timeout (a minute here).
        with trio.fail_after(5):
            with pytest.raises(AgentOfflineError):
                await cp.hub.call(SERVER_ID, "echo", {}, timeout=60)
            with pytest.raises(AgentOfflineError):
                async with cp.hub.open_stream(SERVER_ID, "lines", {}, timeout=60):
                    pass


@pytest.mark.anyio
async def test_reconnects_after_the_control_plane_restarts() -> None:
    cp = make_control_plane()
    agent = Agent()
    async with trio.open_nursery() as nursery:
        async with serving(cp.hub) as url:
            link = AgentLink(url, TOKEN, agent.handlers(), version="1", backoff=FAST, auth_backoff=NEVER)
            nursery.start_soon(link.run)
            first = await cp.wait_presence(online=True)
            assert await cp.hub.call(SERVER_ID, "echo", {"n": 1}) == {"params": {"n": 1}}
        await cp.wait_presence(online=False)
        async with serving(cp.hub, int(url.rsplit(":", 1)[1])):
            second = await cp.wait_presence(online=True)
            assert await cp.hub.call(SERVER_ID, "echo", {"n": 2}) == {"params": {"n": 2}}
        assert first is not None and second is not None and first.boot_id == second.boot_id
        nursery.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_newer_link_replaces_the_older_one(caplog: pytest.LogCaptureFixture) -> None:
    async with linked(backoff=NEVER) as setup:  # the replaced agent must not come back in the test
        cp = setup.cp
        first = cp.hub.session(SERVER_ID)
        async with trio.open_nursery() as nursery:
            second_link = AgentLink(setup.url, TOKEN, {"echo": Agent().echo}, version="2", backoff=NEVER)
            nursery.start_soon(second_link.run_once)
            await cp.wait_presence(online=True, version="2")
            session = cp.hub.session(SERVER_ID)
            assert session is not None and session is not first
            assert session.version == "2" and cp.hub.online_count == 1
            # The replaced link ends (its agent says so) and, once nothing is left in flight, its
            # end has not reported the server offline.
            await eventually(lambda: "replaced ours" in caplog.text)
            with trio.fail_after(10):
                await trio.testing.wait_all_tasks_blocked()
            assert cp.presence[-1][1] is session and cp.hub.session(SERVER_ID) is session
            nursery.cancel_scope.cancel()


@pytest.mark.anyio
async def test_heartbeat_drops_a_silent_agent() -> None:
    # A "agent" that says hello and then never answers anything: the hub must give up on it.
    from trio_websocket import open_websocket_url

    cp = make_control_plane(heartbeat_s=0.1)
    async with serving(cp.hub) as url:
        ws_url = url.replace("http", "ws") + protocol.LINK_PATH
        async with open_websocket_url(ws_url, extra_headers=[(b"authorization", f"Bearer {TOKEN}".encode())]) as ws:
            hello: dict[str, Any] = {"t": "hello", "version": "1", "boot_id": "b", "handlers": [], "hostname": "h"}
            hello["direct_ingress_url"] = None
            await ws.send_message(protocol.encode(hello))
            await cp.wait_presence(online=True)
            with trio.fail_after(2):
                await cp.wait_presence(online=False)


@pytest.mark.anyio
async def test_an_idle_link_is_kept_by_alive_messages_and_pongs_the_app_never_sends() -> None:
    # A hand-made agent beating as the link code does, for three times the silence the hub
    # tolerates: each WebSocket ping gets its pong (from the server, not the app), the app sends
    # nothing at all, and the link stays up.
    # A period of 0.5 s (a silence of 1.5 s drops the link): a shorter one lost the link to a
    # busy machine's scheduling in the suite, not to the code under test.
    cp = make_control_plane(heartbeat_s=0.5)
    async with welcomed_link(cp) as ws:
        for _ in range(9):  # 9 x 0.5 s = 3 x dead_after(0.5)
            await ws.send_message(protocol.encode({"t": protocol.ALIVE}))
            with trio.fail_after(5):
                await ws.ping()
            with trio.move_on_after(0.5) as idle:  # the agent's own pace, and nothing may come meanwhile
                await ws.get_message()
            assert idle.cancelled_caught
        assert [session is not None for _, session in cp.presence] == [True]
        assert cp.hub.is_online(SERVER_ID)


@pytest.mark.anyio
async def test_an_agent_older_than_alive_gets_a_pong_for_each_ping() -> None:
    cp = make_control_plane(heartbeat_s=0.2)
    async with welcomed_link(cp) as ws:
        for _ in range(18):  # 18 x 0.1 s = 3 x dead_after(0.2)
            await ws.send_message(protocol.encode({"t": protocol.PING}))
            with trio.fail_after(5):
                assert protocol.decode(await ws.get_message()) == {"t": protocol.PONG}
            await trio.sleep(0.1)  # the agent's own pace, not a wait for a condition
        assert [session is not None for _, session in cp.presence] == [True]
        assert cp.hub.is_online(SERVER_ID)


@asynccontextmanager
async def welcomed_link(cp: ControlPlane) -> AsyncIterator[Any]:
    """A hand-made agent's WebSocket to `cp`'s hub, once its hello is welcomed and it shows online."""
    from trio_websocket import open_websocket_url

    async with serving(cp.hub) as url:
        ws_url = url.replace("http", "ws") + protocol.LINK_PATH
        async with open_websocket_url(ws_url, extra_headers=[(b"authorization", f"Bearer {TOKEN}".encode())]) as ws:
            hello: dict[str, Any] = {"t": "hello", "version": "1", "boot_id": "b", "handlers": [], "hostname": "h"}
            await ws.send_message(protocol.encode(hello))
            assert protocol.decode(await ws.get_message())["t"] == protocol.WELCOME
            await cp.wait_presence(online=True)
            yield ws


@pytest.mark.anyio
async def test_a_link_beyond_the_pending_limit_is_given_a_time_to_come_back(caplog: pytest.LogCaptureFixture) -> None:
    # One link set up at a time: while a first waits before its hello, the next is turned away
    # before the upgrade (503 with a Retry-After), which the agent takes as "busy", not a refusal.
    from trio_websocket import ConnectionRejected, open_websocket_url

    caplog.set_level(logging.INFO, logger="fleetdeck.agent")
    cp = make_control_plane(max_pending_links=1)
    async with serving(cp.hub) as url:
        ws_url = url.replace("http", "ws") + protocol.LINK_PATH
        async with open_websocket_url(ws_url, extra_headers=[(b"authorization", f"Bearer {TOKEN}".encode())]) as ws:
            with pytest.raises(ConnectionRejected) as rejected:
                async with hello_from(url):
                    pass
            assert rejected.value.status_code == 503
            assert dict(rejected.value.headers)[b"retry-after"].isdigit()
            with trio.fail_after(5):
                assert await AgentLink(url, TOKEN, {}, version="1").run_once() is False
            # A refusal by design is no fault: said once, not as a warning.
            refusals = [record.levelname for record in caplog.records if "said to come back in" in record.getMessage()]
            assert refusals == ["INFO"] and "rejected" not in caplog.text and cp.auth_calls == 1
            hello: dict[str, Any] = {"t": "hello", "version": "1", "boot_id": "b", "handlers": [], "hostname": "h"}
            await ws.send_message(protocol.encode(hello))
            await cp.wait_presence(online=True)  # set up: the next link is served again
            async with hello_from(url) as answer:
                assert answer["t"] == protocol.WELCOME


@pytest.mark.anyio
async def test_a_link_turned_away_comes_back_at_the_time_it_was_given(caplog: pytest.LogCaptureFixture) -> None:
    # Every link is turned away: only the turn the control plane gives (a second or two here) lets
    # the agent dial again; either backoff would wait 1000 s.
    cp = make_control_plane(max_pending_links=0)
    async with serving(cp.hub) as url:
        link = AgentLink(url, TOKEN, {}, version="1", backoff=NEVER, busy_backoff=NEVER, auth_backoff=NEVER)
        caplog.set_level(logging.INFO, logger="fleetdeck.agent")
        with trio.move_on_after(5.0):
            await link.run()
        assert caplog.text.count("said to come back in") >= 2


@pytest.mark.anyio
async def test_a_busy_replica_sends_its_agent_on_to_the_next_at_once() -> None:
    # Two replicas, the first turning every link away: the agent dials the second at once, without
    # waiting for its turn at the first (nor any backoff: both would wait 1000 s).
    busy, free = make_control_plane(max_pending_links=0), make_control_plane()
    async with serving(busy.hub) as busy_url, serving(free.hub) as free_url:
        link = AgentLink([busy_url, free_url], TOKEN, {}, version="1", backoff=NEVER, busy_backoff=NEVER)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(link.run)
            await free.wait_presence(online=True)
            assert link.url == link_url(free_url) and busy.presence == []
            nursery.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_gateways_503_without_a_time_is_a_failed_dial(caplog: pytest.LogCaptureFixture) -> None:
    # A proxy in front whose control planes are all down answers 503 and no Retry-After: the agent
    # dials again after its network backoff (fast here), not its busy one (1000 s).
    from trio_websocket import WebSocketRequest, serve_websocket

    async def gateway(request: WebSocketRequest) -> None:
        await request.reject(503, body=b"no server is available")

    async with trio.open_nursery() as nursery:
        server = await nursery.start(partial(serve_websocket, gateway, "127.0.0.1", 0, ssl_context=None))
        url = f"http://127.0.0.1:{server.port}"
        link = AgentLink(url, TOKEN, {}, version="1", backoff=FAST, busy_backoff=NEVER, auth_backoff=NEVER)
        caplog.set_level(logging.WARNING, logger="fleetdeck.agent")
        with trio.move_on_after(1.0):
            await link.run()
        assert caplog.text.count("rejected with HTTP 503") >= 3
        nursery.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_link_told_to_try_again_without_a_time_waits_the_busy_backoff(caplog: pytest.LogCaptureFixture) -> None:
    # A control plane that closes with 1013 and says no more (an older one): only the busy backoff
    # (fast here) lets the agent dial again; the network one would wait 1000 s.
    from trio_websocket import WebSocketRequest, serve_websocket

    async def busy_control_plane(request: WebSocketRequest) -> None:
        ws = await request.accept()
        await ws.aclose(protocol.CLOSE_TRY_AGAIN)

    async with trio.open_nursery() as nursery:
        server = await nursery.start(partial(serve_websocket, busy_control_plane, "127.0.0.1", 0, ssl_context=None))
        url = f"http://127.0.0.1:{server.port}"
        link = AgentLink(url, TOKEN, {}, version="1", backoff=NEVER, busy_backoff=FAST, auth_backoff=NEVER)
        caplog.set_level(logging.WARNING, logger="fleetdeck.agent")
        with trio.move_on_after(1.0):
            await link.run()
        assert caplog.text.count(f"code={protocol.CLOSE_TRY_AGAIN}") >= 3
        nursery.cancel_scope.cancel()


@pytest.mark.anyio
async def test_turns_are_given_in_order_at_the_rate_links_are_registered() -> None:
    # Outside any server: the admission's arithmetic, on the event loop's clock.
    from control_plane.hub.admission import ASSUMED_LINKS_PER_S, Admission

    admission = Admission(limit=0)
    turns = [admission.retry_after() for _ in range(int(ASSUMED_LINKS_PER_S) * 3)]
    assert turns == sorted(turns) and turns[0] == 0 and turns[-1] == 3  # 600 turns at 200/s
    cpu_s = [0.0]  # the process's CPU clock, as the admission reads it: 2 ms a link
    admission = Admission(limit=10_000, cpu_clock=lambda: cpu_s[0])
    for _ in range(2_000):  # 2,000 registered at once: 1,000/s over the rate's 2 s window
        assert admission.enter()
        cpu_s[0] += 0.002
        admission.leave(registered=True)
    for _ in range(1_000):
        assert admission.enter()  # being set up: served before any turn
    assert admission.retry_after() == 1 and Admission(limit=1).rate(anyio.current_time()) == ASSUMED_LINKS_PER_S
    turns = [admission.retry_after() for _ in range(3_000)]
    assert turns[-1] == 4  # (1,000 pending + 3,000 turned away) at 1,000/s


@pytest.mark.anyio
async def test_turns_are_given_at_the_pace_the_links_cpu_cost_affords() -> None:
    # A control plane whose turns let 100 links a second in registers 100 a second: the turns
    # go at what those links cost it (1 ms of CPU each: 800/s at BUSY_SHARE), not at 100/s.
    from control_plane.hub.admission import BUSY_SHARE, Admission

    cpu_s = [0.0]
    admission = Admission(limit=10_000, cpu_clock=lambda: cpu_s[0])
    for _ in range(200):
        assert admission.enter()
        cpu_s[0] += 0.001
        admission.leave(registered=True)
    assert admission.rate(anyio.current_time()) == pytest.approx(BUSY_SHARE / 0.001)
    turns = [admission.retry_after() for _ in range(1_600)]
    assert turns == sorted(turns) and turns[-1] == 2  # 1,600 at 800/s; at 200/s the last waited 8 s


@pytest.mark.anyio
async def test_a_failed_dial_waits_the_network_backoff_not_the_busy_one(caplog: pytest.LogCaptureFixture) -> None:
    # Nothing listens: only the network backoff (fast here) lets the agent dial again.
    link = AgentLink(f"http://127.0.0.1:{free_port()}", TOKEN, {}, version="1", backoff=FAST, busy_backoff=NEVER)
    caplog.set_level(logging.WARNING, logger="fleetdeck.agent")
    with trio.move_on_after(1.0):
        await link.run()
    assert caplog.text.count("cannot connect to") >= 3


@pytest.mark.anyio
async def test_job_kinds_come_from_the_hello() -> None:
    async with linked() as setup:  # an agent that runs no jobs says so
        session = setup.cp.hub.session(SERVER_ID)
        assert session is not None and session.job_kinds == ()
    cp = make_control_plane()
    async with serving(cp.hub) as url:
        async with hello_from(url, job_kinds=["site.list", "docker.ps", "site.list"]) as welcome:
            assert welcome["t"] == protocol.WELCOME
            session = await cp.wait_presence(online=True)
            assert session is not None and session.job_kinds == ("docker.ps", "site.list")
        await cp.wait_presence(online=False)
        async with hello_from(url):  # an agent older than job_kinds
            session = await cp.wait_presence(online=True)
            assert session is not None and session.job_kinds is None


@pytest.mark.parametrize(
    "job_kinds",
    [
        "docker.ps",
        {"docker.ps": True},
        ["docker.ps", 7],
        ["docker.ps", None],
        ["Docker.ps"],
        ["docker"],
        ["docker.ps\n"],
        ["docker.ps; rm -rf /"],
        ["docker." + "p" * 2000],
        ["docker.ps"] * (protocol.MAX_JOB_KINDS + 1),
    ],
    ids=lambda value: repr(value)[:40],
)
@pytest.mark.anyio
async def test_a_hello_with_malformed_job_kinds_is_refused(job_kinds: Any, caplog: pytest.LogCaptureFixture) -> None:
    cp = make_control_plane()
    async with serving(cp.hub) as url, hello_from(url, job_kinds=job_kinds) as closed:
        pass
    assert closed.code == protocol.CLOSE_PROTOCOL_ERROR
    assert "bad job_kinds" in caplog.text
    assert cp.presence == [] and not cp.hub.is_online(SERVER_ID)


@pytest.mark.anyio
async def test_agent_drops_a_silent_control_plane(caplog: pytest.LogCaptureFixture) -> None:
    from trio_websocket import WebSocketRequest, serve_websocket

    async def silent_control_plane(request: WebSocketRequest) -> None:
        ws = await request.accept()
        await ws.get_message()  # hello
        await ws.send_message(protocol.encode({"t": "welcome", "server_id": "s", "heartbeat_s": 0.1}))
        # Stuck: it reads nothing more. Its WebSocket's reader stops once its queue (one message)
        # is full, and with it the pongs to the agent's pings, as a control plane's whose event
        # loop no longer runs.
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        serve = partial(serve_websocket, silent_control_plane, "127.0.0.1", 0, ssl_context=None, message_queue_size=1)
        server = await nursery.start(serve)
        link = AgentLink(f"http://127.0.0.1:{server.port}", TOKEN, {}, version="1")
        with trio.fail_after(3):
            assert await link.run_once() is True  # welcomed, then given up on
        assert "no word from the control plane" in caplog.text
        assert link.server_id == "s"
        nursery.cancel_scope.cancel()


@pytest.mark.anyio
async def test_agent_keeps_a_control_plane_that_answers_its_pings_and_nothing_else() -> None:
    # The control plane's app answers no heartbeat (its WebSocket layer pongs the pings): for three
    # times the silence the agent tolerates, the agent keeps the link and says "alive" each period.
    from trio_websocket import WebSocketRequest, serve_websocket

    received: list[str] = []
    gone = trio.Event()

    async def quiet_control_plane(request: WebSocketRequest) -> None:
        ws = await request.accept()
        await ws.get_message()  # hello
        await ws.send_message(protocol.encode({"t": "welcome", "server_id": "s", "heartbeat_s": 0.1}))
        try:
            while True:  # reads everything (its reader pongs the pings), sends nothing
                received.append(protocol.decode(await ws.get_message())["t"])
        finally:
            gone.set()

    async with trio.open_nursery() as nursery:
        server = await nursery.start(partial(serve_websocket, quiet_control_plane, "127.0.0.1", 0, ssl_context=None))
        nursery.start_soon(AgentLink(f"http://127.0.0.1:{server.port}", TOKEN, {}, version="1").run_once)
        with trio.move_on_after(3 * protocol.dead_after(0.1)):
            await gone.wait()
        assert not gone.is_set()
        assert received.count(protocol.ALIVE) >= 5 and set(received) == {protocol.ALIVE}
        nursery.cancel_scope.cancel()


# --- asyncio -----------------------------------------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_hub_runs_on_asyncio() -> None:
    """The hub under hypercorn's asyncio worker; the (trio) agent runs in its own thread."""
    from hypercorn.asyncio import serve

    presence: list[bool] = []
    online = anyio.Event()

    async def authenticate(token: str) -> str | None:
        return SERVER_ID if token == TOKEN else None

    async def on_presence(server_id: str, session: AgentSession | None) -> None:
        presence.append(session is not None)
        if session is not None:
            online.set()

    hub = AgentHub(authenticate=authenticate, on_presence=on_presence)
    app = Starlette(routes=[WebSocketRoute(protocol.LINK_PATH, hub.handle)])
    bind, url = listening_socket()
    stop = anyio.Event()
    agent = Agent(blob=random.Random(1).randbytes(3 * 1024 * 1024))
    stopper: dict[str, Callable[[], None]] = {}
    ready = threading.Event()

    def run_agent_thread() -> None:
        async def main() -> None:
            token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as scope:
                stopper["stop"] = lambda: trio.from_thread.run_sync(scope.cancel, trio_token=token)
                ready.set()
                await AgentLink(url, TOKEN, agent.handlers(), version="1", backoff=FAST).run()

        trio.run(main)

    async with anyio.create_task_group() as tg:
        tg.start_soon(_serve_asyncio, serve, app, hypercorn_config(bind), stop.wait)
        tg.start_soon(anyio.to_thread.run_sync, run_agent_thread)
        with anyio.fail_after(5):
            await online.wait()
            assert await hub.call(SERVER_ID, "echo", {"x": 1}) == {"params": {"x": 1}}
            got = bytearray()
            async with hub.open_stream(SERVER_ID, "blob", {}, window=128 * 1024) as stream:
                async for chunk in stream:
                    assert isinstance(chunk, bytes)
                    got += chunk
            assert bytes(got) == agent.blob
            async with hub.open_upload(SERVER_ID, "upload", {}) as upload:
                await upload.send(agent.blob)
                assert (await upload.finish())["size"] == len(agent.blob)
        assert ready.is_set()
        stopper["stop"]()
        stop.set()
    assert presence == [True, False]


async def _serve_asyncio(serve: Callable[..., Awaitable[None]], app: Any, config: Config, trigger: Any) -> None:
    await serve(app, config, shutdown_trigger=trigger)


@pytest.mark.parametrize(
    "fields",
    [
        {"version": "1.0\x1b[2J\x1b[31m"},
        {"version": "1.0 (beta)"},
        {"version": "1" * 200},
        {"version": ""},
        {"hostname": "h\x1b]0;owned\x07"},
        {"direct_ingress_url": "javascript:alert(document.cookie)"},
        {"direct_ingress_url": "ftp://ingress.example.com/"},
        {"direct_ingress_url": "https://"},
        {"direct_ingress_url": "http:///no-host"},
        {"direct_ingress_url": "https://ingress.example.com/\x1b[2J"},
        {"direct_ingress_url": "https://ingress example.com/"},
        {"direct_ingress_url": "https://ingress.example.com:port/"},
        {"direct_ingress_url": "https://ingress.example.com/" + "a" * 2000},
        {"direct_ingress_url": 7},
    ],
    ids=lambda fields: repr(fields)[:50],
)
@pytest.mark.anyio
async def test_a_hello_with_strings_unfit_for_users_is_refused(
    fields: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    cp = make_control_plane()
    async with serving(cp.hub) as url, hello_from(url, **fields) as closed:
        pass
    assert closed.code == protocol.CLOSE_PROTOCOL_ERROR
    assert "dropped before hello" in caplog.text
    assert cp.presence == [] and not cp.hub.is_online(SERVER_ID)


@pytest.mark.parametrize(
    ("version", "ingress"),
    [("0.1.0", "https://ingress.example.com:8443/upload"), ("2.0.0rc1+local.3", "http://[::1]:9000"), ("7", None)],
)
@pytest.mark.anyio
async def test_a_hello_with_a_plain_version_and_ingress_is_welcome(version: str, ingress: str | None) -> None:
    cp = make_control_plane()
    async with serving(cp.hub) as url, hello_from(url, version=version, direct_ingress_url=ingress) as welcome:
        assert welcome["t"] == protocol.WELCOME
        session = await cp.wait_presence(online=True)
        assert session is not None and (session.version, session.direct_ingress_url) == (version, ingress)


class _FailingFiles:
    """A hand-made agent whose `fs.stat` fails the way its `path` says."""

    FAILURES: dict[str, Exception] = {
        "internal": RpcError(protocol.INTERNAL, 'Traceback (most recent call last):\n  File "/srv/agent.py"'),
        "escapes": RpcError("disk_on_fire", "disk \x1b[31mon fire\x1b[0m\x07 " + "x" * 5000),
        "caller": RpcError("unauthenticated", "your session ended: log in again"),
        "crash": ValueError("a bug with a secret path /etc/shadow"),
        "named": RpcError("not_found", "no such file: gone.txt", {"path": "gone.txt"}),
    }

    async def stat(self, call: Call) -> Any:
        raise self.FAILURES[call.params["path"]]


@pytest.mark.anyio
async def test_agent_errors_reach_users_as_a_safe_agent_error(stack: Stack) -> None:
    headers = {"Authorization": f"Bearer {stack.token}"}
    async with httpx.AsyncClient(base_url=stack.base_url, headers=headers, timeout=30) as http:
        created = await http.post("/v1/servers", json={"name": f"failing-{uuid.uuid4().hex[:8]}", "kind": "full"})
        server_id, token = created.json()["server"]["id"], created.json()["agent_token"]
        link = AgentLink(stack.base_url, token, {"fs.stat": _FailingFiles().stat}, version="1.0", backoff=FAST)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(link.run)
            with trio.fail_after(20):
                # A separate control plane: no event of its hub to wait on, only its API to ask.
                while not (await http.get(f"/v1/servers/{server_id}")).json()["agent"]["online"]:  # noqa: ASYNC110
                    await trio.sleep(0.05)

            async def stat(path: str) -> httpx.Response:
                return await http.get(f"/v1/servers/{server_id}/fs/stat", params={"scope": "root", "path": path})

            for path, agent_code in [
                ("internal", "internal"),
                ("escapes", "disk_on_fire"),
                ("caller", "unauthenticated"),
                ("crash", "internal"),
            ]:
                answer = await stat(path)
                error = answer.json()["error"]
                assert (answer.status_code, error["code"], error["details"]) == (
                    502,
                    "agent_error",
                    {"agent_code": agent_code},
                ), path
                message = error["message"]
                assert message.isprintable() and len(message) <= 400, path
                assert "Traceback" not in message and "shadow" not in message and "File" not in message
            assert "disk on fire" in (await stat("escapes")).json()["error"]["message"]
            named = await stat("named")
            assert named.status_code == 404 and named.json()["error"]["details"] == {"path": "gone.txt"}
            nursery.cancel_scope.cancel()
        await http.delete(f"/v1/servers/{server_id}")


@pytest.mark.anyio
async def test_kernel_protections_come_from_the_hello(caplog: pytest.LogCaptureFixture) -> None:
    """A hello's kernel_protections is taken as said (the agent's own is tested end to end in
    tests/agent/files/test_faults.py), a missing one is not known (None), and a malformed one is refused
    like any bad hello."""
    cp = make_control_plane()
    async with serving(cp.hub) as url:
        said = {"protected_hardlinks": False, "protected_symlinks": None}
        async with hello_from(url, kernel_protections=said):
            session = await cp.wait_presence(online=True)
            assert session is not None and session.kernel_protections == (False, None)
        await cp.wait_presence(online=False)
        async with hello_from(url):  # an agent older than kernel_protections
            session = await cp.wait_presence(online=True)
            assert session is not None and session.kernel_protections is None
        await cp.wait_presence(online=False)
        for bad in ([True, True], {"protected_hardlinks": 1}, "on"):
            async with hello_from(url, kernel_protections=bad) as closed:
                pass
            assert closed.code == protocol.CLOSE_PROTOCOL_ERROR, bad
    assert "bad kernel_protections" in caplog.text
