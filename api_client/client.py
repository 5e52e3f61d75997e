"""The typed async client of the `/v1` API.

    async with Client("http://127.0.0.1:8080") as client:
        await client.auth.login("owner@example.com", "secret")
        for server in await client.servers.list():
            listing = await client.files.list(server.id, Scope(scope="root"), "")

It runs on trio (and on asyncio): httpx picks the running event loop. Every error answer is raised
as the `api_client.errors` class of its code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx
import orjson
from pydantic import BaseModel

from .errors import ApiError, TransportError
from .models import (
    ApiToken,
    ApiTokenCreated,
    Entry,
    FileContent,
    Health,
    Job,
    JobKindInfo,
    JobKindList,
    JobList,
    Listing,
    LoginResponse,
    Me,
    PresenceEvent,
    Scope,
    ScopeList,
    Server,
    ServerCreated,
    ServerKind,
    ServerList,
    TokenList,
)
from .sse import EventStream

M = TypeVar("M", bound=BaseModel)

USER_AGENT = "fleetdeck-api-client/0.1"


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
            headers={"User-Agent": USER_AGENT},
        )
        self.token = token
        self.auth = AuthAPI(self)
        self.servers = ServersAPI(self)
        self.files = FilesAPI(self)
        self.jobs = JobsAPI(self)

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

    async def health(self) -> Health:
        return Health.model_validate(await self.request("GET", "/v1/health"))

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        expect_body: bool = True,
    ) -> Any:
        """Send one request and return its decoded JSON body; raise the error class of its code."""
        content = orjson.dumps(json) if json is not None else None
        headers = {"Content-Type": "application/json"} if content is not None else None
        try:
            response = await self._http.request(method, path, params=_clean(params), content=content, headers=headers)
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

    async def presence(self, *, last_event_id: str | None = None) -> AsyncIterator[PresenceEvent]:
        """Agent presence changes of the org's servers as they happen (an endless stream)."""
        async for event in self._client.events("/v1/servers/events", last_event_id=last_event_id):
            if event.event == "presence":
                yield PresenceEvent.model_validate(event.data)


class FilesAPI(_SubAPI):
    """The file workspace of one server, jailed to a scope (`Scope(scope="site", domain=...)`)."""

    async def scopes(self, server_id: str) -> list[Scope]:
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


class JobsAPI(_SubAPI):
    """Whitelisted jobs: `<domain>.<action>` kinds with a schema each, streamed as they run."""

    async def kinds(self) -> list[JobKindInfo]:
        return JobKindList.model_validate(await self._client.request("GET", "/v1/job-kinds")).kinds

    async def create(
        self, server_id: str, kind: str, args: Mapping[str, Any] | None = None, *, idempotency_key: str | None = None
    ) -> Job:
        """Start a job. With `idempotency_key`, a retry returns the first job instead of a second one."""
        body = await self._client.request(
            "POST",
            f"/v1/servers/{server_id}/jobs",
            json={"kind": kind, "args": dict(args or {})},
            headers={"Idempotency-Key": idempotency_key} if idempotency_key else None,
        )
        return Job.model_validate(body)

    async def list(self, server_id: str, *, limit: int = 50) -> list[Job]:
        body = await self._client.request("GET", f"/v1/servers/{server_id}/jobs", params={"limit": limit})
        return JobList.model_validate(body).jobs

    async def get(self, job_id: str) -> Job:
        return Job.model_validate(await self._client.request("GET", f"/v1/jobs/{job_id}"))

    def stream(self, job_id: str, *, last_event_id: str | None = None) -> EventStream:
        """The job's events: `line` (data: a `JobLine` dict) as they come, then one `exit` (`JobExit`).

        A finished job replays its lines. The stream resumes after a dropped connection.
        """
        return self._client.events(
            f"/v1/jobs/{job_id}/stream", last_event_id=last_event_id, final_events=frozenset({"exit"})
        )


def _scope_params(scope: Scope) -> dict[str, Any]:
    return {"scope": scope.scope, "domain": scope.domain}


def _clean(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Drop unset query parameters so the server sees only what the caller gave."""
    return {k: v for k, v in (params or {}).items() if v is not None}
