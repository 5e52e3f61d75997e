"""An event stream behind a load balancer: the gateway's own 503, while no control plane is
up behind it, is a reason to reconnect, not the end of the stream (an API error still is)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
import trio

from api_client import Client
from tests.conftest import Stack
from tests.helpers import eventually
from tests.helpers.replicas import Haproxy, start_haproxy


def _gateway_5xx(proxy: Haproxy) -> int:
    """The 5xx answers HAProxy made up itself (its frontend's count: the backend gave none)."""
    rows = csv.DictReader(io.StringIO(proxy.command("show stat").lstrip("# ")))
    return sum(int(row["hrsp_5xx"] or 0) for row in rows if row["svname"] == "FRONTEND")


@pytest.mark.anyio
async def test_a_stream_reconnects_through_the_gateways_503_and_resumes(stack: Stack, tmp_path: Path) -> None:
    proxy = start_haproxy(tmp_path, [stack], mode="http")  # a Stack has a base_url too
    try:
        async with Client(proxy.url, token=stack.token) as client:
            stream = client.events("/v1/servers/events")
            events = stream.__aiter__()
            assert (await events.__anext__()).event == "ready"
            seen = stream.last_event_id
            proxy.command("set server replicas/r0 state maint")
            proxy.command("shutdown sessions server replicas/r0")
            async with trio.open_nursery() as nursery:
                resumed: list[str] = []

                async def follow() -> None:
                    event = await events.__anext__()
                    while event.event == "pulse":  # the agents' pulses (held ones come with ready) have no id
                        event = await events.__anext__()
                    resumed.append(event.event)

                nursery.start_soon(follow)
                await eventually(lambda: _gateway_5xx(proxy) > 0, within=60)  # the client met the 503
                proxy.command("set server replicas/r0 state ready")
            assert resumed == ["ready"]  # a new connection, after the gateway's 503
            assert stream.last_event_id == seen  # resumed where it was: nothing happened since
            await events.aclose()
    finally:
        proxy.stop()
