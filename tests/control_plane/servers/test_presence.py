"""Agent presence: online, offline within seconds of a kill, back on restart; its SSE feed resumes."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from agent.jobs.kinds import all_kinds
from api_client import Client
from contract.link import protocol
from tests.conftest import Stack, start_agent, start_local
from tests.helpers import wait_until

pytestmark = pytest.mark.stack_variants("sqlite", "postgresql")


def _online(stack: Stack, server_id: str) -> bool:
    with stack.http() as http:
        online: bool = http.get(f"/v1/servers/{server_id}").json()["agent"]["online"]
        return online


@pytest.fixture
def second_server(stack: Stack, tmp_path: Path) -> tuple[str, str, Path]:
    with stack.http() as http:
        created = http.post("/v1/servers", json={"name": f"web-{tmp_path.name[-6:]}", "kind": "full"}).json()
    home = tmp_path / "home"
    (home / "site-a" / "www").mkdir(parents=True)
    state = tmp_path / "state"
    state.mkdir()
    (state / "sites.json").write_text('{"sites": [{"domain": "a.example", "slug": "site-a"}]}')
    return created["server"]["id"], created["agent_token"], tmp_path


def test_agent_presence_lifecycle(stack: Stack, second_server: tuple[str, str, Path]) -> None:
    server_id, token, folder = second_server
    assert not _online(stack, server_id)
    agent = start_agent(stack.base_url, token, folder / "home", folder / "state")
    try:
        wait_until(lambda: _online(stack, server_id), timeout=20)
        with stack.http() as http:
            server = http.get(f"/v1/servers/{server_id}").json()
            assert server["agent"]["version"] and server["agent"]["connected_at"]
            listed = http.get(f"/v1/servers/{server_id}/fs/list", params={"scope": "root"})
            assert listed.status_code == 200 and [e["name"] for e in listed.json()["entries"]] == ["site-a"]
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        wait_until(lambda: not _online(stack, server_id), timeout=5)
        with stack.http() as http:
            offline = http.get(f"/v1/servers/{server_id}/fs/list", params={"scope": "root"})
            assert offline.status_code == 409 and offline.json()["error"]["code"] == "agent_offline"
            assert http.get(f"/v1/servers/{server_id}").json()["agent"]["last_seen_at"]
        agent = start_agent(stack.base_url, token, folder / "home", folder / "state")
        wait_until(lambda: _online(stack, server_id), timeout=20)
    finally:
        agent.kill()
        agent.wait()


def test_job_kinds_are_what_the_agent_said_and_stay_while_it_is_away(
    stack: Stack, second_server: tuple[str, str, Path]
) -> None:
    server_id, token, folder = second_server

    def agent_info() -> dict[str, object]:
        with stack.http() as http:
            listed = {s["id"]: s["agent"] for s in http.get("/v1/servers").json()["servers"]}
            one: dict[str, object] = http.get(f"/v1/servers/{server_id}").json()["agent"]
        assert listed[server_id] == {**one, "last_seen_at": listed[server_id]["last_seen_at"]}
        return one

    assert agent_info()["job_kinds"] is None  # never linked: nobody knows
    agent = start_agent(stack.base_url, token, folder / "home", folder / "state")
    try:
        wait_until(lambda: _online(stack, server_id), timeout=20)
        assert agent_info()["job_kinds"] == sorted(all_kinds())
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        wait_until(lambda: not _online(stack, server_id), timeout=5)
        assert agent_info()["job_kinds"] == sorted(all_kinds())
    finally:
        agent.kill()
        agent.wait()


def test_wrong_agent_token_never_comes_online(stack: Stack, second_server: tuple[str, str, Path]) -> None:
    server_id, _, folder = second_server
    agent = start_agent(stack.base_url, "fda_wrong", folder / "home", folder / "state")
    try:
        with pytest.raises(AssertionError):
            wait_until(lambda: _online(stack, server_id), timeout=3)
        assert agent.poll() is None  # it waits to retry, it does not crash
    finally:
        agent.kill()
        agent.wait()


@pytest.mark.anyio
async def test_presence_feed_resumes_with_last_event_id(stack: Stack, second_server: tuple[str, str, Path]) -> None:
    server_id, token, folder = second_server
    async with Client(stack.base_url, token=stack.token) as client:
        stream = client.events("/v1/servers/events")
        events = stream.__aiter__()
        ready = await events.__anext__()
        assert ready.event == "ready" and stream.last_event_id
        agent = await trio.to_thread.run_sync(start_agent, stack.base_url, token, folder / "home", folder / "state")
        try:
            with trio.fail_after(20):
                online = await events.__anext__()
                while online.event == "pulse":  # the agents' pulses come between (and carry no id)
                    online = await events.__anext__()
            assert online.event == "presence" and online.data["server_id"] == server_id and online.data["online"]
            assert online.data["job_kinds"] == sorted(all_kinds())
            resume_from = stream.last_event_id
            await events.aclose()  # the client goes away...
            agent.kill()  # ...and misses the agent dropping
            await trio.to_thread.run_sync(agent.wait)
            await trio.to_thread.run_sync(wait_until, lambda: not _online(stack, server_id))
        finally:
            agent.kill()
        resumed = client.events("/v1/servers/events", last_event_id=resume_from).__aiter__()
        with trio.fail_after(10):
            first = await resumed.__anext__()
            while first.event != "presence":
                first = await resumed.__anext__()
        assert first.data["server_id"] == server_id and first.data["online"] is False
        assert first.data["job_kinds"] == sorted(all_kinds())  # what its last hello said
        await resumed.aclose()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.anyio
async def test_event_stream_reconnects_by_itself(tmp_path: Path) -> None:
    """The control plane restarts under a live stream: the client reconnects and resumes."""
    port = _free_port()
    first = await trio.to_thread.run_sync(start_local, tmp_path, port)
    await trio.to_thread.run_sync(first.stop)
    second = await trio.to_thread.run_sync(start_local, tmp_path, port)
    try:
        assert second.server_id == first.server_id and second.password == first.password  # data reused
        async with Client(second.base_url, token=second.token) as client:
            stream = client.events("/v1/servers/events")
            events = stream.__aiter__()
            assert (await events.__anext__()).event == "ready"
            await trio.to_thread.run_sync(second.stop)
            third = await trio.to_thread.run_sync(start_local, tmp_path, port)
            try:
                with trio.fail_after(30):
                    event = await events.__anext__()
                    while event.event != "presence":
                        event = await events.__anext__()
                assert event.data["server_id"] == first.server_id and event.data["online"] is True
                await events.aclose()
            finally:
                await trio.to_thread.run_sync(third.stop)
    finally:
        await trio.to_thread.run_sync(second.stop)


def _agents_online(stack: Stack) -> int:
    count: int = httpx.get(f"{stack.base_url}/v1/health").json()["agents_online"]
    return count


async def _relink_close_code(stack: Stack, token: str) -> int | None:
    """Open the agent link with `token` as an agent would; the code the control plane closes it with."""
    url = stack.base_url.replace("http", "ws", 1) + protocol.LINK_PATH
    async with open_websocket_url(url, extra_headers=[(b"authorization", f"Bearer {token}".encode())]) as ws:
        with trio.fail_after(10):
            try:
                await ws.get_message()
            except ConnectionClosed as closed:
                return closed.reason.code
    return None


def test_deleting_a_server_cuts_its_agent_and_refuses_it_afterwards(
    stack: Stack, second_server: tuple[str, str, Path]
) -> None:
    server_id, token, folder = second_server
    log_start = len(stack.log())
    with open(folder / "agent.log", "w") as agent_log:
        agent = start_agent(stack.base_url, token, folder / "home", folder / "state", stderr=agent_log)
    try:
        wait_until(lambda: _online(stack, server_id), timeout=20)
        online = _agents_online(stack)
        with stack.http() as http:
            assert http.delete(f"/v1/servers/{server_id}").status_code == 204
            assert _agents_online(stack) == online - 1  # cut at once, not at the next heartbeat
            assert http.get(f"/v1/servers/{server_id}").status_code == 404
            assert server_id not in [s["id"] for s in http.get("/v1/servers").json()["servers"]]
        wait_until(lambda: "refused the agent token" in (folder / "agent.log").read_text(), timeout=20)
        assert trio.run(_relink_close_code, stack, token) == protocol.CLOSE_AUTH_REFUSED
        assert _agents_online(stack) == online - 1
        assert agent.poll() is None  # it waits for a valid token; only its link went
    finally:
        agent.kill()
        agent.wait()
    after = stack.log()[log_start:]
    assert "Traceback" not in after and " 500" not in after
