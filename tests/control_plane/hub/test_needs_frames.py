"""What an agent says cannot run on its server (issue 24, point 4), over a real link (the hub
served by hypercorn, the agent's own link): the hello carries the map, a ``needs`` frame each
change of it, and the hub's session (what `GET /v1/servers/{id}` shows) follows; a malformed
``needs`` frame breaks the protocol as a malformed hello does."""

from __future__ import annotations

import logging

import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from agent.link.client import AgentLink
from contract.link import protocol
from tests.helpers import eventually
from tests.helpers.link import FAST, NEVER, SERVER_ID, TOKEN, make_control_plane, serving


@pytest.mark.anyio
async def test_the_hub_follows_what_the_agent_says_it_needs() -> None:
    cp = make_control_plane()
    needs = {"dns.check": "bind9-utils"}
    async with serving(cp.hub) as url, trio.open_nursery() as nursery:
        link = AgentLink(
            url,
            TOKEN,
            {},
            version="9.9",
            job_kinds=["dns.check", "dns.lookup"],
            needs=lambda: dict(needs),
            backoff=FAST,
            auth_backoff=NEVER,
        )
        nursery.start_soon(link.run)
        session = await cp.wait_presence(online=True)
        assert session is not None and session.needs == {"dns.check": "bind9-utils"}
        needs.clear()
        link.needs_changed()
        await eventually(lambda: (cp.hub.session(SERVER_ID) or session).needs == {})
        needs["dns.lookup"] = "bind9-dnsutils"
        link.needs_changed()
        await eventually(lambda: (cp.hub.session(SERVER_ID) or session).needs == {"dns.lookup": "bind9-dnsutils"})
        assert cp.hub.is_online(SERVER_ID)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("frame", [{"needs": {"dns.check": 1}}, {"needs": ["dns.check"]}, {}])
@pytest.mark.anyio
async def test_a_malformed_needs_frame_closes_the_link(
    frame: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    cp = make_control_plane()
    async with serving(cp.hub) as url:
        ws_url = url.replace("http", "ws") + protocol.LINK_PATH
        hello = {"t": "hello", "version": "1", "boot_id": "b", "handlers": [], "hostname": "h", "needs": {}}
        async with open_websocket_url(ws_url, extra_headers=[(b"authorization", f"Bearer {TOKEN}".encode())]) as ws:
            await ws.send_message(protocol.encode(hello))
            welcome = protocol.decode(await ws.get_message())
            assert welcome["t"] == protocol.WELCOME
            await ws.send_message(protocol.encode({"t": protocol.NEEDS, **frame}))
            with trio.fail_after(5), pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
    assert closed.value.reason.code == protocol.CLOSE_PROTOCOL_ERROR
    assert "needs with a bad needs" in caplog.text
    assert not [r for r in caplog.records if r.exc_info]
