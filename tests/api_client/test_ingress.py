"""The ingress client's transport: every receive of a direct transfer asks for a megabyte."""

from __future__ import annotations

import httpcore
import pytest

from api_client import Client
from api_client._ingress import INGRESS_READ_BYTES, _LargeReadBackend, _LargeReadStream


class _Recording(httpcore.AsyncNetworkStream):
    def __init__(self) -> None:
        self.asked: list[int] = []

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        self.asked.append(max_bytes)
        return b"x"


@pytest.mark.anyio
async def test_each_receive_asks_for_at_least_a_megabyte_and_a_larger_ask_stays() -> None:
    inner = _Recording()
    stream = _LargeReadStream(inner)
    assert await stream.read(64 * 1024) == b"x"  # httpcore's own size
    await stream.read(4 * INGRESS_READ_BYTES)
    assert inner.asked == [INGRESS_READ_BYTES, 4 * INGRESS_READ_BYTES]


@pytest.mark.anyio
async def test_the_clients_ingress_connections_use_the_large_reads_and_the_control_plane_ones_do_not() -> None:
    async with Client("http://127.0.0.1:9") as client:
        ingress_pool = client.ingress_http._transport._pool  # type: ignore[attr-defined]
        control_pool = client._http._transport._pool  # type: ignore[attr-defined]
        # Were httpx to build its pool otherwise, the transport would silently keep 64 KiB reads.
        assert isinstance(ingress_pool._network_backend, _LargeReadBackend)
        assert not isinstance(control_pool._network_backend, _LargeReadBackend)


@pytest.mark.anyio
async def test_every_client_of_a_process_verifies_with_one_tls_context() -> None:
    """httpx would load the CA bundle for each client (some 20 ms): the TUI opens two at start."""
    async with Client("https://127.0.0.1:9") as first, Client("https://127.0.0.1:10") as second:
        contexts = {
            id(http._transport._pool._ssl_context)  # type: ignore[attr-defined]
            for http in (first._http, second._http, first.ingress_http, second.ingress_http)
        }
        assert len(contexts) == 1
