"""The transport of the client for agents' ingresses: bulk bytes, read a megabyte at a time.

httpcore reads an HTTP/1.1 body 64 KiB per receive (`READ_NUM_BYTES`, a class constant raised
from 4 KiB in encode/httpcore#135 on the same grounds). On loopback that holds a direct download
near 800 MiB/s on this machine against some 5 GiB/s for the socket itself; 1 MiB per receive
takes it to some 1.5 GiB/s (`benchmarks/files.py`). A receive returns what has arrived, so small
answers are no slower, and memory stays one buffer per connection.

Only the ingress client reads this way: the control plane's client keeps httpcore's size, as the
TUI's job streams are many small events, not bulk.
"""

# ruff: noqa: ASYNC109 (httpcore's network interface takes its timeouts as arguments)

from __future__ import annotations

import ssl
import typing

import httpcore
import httpx

INGRESS_READ_BYTES = 1024 * 1024


class _LargeReadStream(httpcore.AsyncNetworkStream):
    """A network stream whose every receive asks for at least `INGRESS_READ_BYTES`."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max(max_bytes, INGRESS_READ_BYTES), timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        return _LargeReadStream(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._stream.get_extra_info(info)


class _LargeReadBackend(httpcore.AsyncNetworkBackend):
    """httpcore's own network backend, its streams wrapped in `_LargeReadStream`."""

    def __init__(self, backend: httpcore.AsyncNetworkBackend) -> None:
        self._backend = backend

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        return _LargeReadStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _LargeReadStream(await self._backend.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def ingress_transport(tls: ssl.SSLContext) -> httpx.AsyncHTTPTransport:
    """httpx's own transport (verifying with `tls`), its connections reading `INGRESS_READ_BYTES`
    per receive.

    httpx takes no network backend, so the one its pool made is wrapped in place; should a later
    httpx name it otherwise, the transport stays httpx's own (correct, at httpcore's read size).
    """
    transport = httpx.AsyncHTTPTransport(verify=tls)
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if isinstance(backend, httpcore.AsyncNetworkBackend):
        pool._network_backend = _LargeReadBackend(backend)  # type: ignore[union-attr]
    return transport
