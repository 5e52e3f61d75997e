"""Long file operations (compress, extract): run beside the request, followed over SSE.

`POST fs/compress` answers `202 {operation_id}` at once; the agent streams progress, which is
kept in memory (the control plane stores no file content, and progress is worth nothing after
the fact) and served by `GET fs/operations/{op}/stream`: `progress` events, then `done` or
`error`. Finished operations are forgotten after `KEEP_S`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from contract.backoff import full_jitter
from contract.errors import AgentOffline, AgentTimeout, InsufficientStorage, Unavailable
from control_plane import sse
from control_plane.auth.secrets import new_id
from control_plane.bus import BusAway
from control_plane.hub import AgentCallError, AgentHub, AgentOfflineError, AgentTimeoutError
from control_plane.storage.outage import is_outage

KEEP_S = 600.0
# How long an operation's audit entry waits for a database that is away (the app's stop included).
FINISH_RETRY_S = 60.0
PROGRESS_WINDOW = 1024 * 1024

Finished = Callable[["Operation", str | None], Awaitable[None]]


log = logging.getLogger(__name__)


@dataclass
class Operation:
    id: str
    org_id: str
    server_id: str
    method: str
    events: list[bytes] = field(default_factory=list)
    finished_at: float | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    _wake: anyio.Event = field(default_factory=anyio.Event)

    def push(self, name: str, data: Any) -> None:
        self.events.append(sse.event(name, data, len(self.events) + 1))
        self._wake.set()
        self._wake = anyio.Event()

    def finish(self) -> None:
        self.finished_at = time.monotonic()
        self._wake.set()

    async def follow(self, after: int) -> AsyncIterator[bytes]:
        while True:
            if after < len(self.events):
                chunk, after = b"".join(self.events[after:]), len(self.events)
                yield chunk
                continue
            if self.finished_at is not None:
                return
            await self._wake.wait()


class FileOperations:
    def __init__(self, hub: AgentHub) -> None:
        self._hub = hub
        self._group: TaskGroup | None = None
        self._operations: dict[str, Operation] = {}

    def bind(self, group: TaskGroup) -> None:
        self._group = group

    def start(self, org_id: str, server_id: str, method: str, params: dict[str, Any], on_finish: Finished) -> str:
        if self._group is None:
            raise RuntimeError("file operations are not running (no lifespan task group)")
        self._forget_old()
        operation = Operation(new_id("op"), org_id, server_id, method)
        self._operations[operation.id] = operation
        self._group.start_soon(self._run, operation, params, on_finish, name=f"fs operation {operation.id}")
        return operation.id

    def get(self, org_id: str, server_id: str, operation_id: str) -> Operation | None:
        operation = self._operations.get(operation_id)
        if operation is None or operation.org_id != org_id or operation.server_id != server_id:
            return None
        return operation

    def _forget_old(self) -> None:
        now = time.monotonic()
        for key, operation in list(self._operations.items()):
            if operation.finished_at is not None and now - operation.finished_at > KEEP_S:
                del self._operations[key]

    async def _run(self, operation: Operation, params: dict[str, Any], on_finish: Finished) -> None:
        error_code: str | None = None
        with operation.scope:
            try:
                async with self._hub.open_stream(
                    operation.server_id, operation.method, params, window=PROGRESS_WINDOW
                ) as stream:
                    async for chunk in stream:
                        if isinstance(chunk, list):
                            for progress in chunk:
                                operation.push("progress", progress)
                operation.push("done", {"result": stream.result})
            except AgentCallError as exc:
                error_code = exc.public_code
                failed: dict[str, Any] = {"code": error_code, "message": exc.message}
                if error_code == InsufficientStorage.code:  # where the disk is full
                    failed["details"] = {"path": str(exc.details.get("path", ""))}
                operation.push("error", failed)
            except BusAway:
                error_code = Unavailable.code
                operation.push("error", {"code": error_code, "message": "the bus to the agent's replica is away"})
            except AgentOfflineError:
                error_code = AgentOffline.code
                operation.push("error", {"code": error_code, "message": "the server's agent went away"})
            except AgentTimeoutError:
                error_code = AgentTimeout.code
                operation.push("error", {"code": error_code, "message": "the server's agent did not answer in time"})
        if operation.scope.cancelled_caught:
            error_code = "cancelled"
            operation.push("error", {"code": error_code, "message": "cancelled; the partial result was removed"})
        operation.finish()
        with anyio.CancelScope(shield=True), anyio.move_on_after(FINISH_RETRY_S) as retrying:
            attempt = 0
            while True:
                try:
                    await on_finish(operation, error_code)
                    break
                except Exception as exc:
                    if not is_outage(exc):
                        # A bug, but one of this operation's: the app's task group (every job,
                        # every operation, the server itself) must not end with it.
                        log.exception("fs operation %s: its finish hook (the audit) failed", operation.id)
                        break
                await anyio.sleep(full_jitter(attempt, 0.5, 5.0))  # the database is away (logged once)
                attempt += 1
        if retrying.cancelled_caught:
            log.warning("fs operation %s: its audit entry is lost: the database was away too long", operation.id)
