"""`Call`: one request as its handler sees it, with the credit-honouring stream primitives."""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
import trio

from contract.link import protocol


class Outbound(Protocol):
    """Where a call's frames go: the link session (serialised by its send lock)."""

    async def send_text(self, frame: str) -> None: ...

    async def send_bytes(self, frame: bytes) -> None: ...


class Call:
    """A request being served: ``id``, ``method``, ``params`` and the streaming primitives.

    A handler made for a plain request can be called directly in tests with
    ``Call(1, "fs.list", {...})``; the streaming methods then raise RuntimeError.
    """

    def __init__(
        self,
        id: int,
        method: str,
        params: dict[str, Any],
        *,
        window: int | None = None,
        upload: bool = False,
        outbound: Outbound | None = None,
        chunk_size: int = protocol.DEFAULT_CHUNK_SIZE,
    ) -> None:
        self.id = id
        self.method = method
        self.params = params
        self.window = window
        self.upload = upload
        self._outbound = outbound
        self._chunk_size = chunk_size
        self._credit = window or 0
        self._credit_event = trio.Event()
        # Upload side: bytes received and not yet taken by the handler.
        self._inbound: deque[bytes] = deque()
        self._inbound_event = trio.Event()
        self._ended = False
        self._ungranted = 0
        # Entered by the session around the handler; `cancel` may arrive before the task starts.
        self.cancel_scope = trio.CancelScope()

    # --- streamed reply -------------------------------------------------------------------

    @property
    def streaming(self) -> bool:
        """Whether the caller accepts a streamed reply (items or bytes before the result)."""
        return self.window is not None and self._outbound is not None

    async def send_items(self, items: list[Any]) -> None:
        """Send JSON items, in batches cut to the available credit (waits when there is none)."""
        outbound = self._stream_outbound()
        encoded = [orjson.dumps(item) for item in items]
        start = 0
        while start < len(encoded):
            budget = min(await self._wait_for_credit(), self._chunk_size) - protocol.ITEMS_OVERHEAD
            end, size = start + 1, len(encoded[start])  # one item always goes, even if it overdraws
            while end < len(encoded) and size + 1 + len(encoded[end]) <= budget:
                size += 1 + len(encoded[end])
                end += 1
            frame = protocol.items_frame(self.id, encoded[start:end])
            self._credit -= len(frame)
            await outbound.send_text(frame.decode())
            start = end

    async def send_bytes(self, data: bytes) -> None:
        """Send bytes as binary frames of at most the credit and the chunk size."""
        outbound = self._stream_outbound()
        view = memoryview(data)
        offset = 0
        while offset < len(view):
            n = min(len(view) - offset, await self._wait_for_credit(), self._chunk_size)
            self._credit -= n
            await outbound.send_bytes(protocol.pack_binary(self.id, view[offset : offset + n]))
            offset += n

    def _stream_outbound(self) -> Outbound:
        if self._outbound is None or self.window is None:
            raise RuntimeError(f"the caller of {self.method} did not ask for a streamed reply")
        return self._outbound

    async def _wait_for_credit(self) -> int:
        while self._credit <= 0:
            self._credit_event = trio.Event()
            await self._credit_event.wait()
        return self._credit

    def add_credit(self, n: int) -> None:
        self._credit += n
        self._credit_event.set()

    # --- upload ---------------------------------------------------------------------------

    async def receive_bytes(self) -> bytes | None:
        """The next chunk of the upload, or None once the control plane sent ``end``."""
        if not self.upload or self._outbound is None:
            raise RuntimeError(f"{self.method} was not called as an upload")
        while not self._inbound and not self._ended:
            self._inbound_event = trio.Event()
            await self._inbound_event.wait()
        if not self._inbound:
            return None
        chunk = self._inbound.popleft()
        self._ungranted += len(chunk)
        if self._ungranted >= protocol.grant_threshold(protocol.UPLOAD_WINDOW):
            n, self._ungranted = self._ungranted, 0
            await self._outbound.send_text(protocol.encode({"t": protocol.CREDIT, "id": self.id, "n": n}))
        return chunk

    def push_upload(self, chunk: bytes) -> None:
        if self.upload and not self._ended:
            self._inbound.append(chunk)
            self._inbound_event.set()

    def end_upload(self) -> None:
        self._ended = True
        self._inbound_event.set()


Handler = Callable[[Call], Awaitable[Any]]
"""An RPC handler: gets the call, returns the JSON result or raises `protocol.RpcError`."""
