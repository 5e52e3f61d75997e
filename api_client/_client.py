"""The typed async client of the `/v1` API.

    async with Client("http://127.0.0.1:8080") as client:
        await client.auth.login("owner@example.com", "secret")
        for server in await client.servers.list():
            listing = await client.files.list(server.id, Scope(scope="root"), "")

It runs on trio (and on asyncio): httpx picks the running event loop. Every error answer is raised
as the `contract.errors` class of its code.
"""

from __future__ import annotations

import builtins
import functools
import ssl
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, aclosing
from types import TracebackType
from typing import Any, Literal, TypeVar, cast

import httpx
import orjson
from httpx_ws import AsyncWebSocketSession, WebSocketDisconnect, WebSocketNetworkError, aconnect_ws
from pydantic import TypeAdapter

from api_client._ingress import ingress_transport
from api_client._sse import EventStream
from contract.errors import ApiError, FleetdeckError, TransportError, Unavailable
from contract.link import fastmask
from contract.load_balancers import (
    ApplyStarted,
    Backend,
    BackendCreate,
    BackendPatch,
    LoadBalancer,
    LoadBalancerCreate,
    LoadBalancerList,
    LoadBalancerPatch,
)
from contract.models import (
    DIRECT_UPLOAD_LIMIT,
    MAX_ARCHIVE_PATHS,
    MAX_PATHS,
    RELAY_UPLOAD_LIMIT,
    WINDOW_LIMIT,
    ApiToken,
    ApiTokenCreated,
    AuditEntry,
    AuditList,
    DirectDownload,
    DirectUpload,
    Entry,
    ExtractConflicts,
    FileContent,
    FileWindow,
    FsChmodResult,
    FsCopyResult,
    FsDeleted,
    FsDeleteResult,
    FsDestination,
    FsDirSize,
    FsEmptyTrashResult,
    FsEntryResult,
    FsExtractCheck,
    FsFound,
    FsMoveResult,
    FsRestoreResult,
    FsSearchResult,
    FsTrashList,
    FsWriteResult,
    Health,
    Job,
    JobKindInfo,
    JobKindList,
    JobList,
    Listing,
    LoginResponse,
    Me,
    OperationStarted,
    PresenceEvent,
    PulseEvent,
    Scope,
    ScopeList,
    Server,
    ServerCreated,
    ServerKind,
    ServerList,
    TokenList,
    TrashItem,
)

_DELETE_RESULT: TypeAdapter[FsDeleteResult] = TypeAdapter(FsDeleteResult)
R = TypeVar("R")


MAX_PATHS_PER_REQUEST = MAX_PATHS
# Move, copy, delete and chmod of more paths go in batches of this many: any number of paths works,
# and a caller can show progress about once a second (trashing 1,000 items takes ~0.7 s) and stop
# between batches. Smaller batches would only add round trips.
PATHS_PER_BATCH = min(1000, MAX_PATHS_PER_REQUEST)
BatchProgress = Callable[[int, int], object]
"""Called after each batch with (items done, items in all)."""
KeepGoing = Callable[[], bool]
"""Asked before each batch after the first: False stops there (the batch in flight always ends)."""


class BatchInterrupted(FleetdeckError):
    """A bulk action stopped part way: `done` of `total` paths were acted on, in whole batches;
    `cause` is the error of the batch that failed, or None when the caller asked to stop."""

    def __init__(self, done: int, total: int, cause: FleetdeckError | None) -> None:
        self.done = done
        self.total = total
        self.cause = cause
        reason = f"then: {cause}" if cause is not None else "then stopped as asked"
        super().__init__(f"{done:,} of {total:,} items were done, {reason}")


def archive_paths_problem(count: int) -> str | None:
    """Why `count` paths cannot go into one archive, in words, or None when they can."""
    if count <= MAX_ARCHIVE_PATHS:
        return None
    return (
        f"An archive takes up to {MAX_ARCHIVE_PATHS:,} marked items ({count:,} are marked): "
        "compress their folder instead, or mark fewer."
    )


class TooManyPaths(FleetdeckError):
    """More paths than one operation can take (an archive is one operation, it is not batched)."""


UPLOAD_CHUNK = 1024 * 1024  # one WebSocket frame of a streamed upload
# Above this size an upload goes straight to the server's ingress when it has one. Below it the
# relay wins: one request to a connection already open, where direct costs a grant request, a new
# TCP connection to the agent and its fsync for the same handful of bytes.
DIRECT_THRESHOLD = 1024 * 1024
INGRESS_ANSWER_TIMEOUT_S = 600.0  # after the last byte, the agent fsyncs up to 2 GiB
UploadPath = Literal["direct", "relay", "stream"]
USER_AGENT = "fleetdeck-api-client/0.1"
# Copies and moves answer when the whole tree is done (across servers too): wait as long as the
# control plane lets the agents work (its transfer timeout, 6 h by default).
TREE_OPERATION_TIMEOUT_S = 6 * 3600.0


@functools.cache
def shared_tls() -> ssl.SSLContext:
    """One TLS context for every client of this process. httpx makes one per client by default,
    loading the CA bundle each time: some 20 ms here, paid by each client the TUI, the CLI and the
    benchmarks open (the TUI opens two before its server list)."""
    return httpx.create_ssl_context()


class Client:
    """A session with one control plane. Use as an async context manager, or call `aclose()`."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=timeout,
            transport=transport,
            verify=shared_tls(),
            headers={"User-Agent": USER_AGENT},
        )
        self.token = token
        self._timeout = timeout
        self._ingress_http: httpx.AsyncClient | None = None
        self.auth = AuthAPI(self)
        self.servers = ServersAPI(self)
        self.files = FilesAPI(self)
        self.jobs = JobsAPI(self)
        self.load_balancers = LoadBalancersAPI(self)
        self.audit = AuditAPI(self)

    @property
    def token(self) -> str | None:
        return self._token

    @token.setter
    def token(self, value: str | None) -> None:
        self._token = value
        if value is None:
            self._http.headers.pop("Authorization", None)
        else:
            self._http.headers["Authorization"] = f"Bearer {value}"

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()
        if self._ingress_http is not None:
            await self._ingress_http.aclose()

    @property
    def ingress_http(self) -> httpx.AsyncClient:
        """An HTTP client for agents' ingresses: without this client's token (the signed URL is
        the only authority a PUT there carries; the session token never leaves for a server)."""
        if self._ingress_http is None:
            self._ingress_http = httpx.AsyncClient(
                transport=ingress_transport(shared_tls()),
                timeout=httpx.Timeout(self._timeout, read=INGRESS_ANSWER_TIMEOUT_S),
                headers={"User-Agent": USER_AGENT},
            )
        return self._ingress_http

    async def health(self) -> Health:
        """`GET /v1/health`. Raises `Unavailable` while the control plane cannot serve (its 503:
        `details.part` names what is away, "database" or "bus")."""
        try:
            response = await self._http.get("/v1/health")
        except httpx.TransportError as exc:
            raise TransportError(f"cannot reach {self.base_url}: {exc}") from exc
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            body = None
        if response.status_code == Unavailable.status and isinstance(body, dict) and "database" in body:
            part = "database" if body.get("database") != "ok" else "bus"
            raise Unavailable(f"the control plane's {part} is away", details={"part": part})
        if not response.is_success:
            raise ApiError.from_body(response.status_code, body)
        if body is None:
            raise TransportError("GET /v1/health: answer is not JSON")
        return Health.model_validate(body)

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        content: bytes | AsyncIterable[bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        expect_body: bool = True,
        read_timeout: float | None = None,
    ) -> Any:
        """Send one request and return its decoded JSON body; raise the error class of its code.

        `read_timeout` replaces the client's timeout for the wait on the answer (a recursive copy
        of a big tree answers when it is done)."""
        sent_headers = dict(headers or {})
        if json is not None:
            content = orjson.dumps(json)
            sent_headers["Content-Type"] = "application/json"
        try:
            response = await self._http.request(
                method,
                path,
                params=_clean(params),
                content=content,
                headers=sent_headers,
                timeout=httpx.Timeout(self._timeout, read=read_timeout) if read_timeout else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TransportError as exc:
            raise TransportError(f"cannot reach {self.base_url}: {exc}") from exc
        body: Any = None
        if response.content:
            try:
                body = orjson.loads(response.content)
            except orjson.JSONDecodeError as exc:
                if response.is_success:
                    raise TransportError(f"{method} {path}: answer is not JSON") from exc
        if not response.is_success:
            raise ApiError.from_body(response.status_code, body)
        if expect_body and body is None:
            raise TransportError(f"{method} {path}: empty answer")
        return body

    async def stream_bytes(self, path: str, *, params: Mapping[str, Any] | None = None) -> AsyncIterator[bytes]:
        """A GET whose body is raw bytes, as they arrive; an error answer raises its class."""
        try:
            async with self._http.stream("GET", path, params=_clean(params), timeout=None) as response:
                if not response.is_success:
                    await response.aread()
                    try:
                        body = orjson.loads(response.content)
                    except orjson.JSONDecodeError:
                        body = None
                    raise ApiError.from_body(response.status_code, body)
                async for chunk in response.aiter_bytes():
                    yield chunk
        except httpx.TransportError as exc:
            raise TransportError(f"cannot reach {self.base_url}: {exc}") from exc

    def websocket(self, path: str, *, params: Mapping[str, str]) -> AbstractAsyncContextManager[AsyncWebSocketSession]:
        """A WebSocket to `path` with this client's base URL and token (httpx-ws)."""
        fastmask.install()  # a client masks every byte it sends: in C when it can be
        connect: AbstractAsyncContextManager[AsyncWebSocketSession] = aconnect_ws(path, self._http, params=params)
        return connect

    def events(
        self,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        last_event_id: str | None = None,
        final_events: frozenset[str] = frozenset(),
    ) -> EventStream:
        """An SSE stream of `path` that resumes with `Last-Event-ID` after a drop."""
        return EventStream(
            self._http,
            path,
            params={k: str(v) for k, v in _clean(params).items()},
            last_event_id=last_event_id,
            final_events=final_events,
        )


class _SubAPI:
    def __init__(self, client: Client) -> None:
        self._client = client


class AuthAPI(_SubAPI):
    async def login(self, email: str, password: str) -> LoginResponse:
        """Log in with a password; the client keeps the session token for later calls."""
        body = await self._client.request("POST", "/v1/auth/login", json={"email": email, "password": password})
        answer = LoginResponse.model_validate(body)
        self._client.token = answer.token
        return answer

    async def me(self) -> Me:
        return Me.model_validate(await self._client.request("GET", "/v1/me"))

    async def list_tokens(self) -> list[ApiToken]:
        return TokenList.model_validate(await self._client.request("GET", "/v1/tokens")).tokens

    async def create_token(self, name: str) -> ApiTokenCreated:
        """Create an API token (orgs on plan `max` only). Its secret is in the answer, once."""
        body = await self._client.request("POST", "/v1/tokens", json={"name": name})
        return ApiTokenCreated.model_validate(body)

    async def delete_token(self, token_id: str) -> None:
        await self._client.request("DELETE", f"/v1/tokens/{token_id}", expect_body=False)


class ServersAPI(_SubAPI):
    async def list(self) -> list[Server]:
        return ServerList.model_validate(await self._client.request("GET", "/v1/servers")).servers

    async def get(self, server_id: str) -> Server:
        return Server.model_validate(await self._client.request("GET", f"/v1/servers/{server_id}"))

    async def create(self, name: str, *, kind: ServerKind = "full", address: str | None = None) -> ServerCreated:
        body = await self._client.request("POST", "/v1/servers", json={"name": name, "kind": kind, "address": address})
        return ServerCreated.model_validate(body)

    async def delete(self, server_id: str) -> None:
        await self._client.request("DELETE", f"/v1/servers/{server_id}", expect_body=False)

    def presence(self, *, last_event_id: str | None = None) -> PresenceStream:
        """Agent presence changes of the org's servers as they happen (an endless stream); its
        `last_event_id` resumes a later stream where this one stopped."""
        return PresenceStream(self._client.events("/v1/servers/events", last_event_id=last_event_id))

    def events(self, *, last_event_id: str | None = None) -> ServerEventStream:
        """Presence changes and the agents' pulses (their CPU, memory and disk use every few
        seconds: first every pulse the control plane holds, then each new one) of the org's
        servers, as they happen (an endless stream); `last_event_id` as in `presence`."""
        return ServerEventStream(self._client.events("/v1/servers/events", last_event_id=last_event_id))


class ServerEventStream:
    """The `PresenceEvent`s and `PulseEvent`s of `GET /v1/servers/events`, and the id to resume
    after (pulses have none: a stream that resumes gets the pulses held again, not those missed)."""

    def __init__(self, events: EventStream) -> None:
        self._events = events

    @property
    def last_event_id(self) -> str | None:
        """The id of the last event handed over (the stream's opening `ready` counts)."""
        return self._events.last_event_id

    async def __aiter__(self) -> AsyncIterator[PresenceEvent | PulseEvent]:
        async for event in self._events:
            if event.event == "presence":
                yield PresenceEvent.model_validate(event.data)
            elif event.event == "pulse":
                yield PulseEvent.model_validate(event.data)


class PresenceStream(ServerEventStream):
    """The `PresenceEvent`s of `GET /v1/servers/events`, and the id to resume after."""

    async def __aiter__(self) -> AsyncIterator[PresenceEvent]:
        async for event in self._events:
            if event.event == "presence":
                yield PresenceEvent.model_validate(event.data)


class FilesAPI(_SubAPI):
    last_upload_via: UploadPath | None = None
    """Which path the last `upload` took: ``direct`` (the server's ingress), ``relay`` or ``stream``."""
    last_download_via: Literal["direct", "relay"] | None = None
    """Which path the last `download` took: ``direct`` (the server's ingress) or ``relay``."""

    """The file workspace of one server, jailed to a scope (`Scope(scope="site", domain=...)`)."""

    async def scopes(self, server_id: str) -> builtins.list[Scope]:
        body = await self._client.request("GET", f"/v1/servers/{server_id}/fs/scopes")
        return ScopeList.model_validate(body).scopes

    async def list(
        self, server_id: str, scope: Scope, path: str = "", *, cursor: str | None = None, limit: int | None = None
    ) -> Listing:
        """One page of a directory. Entries stay plain dicts (see `Listing`): fast for 100k names."""
        body = await self._client.request(
            "GET",
            f"/v1/servers/{server_id}/fs/list",
            params={**_scope_params(scope), "path": path, "cursor": cursor, "limit": limit},
        )
        return Listing.model_construct(
            path=body["path"], entries=body["entries"], next_cursor=body.get("next_cursor"), total=body["total"]
        )

    async def list_all(self, server_id: str, scope: Scope, path: str = "", *, page_size: int = 50000) -> Listing:
        """Every entry of a directory, following the cursor through all pages."""
        page = await self.list(server_id, scope, path, limit=page_size)
        entries = page.entries
        while page.next_cursor:
            page = await self.list(server_id, scope, path, cursor=page.next_cursor, limit=page_size)
            entries.extend(page.entries)
        return Listing.model_construct(path=page.path, entries=entries, next_cursor=None, total=len(entries))

    async def stat(self, server_id: str, scope: Scope, path: str) -> Entry:
        body = await self._client.request(
            "GET", f"/v1/servers/{server_id}/fs/stat", params={**_scope_params(scope), "path": path}
        )
        return Entry.model_validate(body)

    async def read(self, server_id: str, scope: Scope, path: str) -> FileContent:
        """A text file's content with its etag; `BinaryFile` (415) or `TooLarge` (413) otherwise."""
        body = await self._client.request(
            "GET", f"/v1/servers/{server_id}/fs/read", params={**_scope_params(scope), "path": path}
        )
        return FileContent.model_validate(body)

    async def read_window(
        self, server_id: str, scope: Scope, path: str, offset: int, length: int = WINDOW_LIMIT
    ) -> FileWindow:
        """`length` bytes (at most `WINDOW_LIMIT`) of any file from `offset`: text or binary, of
        any size; past the end the window is empty and `eof` is true."""
        params = {**_scope_params(scope), "path": path, "offset": offset, "length": length}
        return FileWindow.model_validate(await self._fs("GET", server_id, "read", params=params))

    async def write(
        self,
        server_id: str,
        scope: Scope,
        path: str,
        content: str,
        *,
        if_match: str | None = None,
        create_only: bool = False,
    ) -> FsWriteResult:
        """Save a text file atomically. With `if_match` (the etag of the read), a newer save on the
        server makes this fail with `Conflict` instead of overwriting it."""
        body = {
            **_scope_body(scope),
            "path": path,
            "content": content,
            "if_match": if_match,
            "create_only": create_only,
        }
        return FsWriteResult.model_validate(await self._fs("PUT", server_id, "write", json=body))

    async def mkdir(self, server_id: str, scope: Scope, path: str, *, parents: bool = False) -> Entry:
        body = {**_scope_body(scope), "path": path, "parents": parents}
        return FsEntryResult.model_validate(await self._fs("POST", server_id, "mkdir", json=body)).entry

    async def move(
        self,
        server_id: str,
        scope: Scope,
        paths: Sequence[str],
        destination: str,
        *,
        overwrite: bool = False,
        to: FsDestination | None = None,
        progress: BatchProgress | None = None,
        keep_going: KeepGoing | None = None,
    ) -> builtins.list[str]:
        """Move into the folder `destination`, or rename one path to `destination`; `to` names
        another scope (cross-site). Returns the new paths. Any number of paths (see `_in_batches`)."""

        async def send(batch: builtins.list[str]) -> builtins.list[str]:
            answer = await self._transfer("move", server_id, scope, batch, destination, overwrite, to)
            return FsMoveResult.model_validate(answer).moved

        return _joined(await self._in_batches(paths, send, progress, keep_going))

    async def copy(
        self,
        server_id: str,
        scope: Scope,
        paths: Sequence[str],
        destination: str,
        *,
        overwrite: bool = False,
        to: FsDestination | None = None,
        progress: BatchProgress | None = None,
        keep_going: KeepGoing | None = None,
    ) -> builtins.list[str]:
        """Copy like `move` moves (recursively, links copied as links). Returns the new paths."""

        async def send(batch: builtins.list[str]) -> builtins.list[str]:
            answer = await self._transfer("copy", server_id, scope, batch, destination, overwrite, to)
            return FsCopyResult.model_validate(answer).copied

        return _joined(await self._in_batches(paths, send, progress, keep_going))

    async def _transfer(
        self,
        route: str,
        server_id: str,
        scope: Scope,
        paths: Sequence[str],
        destination: str,
        overwrite: bool,
        to: FsDestination | None,
    ) -> Any:
        body = {**_scope_body(scope), "paths": list(paths), "destination": destination, "overwrite": overwrite}
        if to is not None:
            body["to"] = to.model_dump(exclude_none=True)
        return await self._fs("POST", server_id, route, json=body, read_timeout=TREE_OPERATION_TIMEOUT_S)

    async def delete(
        self,
        server_id: str,
        scope: Scope,
        paths: Sequence[str],
        *,
        permanent: bool = False,
        progress: BatchProgress | None = None,
        keep_going: KeepGoing | None = None,
    ) -> builtins.list[TrashItem] | builtins.list[str]:
        """To the scope's trash (restorable), or gone for good with `permanent`."""

        async def send(batch: builtins.list[str]) -> builtins.list[TrashItem] | builtins.list[str]:
            body = {**_scope_body(scope), "paths": batch, "permanent": permanent}
            answer = await self._fs("POST", server_id, "delete", json=body, read_timeout=TREE_OPERATION_TIMEOUT_S)
            result = _DELETE_RESULT.validate_python(answer)
            return result.deleted if isinstance(result, FsDeleted) else result.trashed

        # Every batch answers the same way: all trashed, or all deleted.
        items: builtins.list[Any] = [
            item for batch in await self._in_batches(paths, send, progress, keep_going) for item in batch
        ]
        return items

    async def chmod(
        self,
        server_id: str,
        scope: Scope,
        paths: Sequence[str],
        mode: int | str,
        *,
        recursive: bool = False,
        only: Literal["files", "dirs"] | None = None,
        progress: BatchProgress | None = None,
        keep_going: KeepGoing | None = None,
    ) -> int:
        """Returns how many paths changed (all batches together)."""

        async def send(batch: builtins.list[str]) -> int:
            body = {**_scope_body(scope), "paths": batch, "mode": mode, "recursive": recursive, "only": only}
            answer = await self._fs("POST", server_id, "chmod", json=body, read_timeout=TREE_OPERATION_TIMEOUT_S)
            return FsChmodResult.model_validate(answer).changed

        return sum(await self._in_batches(paths, send, progress, keep_going))

    async def _in_batches(
        self,
        paths: Sequence[str],
        send: Callable[[builtins.list[str]], Awaitable[R]],
        progress: BatchProgress | None,
        keep_going: KeepGoing | None,
    ) -> builtins.list[R]:
        """`send` each batch of `PATHS_PER_BATCH` paths in turn, one answer per batch.

        When a batch fails after others were done, or `keep_going` says stop, `BatchInterrupted`
        says how many were done; a failure of the first batch is raised as it is (nothing done).
        """
        total, answers = len(paths), []
        for start in range(0, max(total, 1), PATHS_PER_BATCH):
            if start and keep_going is not None and not keep_going():
                raise BatchInterrupted(start, total, None)
            batch = list(paths[start : start + PATHS_PER_BATCH])
            try:
                answers.append(await send(batch))
            except FleetdeckError as exc:
                if not start:
                    raise
                raise BatchInterrupted(start, total, exc) from exc
            if progress is not None:
                progress(start + len(batch), total)
        return answers

    async def dirsize(self, server_id: str, scope: Scope, path: str) -> FsDirSize:
        """The total size of a folder (bytes, files, folders), walked on the server."""
        answer = await self._fs("GET", server_id, "dirsize", params={**_scope_params(scope), "path": path})
        return FsDirSize.model_validate(answer)

    async def search(
        self, server_id: str, scope: Scope, path: str, query: str, *, content: bool = False, limit: int = 500
    ) -> FsSearchResult:
        """Names containing `query` under `path`, or with `content` the matching lines of text files;
        `truncated` says the `limit` cut the answer short."""
        params = {**_scope_params(scope), "path": path, "query": query, "content": content, "limit": limit}
        read_timeout = TREE_OPERATION_TIMEOUT_S if content else None  # it reads every file, of any size
        answer = await self._fs("GET", server_id, "search", params=params, read_timeout=read_timeout)
        return FsSearchResult.model_validate(answer)

    async def find(
        self,
        server_id: str,
        scope: Scope,
        path: str,
        *,
        query: str | None = None,
        line: int | None = None,
        offset: int = 0,
        backward: bool = False,
        case_sensitive: bool = False,
    ) -> FsFound:
        """In one file of any size, searched on its server: the first match of `query` at or after
        `offset` (`backward`: the last one starting before it), case-insensitive unless
        `case_sensitive`; or, given `line` instead, where that line starts (the last line's
        start when the file has fewer). `offset` and `line` of the answer are None when nothing
        matches.

        Raises:
            ValidationFailed: neither or both of `query` and `line`; not a regular file.
        """
        params: dict[str, Any] = {**_scope_params(scope), "path": path, "offset": offset}
        if query is not None:
            params.update(query=query, backward=backward, case_sensitive=case_sensitive)
        if line is not None:
            params["line"] = line
        answer = await self._fs("GET", server_id, "find", params=params, read_timeout=TREE_OPERATION_TIMEOUT_S)
        return FsFound.model_validate(answer)

    async def trash(self, server_id: str, scope: Scope) -> tuple[builtins.list[TrashItem], int]:
        """The scope's trash, and how many items older than 30 days opening it purged."""
        answer = FsTrashList.model_validate(await self._fs("GET", server_id, "trash", params=_scope_params(scope)))
        return answer.items, answer.purged

    async def restore(
        self, server_id: str, scope: Scope, ids: Sequence[str], *, overwrite: bool = False
    ) -> builtins.list[str]:
        body = {**_scope_body(scope), "ids": list(ids), "overwrite": overwrite}
        return FsRestoreResult.model_validate(await self._fs("POST", server_id, "trash/restore", json=body)).restored

    async def empty_trash(self, server_id: str, scope: Scope) -> int:
        answer = await self._fs("POST", server_id, "trash/empty", json=_scope_body(scope))
        return FsEmptyTrashResult.model_validate(answer).removed

    async def compress(
        self, server_id: str, scope: Scope, paths: Sequence[str], destination: str, *, format: Literal["zip", "tar.gz"]
    ) -> str:
        """Start compressing; returns the operation id to follow with `operation()`. One archive
        is one operation: up to `MAX_ARCHIVE_PATHS` paths (a folder counts as one)."""
        problem = archive_paths_problem(len(paths))
        if problem:
            raise TooManyPaths(problem)
        body = {**_scope_body(scope), "paths": list(paths), "format": format, "destination": destination}
        return OperationStarted.model_validate(await self._fs("POST", server_id, "compress", json=body)).operation_id

    async def extract(
        self, server_id: str, scope: Scope, path: str, destination: str, *, on_conflict: ExtractConflicts = "refuse"
    ) -> str:
        """Start extracting; `on_conflict` says what a path the archive finds taken gets (see
        `extract_check`, which lists them first)."""
        body = {**_scope_body(scope), "path": path, "destination": destination, "on_conflict": on_conflict}
        return OperationStarted.model_validate(await self._fs("POST", server_id, "extract", json=body)).operation_id

    async def extract_check(self, server_id: str, scope: Scope, path: str, destination: str) -> FsExtractCheck:
        """The archive's top-level names and the paths an extraction into `destination` would
        find taken; nothing is written."""
        params = {**_scope_params(scope), "path": path, "destination": destination}
        return FsExtractCheck.model_validate(await self._fs("GET", server_id, "extract/check", params=params))

    def operation(self, server_id: str, operation_id: str) -> EventStream:
        """`progress` events, then `done` (data: `{"result"}`) or `error` (`{"code", "message"}`)."""
        return self._client.events(
            f"/v1/servers/{server_id}/fs/operations/{operation_id}/stream",
            final_events=frozenset({"done", "error"}),
        )

    async def cancel_operation(self, server_id: str, operation_id: str) -> None:
        await self._client.request("DELETE", f"/v1/servers/{server_id}/fs/operations/{operation_id}", expect_body=False)

    async def upload(
        self,
        server_id: str,
        scope: Scope,
        path: str,
        data: bytes | AsyncIterable[bytes],
        *,
        size: int | None = None,
        overwrite: bool = False,
    ) -> Entry:
        """Upload bytes to `path`. The agent keeps them in a temporary file until the last byte has
        arrived, so an interrupted upload leaves nothing at `path`.

        The path is picked by size: above 1 MiB and up to 2 GiB straight to the server's ingress
        when it has one (the control plane signs a one-time URL and never sees the bytes), else
        the relay up to 64 MiB, else the WebSocket stream. `last_upload_via` tells which."""
        if isinstance(data, bytes):
            size = len(data)
        params = {**_scope_params(scope), "path": path, "overwrite": overwrite}
        if size is not None and DIRECT_THRESHOLD < size <= DIRECT_UPLOAD_LIMIT:
            grant = await self.direct_url(server_id, scope, path, size, overwrite=overwrite)
            if grant.url is not None:
                entry = await self._upload_direct(grant.url, data, size)
                if entry is not None:
                    self.last_upload_via = "direct"
                    return entry
        if size is None or size > RELAY_UPLOAD_LIMIT:
            self.last_upload_via = "stream"
            return await self._upload_stream(server_id, params, data, size)
        self.last_upload_via = "relay"
        body = await self._client.request(
            "PUT",
            f"/v1/servers/{server_id}/fs/upload",
            params=params,
            content=data,
            headers={"Content-Length": str(size)} if size is not None and not isinstance(data, bytes) else None,
        )
        return FsEntryResult.model_validate(body).entry

    async def direct_url(
        self, server_id: str, scope: Scope, path: str, size: int, *, overwrite: bool = False
    ) -> DirectUpload:
        """A signed one-time URL on the server's ingress for `size` bytes, or ``url: None``."""
        body = {**_scope_body(scope), "path": path, "size": size, "overwrite": overwrite}
        return DirectUpload.model_validate(await self._fs("POST", server_id, "upload/direct", json=body))

    async def _upload_direct(self, url: str, data: bytes | AsyncIterable[bytes], size: int) -> Entry | None:
        """PUT to a signed ingress URL. None when the ingress cannot be reached at all (nothing
        was sent, so the caller falls back to the control plane)."""
        try:
            response = await self._client.ingress_http.put(
                url, content=data, headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"}
            )
        except (httpx.ConnectError, httpx.ConnectTimeout):
            return None
        except httpx.TransportError as exc:
            raise TransportError(f"direct upload lost: {exc}") from exc
        body = _ingress_body(response)
        if not response.is_success:
            raise ApiError.from_body(response.status_code, body)
        return FsEntryResult.model_validate(body).entry

    async def _upload_stream(
        self, server_id: str, params: dict[str, Any], data: bytes | AsyncIterable[bytes], size: int | None
    ) -> Entry:
        """Large uploads go over a WebSocket, in binary frames, with no size limit of the relay."""
        if size is None:
            raise ValueError("a streamed upload needs its size up front")
        query = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in _clean(params).items()}
        try:
            path = f"/v1/servers/{server_id}/fs/upload/stream"
            async with self._client.websocket(path, params={**query, "size": str(size)}) as socket:
                async for chunk in _chunks(data, UPLOAD_CHUNK):
                    await socket.send_bytes(cast(bytes, chunk))  # wsproto frames any buffer
                await socket.send_text('{"done": true}')
                answer = orjson.loads(await socket.receive_text())
        except (httpx.TransportError, WebSocketDisconnect, WebSocketNetworkError) as exc:
            raise TransportError(f"upload stream lost: {exc}") from exc
        if "error" in answer:
            said = answer["error"].get("code") if isinstance(answer["error"], dict) else None
            klass = ApiError.for_code(said) if isinstance(said, str) else ApiError
            raise ApiError.from_body(klass.status if klass is not ApiError else 400, answer)
        return FsEntryResult.model_validate(answer).entry

    async def download(self, server_id: str, scope: Scope, path: str, *, direct: bool = True) -> AsyncIterator[bytes]:
        """The file's bytes as they arrive (no size limit, little memory).

        With `direct` (the default), straight from the server's ingress when it has one (the
        control plane signs a one-time URL and never sees the bytes, the agent sends them with
        `sendfile`), else through the control plane. `last_download_via` tells which."""
        params = {**_scope_params(scope), "path": path}
        if direct:
            grant = await self.direct_download_url(server_id, scope, path)
            if grant.url is not None:
                async with aclosing(self._download_direct(grant.url)) as chunks:
                    if await anext(chunks, None) is not None:  # None: the ingress could not be reached
                        self.last_download_via = "direct"
                        async for chunk in chunks:
                            yield chunk
                        return
        self.last_download_via = "relay"
        async for chunk in self._client.stream_bytes(f"/v1/servers/{server_id}/fs/download", params=params):
            yield chunk

    async def direct_download_url(self, server_id: str, scope: Scope, path: str) -> DirectDownload:
        """A signed one-time URL on the server's ingress for the file at `path`, or ``url: None``."""
        params = {**_scope_params(scope), "path": path}
        return DirectDownload.model_validate(await self._fs("POST", server_id, "download/direct", params=params))

    async def _download_direct(self, url: str) -> AsyncGenerator[bytes, None]:
        """GET a signed ingress URL: first an empty chunk once the answer is a 200 (nothing at all
        when the ingress cannot be reached: the caller falls back), then the bytes. A body cut
        short of its `Content-Length` raises `TransportError`, never ends quietly."""
        try:
            async with self._client.ingress_http.stream("GET", url) as response:
                if not response.is_success:
                    await response.aread()
                    raise ApiError.from_body(response.status_code, _ingress_body(response))
                yield b""
                async for chunk in response.aiter_raw():
                    yield chunk
        except (httpx.ConnectError, httpx.ConnectTimeout):
            return
        except httpx.TransportError as exc:
            raise TransportError(f"direct download lost: {exc}") from exc

    async def _fs(
        self,
        method: str,
        server_id: str,
        route: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        read_timeout: float | None = None,
    ) -> Any:
        return await self._client.request(
            method, f"/v1/servers/{server_id}/fs/{route}", params=params, json=json, read_timeout=read_timeout
        )


class JobsAPI(_SubAPI):
    """Whitelisted jobs: `<domain>.<action>` kinds with a schema each, streamed as they run."""

    async def kinds(self) -> builtins.list[JobKindInfo]:
        return JobKindList.model_validate(await self._client.request("GET", "/v1/job-kinds")).kinds

    async def create(
        self,
        server_id: str,
        kind: str,
        args: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        lookup: bool = False,
    ) -> Job:
        """Start a job. With `idempotency_key`, a retry returns the first job instead of a second one;
        `lookup`: a read run for the client itself (a form's choices), kept out of the job history."""
        body = await self._client.request(
            "POST",
            f"/v1/servers/{server_id}/jobs",
            json={"kind": kind, "args": dict(args or {}), "lookup": lookup},
            headers={"Idempotency-Key": idempotency_key} if idempotency_key else None,
        )
        return Job.model_validate(body)

    async def list(self, server_id: str, *, limit: int = 50, lookups: bool = False) -> builtins.list[Job]:
        """The server's newest jobs; look-ups too if `lookups`."""
        params: dict[str, Any] = {"limit": limit, "lookups": "true"} if lookups else {"limit": limit}
        body = await self._client.request("GET", f"/v1/servers/{server_id}/jobs", params=params)
        return JobList.model_validate(body).jobs

    async def get(self, job_id: str) -> Job:
        return Job.model_validate(await self._client.request("GET", f"/v1/jobs/{job_id}"))

    async def cancel(self, job_id: str) -> Job:
        """Stop a job: a queued one never runs; a running one's process group gets TERM, then
        KILL, and the job ends `cancelled` (follow its stream for that). `NotRunning` once it ended."""
        return Job.model_validate(await self._client.request("POST", f"/v1/jobs/{job_id}/cancel"))

    def stream(self, job_id: str, *, last_event_id: str | None = None) -> EventStream:
        """The job's events: `line` (data: a `JobLine` dict) as they come, then one `exit` (`JobExit`).

        A finished job replays its lines. The stream resumes after a dropped connection.
        """
        return self._client.events(
            f"/v1/jobs/{job_id}/stream", last_event_id=last_event_id, final_events=frozenset({"exit"})
        )


def _over(body: dict[str, Any], if_revision: int | None) -> dict[str, Any]:
    """A load balancer's change, made over `if_revision` when it is given."""
    return body if if_revision is None else {**body, "if_revision": if_revision}


class LoadBalancersAPI(_SubAPI):
    """The org's load balancers (CONTRACT.md § B). Every mutation answers at once with the state
    `pending_apply`; the node applies it (`lb.apply`) and the state becomes `active` or `degraded`."""

    async def list(self) -> LoadBalancerList:
        """Every load balancer of the org, with the summary strip's figures."""
        return LoadBalancerList.model_validate(await self._client.request("GET", "/v1/load-balancers"))

    async def get(self, lb_id: str) -> LoadBalancer:
        return LoadBalancer.model_validate(await self._client.request("GET", f"/v1/load-balancers/{lb_id}"))

    async def create(self, spec: LoadBalancerCreate) -> LoadBalancer:
        body = await self._client.request("POST", "/v1/load-balancers", json=spec.model_dump(mode="json"))
        return LoadBalancer.model_validate(body)

    async def update(self, lb_id: str, patch: LoadBalancerPatch, *, if_revision: int | None = None) -> LoadBalancer:
        """Change the fields set in `patch`.

        Args:
            if_revision: the revision the change was made over (the one read): a definition
                changed since is not overwritten.

        Raises:
            Conflict: the load balancer is no longer at `if_revision` (`details["revision"]`: the
                one it is at); nothing was changed.
        """
        body = await self._client.request(
            "PATCH",
            f"/v1/load-balancers/{lb_id}",
            json=_over(patch.model_dump(mode="json", exclude_unset=True), if_revision),
        )
        return LoadBalancer.model_validate(body)

    async def delete(self, lb_id: str) -> None:
        await self._client.request("DELETE", f"/v1/load-balancers/{lb_id}", expect_body=False)

    async def add_backend(self, lb_id: str, backend: BackendCreate, *, if_revision: int | None = None) -> Backend:
        """Add a backend to the pool; `if_revision` and `Conflict` as in `update`."""
        body = await self._client.request(
            "POST", f"/v1/load-balancers/{lb_id}/backends", json=_over(backend.model_dump(mode="json"), if_revision)
        )
        return Backend.model_validate(body)

    async def update_backend(
        self, lb_id: str, backend_id: str, patch: BackendPatch, *, if_revision: int | None = None
    ) -> Backend:
        """Drain, reweight or move a backend; `if_revision` and `Conflict` as in `update` (a
        backend removed since that revision is a `Conflict` too)."""
        body = await self._client.request(
            "PATCH",
            f"/v1/load-balancers/{lb_id}/backends/{backend_id}",
            json=_over(patch.model_dump(mode="json", exclude_unset=True), if_revision),
        )
        return Backend.model_validate(body)

    async def remove_backend(self, lb_id: str, backend_id: str, *, if_revision: int | None = None) -> None:
        """Take a backend out of the pool; `if_revision` and `Conflict` as in `update`."""
        await self._client.request(
            "DELETE",
            f"/v1/load-balancers/{lb_id}/backends/{backend_id}",
            params={"if_revision": if_revision},
            expect_body=False,
        )

    async def apply(self, lb_id: str) -> str:
        """Dispatch `lb.apply` again with the current definition; the id of its job."""
        body = await self._client.request("POST", f"/v1/load-balancers/{lb_id}/apply")
        return ApplyStarted.model_validate(body).job_id


class AuditAPI(_SubAPI):
    """The org's audit log (owners and admins; a member gets `Forbidden`), newest first."""

    async def list(
        self,
        *,
        server_id: str | None = None,
        action: str | None = None,
        actor: str | None = None,
        outcome: Literal["ok", "error"] | None = None,
        text: str | None = None,
        limit: int = 100,
        before: str | None = None,
    ) -> builtins.list[AuditEntry]:
        """Up to `limit` entries matching every filter given; `before` (an entry's id) pages to
        older ones. `actor` is an email or a user id; `text` is searched for in the action,
        target, actor's email and error code."""
        params = {"server_id": server_id, "action": action, "actor": actor, "outcome": outcome, "q": text}
        body = await self._client.request("GET", "/v1/audit", params={**params, "limit": limit, "before": before})
        return AuditList.model_validate(body).entries


def _ingress_body(response: httpx.Response) -> Any:
    """What an agent's ingress answered (an entry, or the contract's error body), read in full."""
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError as exc:
        raise TransportError(f"the server's ingress answered {response.status_code}, not JSON") from exc


async def _chunks(data: bytes | AsyncIterable[bytes], size: int) -> AsyncIterator[bytes | memoryview]:
    if isinstance(data, bytes):
        view = memoryview(data)  # slices of a view copy nothing: a slice of bytes copies it
        for start in range(0, len(data), size):
            yield view[start : start + size]
    else:
        async for chunk in data:
            yield chunk


def _joined(batches: builtins.list[builtins.list[R]]) -> builtins.list[R]:
    return [item for batch in batches for item in batch]


def _scope_body(scope: Scope) -> dict[str, Any]:
    return {"scope": scope.scope, "domain": scope.domain}


def _scope_params(scope: Scope) -> dict[str, Any]:
    return {"scope": scope.scope, "domain": scope.domain}


def _clean(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Drop unset query parameters so the server sees only what the caller gave."""
    return {k: v for k, v in (params or {}).items() if v is not None}
