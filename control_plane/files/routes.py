"""The file workspace routes. The control plane stores no file content: it checks who may do what
in which scope, relays the call to the server's agent (which jails every path), and audits writes."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar, cast, get_args
from urllib.parse import quote

import anyio
import orjson
from fastapi import APIRouter, Depends, Query, Request, Response, WebSocket
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import ClientDisconnect
from starlette.responses import StreamingResponse
from starlette.types import Message

from contract.errors import (
    AgentError,
    AgentOffline,
    ApiError,
    BadRequest,
    Forbidden,
    LiteServer,
    NotFound,
    Timeout,
    TooLarge,
    ValidationFailed,
)
from contract.link.params import MAX_FIND_QUERY
from contract.models import (
    DIRECT_UPLOAD_LIMIT,
    FS_WRITE_BODY_LIMIT,
    LOGS_READ_ONLY,
    MAX_INTEGER,
    PATH_LIST_BODY_LIMIT,
    RELAY_UPLOAD_LIMIT,
    TRASH_FOLDER,
    WINDOW_LIMIT,
    DirectDownload,
    DirectUpload,
    Entry,
    FileContent,
    FileWindow,
    FsArchive,
    FsChmod,
    FsChmodResult,
    FsCopyResult,
    FsDelete,
    FsDeleteResult,
    FsDestination,
    FsDirSize,
    FsEmptyTrashResult,
    FsEntryResult,
    FsExtract,
    FsExtractCheck,
    FsFound,
    FsMkdir,
    FsMoveCopy,
    FsMoveResult,
    FsRequest,
    FsRestoreResult,
    FsSearchResult,
    FsTrashList,
    FsTrashRestore,
    FsUploadDirect,
    FsWrite,
    FsWriteResult,
    Label,
    Listing,
    ListingPage,
    OperationStarted,
    Scope,
    ScopeList,
    ScopeName,
)
from control_plane import sse
from control_plane.auth.principal import Principal
from control_plane.errors import ResponseCut, error_response
from control_plane.files import remote_copy
from control_plane.files.operations import Operation
from control_plane.frontdoor import BODY_IDLE_TIMEOUT_S, body_limit, refusal
from control_plane.hub import AgentSession, ReplyStream
from control_plane.servers.routes import server_row
from control_plane.state import Caller, Fleet, FleetDep, agent_errors, authenticate

router = APIRouter(prefix="/v1/servers/{server_id}/fs", tags=["files"])
log = logging.getLogger("fleetdeck.files")

MAX_LIST_LIMIT = 50000
# The largest listing page an agent may send (50,000 entries with long names and paths).
MAX_LISTING_BYTES = 128 * 1024 * 1024
# A listing page as the agent encoded it, checked before it is passed on.
_LISTING_PAGE: TypeAdapter[ListingPage] = TypeAdapter(ListingPage)


@dataclass(frozen=True)
class FsTarget:
    """A checked (server, scope) pair: the server is the caller's, full, and the scope allowed."""

    server_id: str
    scope: str
    domain: str | None

    def params(self, **extra: Any) -> dict[str, Any]:
        return {"scope": self.scope, "domain": self.domain, **extra}


async def _full_server(fleet: Fleet, caller: Principal, server_id: str) -> None:
    row = await server_row(fleet, caller.org_id, server_id)
    if row["kind"] != "full":
        raise LiteServer("this is a lite server: it has no agent to run file operations")


SCOPES: tuple[str, ...] = get_args(ScopeName)


async def resolve_target(
    fleet: Fleet,
    caller: Principal,
    server_id: str,
    scope: str,
    domain: str | None,
    *,
    write: bool = False,
    given_in: str = "query",
) -> FsTarget:
    """Check the server and the scope for this caller: site reads for any member, site writes
    for operators and above, a site's logs for whoever may read the site and never written,
    the server-root scope for owners and super-admins. `given_in` is where the request named
    them (``query`` or ``body``), for the error's location."""
    await _full_server(fleet, caller, server_id)
    if scope not in SCOPES:
        raise BadRequest(f"unknown scope {scope!r}: use site, logs or root", details={"allowed": list(SCOPES)})
    if scope in ("site", "logs"):
        if not domain:
            raise ValidationFailed(
                f"scope={scope} needs a domain", details={"errors": [{"loc": [given_in, "domain"], "msg": "required"}]}
            )
        if scope == "logs" and write:
            raise Forbidden(LOGS_READ_ONLY, details={"scope": "logs"})
        caller.require("file_write" if write else "observe")
    else:
        caller.require("root_scope")
        domain = None
    return FsTarget(server_id, scope, domain)


@dataclass(frozen=True)
class _TargetInQuery:
    """The dependency of the routes that name their target in the query (`scope`, `domain`):
    the checked `FsTarget`, for a read or (`write`) a write."""

    write: bool = False

    async def __call__(
        self, server_id: str, caller: Caller, fleet: FleetDep, scope: str = "site", domain: str | None = None
    ) -> FsTarget:
        return await resolve_target(fleet, caller, server_id, scope, domain, write=self.write)


_READ_TARGET, _WRITE_TARGET = _TargetInQuery(), _TargetInQuery(write=True)
ReadTarget = Annotated[FsTarget, Depends(_READ_TARGET)]
WriteTarget = Annotated[FsTarget, Depends(_WRITE_TARGET)]

Body = TypeVar("Body", bound=FsRequest)


@dataclass(frozen=True)
class InBody(Generic[Body]):
    """A write's JSON body and the checked `FsTarget` it names (its `scope` and `domain`)."""

    body: Body
    target: FsTarget


def target_in_body(model: type[Body]) -> Any:
    """The dependency of the routes that name their target in their JSON body, a `model`: the
    body, validated once, and its target checked for a write by `resolve_target` (as
    `_TargetInQuery` does for the query's)."""

    async def in_body(server_id: str, body: FsRequest, caller: Caller, fleet: FleetDep) -> InBody[Body]:
        target = await resolve_target(fleet, caller, server_id, body.scope, body.domain, write=True, given_in="body")
        return InBody(cast(Body, body), target)

    in_body.__annotations__ = {**in_body.__annotations__, "body": model}  # what FastAPI reads the body as
    return Depends(in_body)


_DELETE_RESULT: TypeAdapter[FsDeleteResult] = TypeAdapter(FsDeleteResult)


def _checked(shape: type[BaseModel] | TypeAdapter[Any], answer: Any, method: str, server_id: str) -> Response:
    """The agent's answer validated through its wire model, then sent as that model says (an
    answer of another shape, or with a value the model refuses, is the agent's fault: 502, never
    passed on)."""
    model = _model(shape, answer, method, server_id)
    return Response(model.model_dump_json(), media_type="application/json")


def _model(shape: type[BaseModel] | TypeAdapter[Any], answer: Any, method: str, server_id: str) -> Any:
    """The agent's answer as `shape`, strictly: as JSON (as it came over the link), so a time is
    its RFC 3339 text but a number is never a string."""
    try:
        data = orjson.dumps(answer)
    except orjson.JSONEncodeError:  # a whole number past 64 bits
        problem = f"agent error: {method} answered a number the API refuses"
        raise AgentError(problem, details={"method": method}) from None
    try:
        if isinstance(shape, TypeAdapter):
            return shape.validate_json(data, strict=True)
        return shape.model_validate_json(data, strict=True)
    except ValidationError as exc:
        raise _refused(exc, method, server_id) from exc


def _refused(exc: ValidationError, method: str, server_id: str) -> AgentError:
    """The 502 of an agent answer its wire model refuses, naming where (never the value: it may be
    anything, escape sequences included); logged here, once."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "the answer"
    log.warning("server %s: %s answered a value its model refuses, at %s: %s", server_id, method, where, first["msg"])
    return AgentError(
        f"agent error: {method} answered a value the API refuses, at {where}: {first['msg']}",
        details={"method": method, "at": where},
    )


async def _checked_listing(data: bytes, method: str, server_id: str) -> None:
    """A listing page as the agent encoded it, checked entry by entry (`ListingPage`) in a worker
    thread: 50,000 entries take tens of milliseconds, which the event loop must not wait."""
    try:
        await anyio.to_thread.run_sync(_LISTING_PAGE.validate_json, data)
    except ValidationError as exc:
        raise _refused(exc, method, server_id) from exc


class _Site(BaseModel):
    domain: Label
    slug: Label


class _AgentSites(BaseModel):
    """`fs.scopes` as the agent answers it (`logs`: the sites whose log folder it has)."""

    sites: list[_Site]
    logs: list[Label] = []


@router.get("/scopes", response_model=ScopeList)
async def scopes(server_id: str, caller: Caller, fleet: FleetDep) -> ScopeList:
    await _full_server(fleet, caller, server_id)
    caller.require("observe")
    answer = _model(_AgentSites, await fleet.call_agent(server_id, "fs.scopes", {}), "fs.scopes", server_id)
    with_logs = set(answer.logs)  # an agent that does not send it has no logs scope
    listed: list[Scope] = []
    for site in answer.sites:
        listed.append(Scope(scope="site", domain=site.domain, slug=site.slug))
        if site.domain in with_logs:
            listed.append(Scope(scope="logs", domain=site.domain, slug=site.slug))
    if "root_scope" in caller.capabilities:
        listed.append(Scope(scope="root"))
    return ScopeList(scopes=listed)


@router.get("/list", response_model=Listing)
async def list_dir(
    target: ReadTarget,
    fleet: FleetDep,
    path: str = "",
    cursor: str | None = None,
    limit: int = Query(5000, ge=1, le=MAX_LIST_LIMIT),
) -> Response:
    server_id = target.server_id
    params = target.params(path=path, cursor=cursor, limit=limit, encoded=True)
    time_limit = fleet.settings.agent_call_timeout_s
    head, stream, stack = await _open_agent_stream(fleet, server_id, "fs.list", params, time_limit=time_limit)
    if head is None:  # an agent that answers with the page itself
        data = orjson.dumps(stream.result)
    else:
        data = await _whole(stream, stack, head.get("size"), MAX_LISTING_BYTES, "fs.list")
    # Checked before a byte is passed on, then passed on as the agent encoded it (never re-encoded).
    await _checked_listing(data, "fs.list", server_id)
    return Response(data, media_type="application/json")


async def _open_agent_stream(
    fleet: Fleet, server_id: str, method: str, params: dict[str, Any], *, time_limit: float | None = None
) -> tuple[dict[str, Any] | None, ReplyStream, AsyncExitStack]:
    """A streamed agent call up to its first items message (its head: the agent has done the
    part that can fail, so its errors are still the contract's errors of this request).

    Returns the head's first item, or None when the call ended without one (its result is then
    `stream.result`, and the call is over). Otherwise the caller owns `stack`: closing it ends
    the call, cancelling it on the agent if its bytes were not all read.
    """
    stack = AsyncExitStack()
    try:
        stream = await stack.enter_async_context(fleet.agent_stream(server_id, method, params, time_limit=time_limit))
        with agent_errors():
            first = await anext(stream, None)
    except BaseException:
        await stack.aclose()
        raise
    if first is None:
        await stack.aclose()
        return None, stream, stack
    if not isinstance(first, list) or not first or not isinstance(first[0], dict):
        await stack.aclose()
        raise AgentError(f"agent error: {method} answered without a head")
    return first[0], stream, stack


def _declared_size(size: Any, limit: int, method: str) -> int:
    """The byte count a streamed answer's head announces: a whole number up to `limit`."""
    if type(size) is not int or not 0 <= size <= limit:
        raise AgentError(f"agent error: {method} announced a size the API refuses", details={"method": method})
    return size


async def _whole(stream: ReplyStream, stack: AsyncExitStack, announced: Any, limit: int, method: str) -> bytes:
    """All the bytes of a streamed agent call whose head `announced` their count (up to `limit`;
    more than announced is refused). Closes the call."""
    data = bytearray()
    async with stack:
        size = _declared_size(announced, limit, method)
        async for chunk in stream:
            if isinstance(chunk, bytes):
                data += chunk
                if len(data) > size:
                    raise AgentError("agent error: the answer is longer than it announced")
    return bytes(data)


async def _bytes_of(stream: ReplyStream, stack: AsyncExitStack) -> AsyncIterator[bytes]:
    """The binary frames of a streamed agent call, as they come (credit goes back as they are
    taken, so a slow HTTP client slows the agent down); closes the call at the end. The answer
    has started by then: a contract error (the agent or its replica gone) cuts the connection."""
    try:
        async with stack:
            async for chunk in stream:
                if isinstance(chunk, bytes):
                    yield chunk
    except ApiError as exc:
        raise ResponseCut(str(exc)) from exc


@router.get("/stat", response_model=Entry)
async def stat(target: ReadTarget, fleet: FleetDep, path: str = "") -> Response:
    server_id = target.server_id
    return _checked(Entry, await fleet.call_agent(server_id, "fs.stat", target.params(path=path)), "fs.stat", server_id)


@router.get("/read", response_model=FileContent | FileWindow)
async def read(
    target: ReadTarget,
    fleet: FleetDep,
    path: str = "",
    offset: int | None = Query(None, ge=0, le=MAX_INTEGER),
    length: int | None = Query(None, ge=0, le=WINDOW_LIMIT),
) -> Response:
    """The whole text file (the editor's read, up to 10 MiB); with `offset` or `length`, a window
    of up to 1 MiB of any file (the viewer's read): never 413 or 415."""
    server_id = target.server_id
    if offset is None and length is None:
        answer = await fleet.call_agent(server_id, "fs.read", target.params(path=path))
        return _checked(FileContent, answer, "fs.read", server_id)
    window = {"offset": offset or 0, "length": WINDOW_LIMIT if length is None else length}
    answer = await fleet.call_agent(server_id, "fs.read", target.params(path=path, **window))
    return _checked(FileWindow, answer, "fs.read", server_id)


# --- writes -----------------------------------------------------------------------------------
# Every write is audited, failed ones too: who, what, which paths, the outcome. File content
# never reaches the audit log (only its size).


# Writes that walk a tree answer when the whole tree is done: they get the transfer timeout (hours),
# not the few seconds of a single-file call.
TREE_METHODS = frozenset({"fs.move", "fs.copy", "fs.delete", "fs.chmod", "fs.trash.restore", "fs.trash.empty"})


async def _audited(
    fleet: Fleet,
    caller: Principal,
    target: FsTarget,
    method: str,
    params: dict[str, Any],
    audit_details: dict[str, Any],
) -> Any:
    try:
        timeout = fleet.settings.transfer_timeout_s if method in TREE_METHODS else None
        result = await fleet.call_agent(target.server_id, method, target.params(**params), timeout=timeout)
    except ApiError as exc:
        await _audit(fleet, caller, target, method, audit_details, outcome="error", error_code=exc.error_code)
        raise
    await _audit(fleet, caller, target, method, audit_details)
    return result


async def _audit(
    fleet: Fleet,
    caller: Principal,
    target: FsTarget,
    method: str,
    details: dict[str, Any],
    *,
    outcome: str = "ok",
    error_code: str | None = None,
) -> None:
    where = {"scope": target.scope, "domain": target.domain}
    paths = details.get("paths") or [details.get("path", "")]
    await fleet.audit(
        caller,
        method,
        server_id=target.server_id,
        target=", ".join(str(p) for p in paths)[:1000],
        details={**where, **details},
        outcome=outcome,
        error_code=error_code,
    )


@router.put("/write", response_model=FsWriteResult, openapi_extra=body_limit(FS_WRITE_BODY_LIMIT))
async def write(
    given: Annotated[InBody[FsWrite], target_in_body(FsWrite)], caller: Caller, fleet: FleetDep
) -> Response:
    body, target = given.body, given.target
    server_id = target.server_id
    params = body.model_dump(include={"path", "content", "if_match", "create_only"})
    details = {"path": body.path, "bytes": len(body.content.encode()), "create_only": body.create_only}
    return _checked(
        FsWriteResult, await _audited(fleet, caller, target, "fs.write", params, details), "fs.write", server_id
    )


@router.post("/mkdir", response_model=FsEntryResult)
async def mkdir(
    given: Annotated[InBody[FsMkdir], target_in_body(FsMkdir)], caller: Caller, fleet: FleetDep
) -> Response:
    body, target = given.body, given.target
    server_id = target.server_id
    params = {"path": body.path, "parents": body.parents}
    return _checked(
        FsEntryResult, await _audited(fleet, caller, target, "fs.mkdir", params, params), "fs.mkdir", server_id
    )


async def _move_or_copy(server_id: str, body: FsMoveCopy, caller: Principal, fleet: Fleet, method: str) -> Any:
    # A copy out of a site's logs into another scope reads them (`_cross_scope` checks where it goes).
    copies_out = method == "fs.copy" and body.scope == "logs" and body.to is not None
    target = await resolve_target(fleet, caller, server_id, body.scope, body.domain, write=not copies_out)
    params: dict[str, Any] = {"paths": body.paths, "destination": body.destination, "overwrite": body.overwrite}
    if body.to is not None and body.to.server_id not in (None, server_id):
        return await _across_servers(fleet, caller, target, body, body.to, method, params)
    if body.to is not None:
        params["to"] = await _cross_scope(fleet, caller, target, body.to)
    return await _audited(fleet, caller, target, method, params, params)


async def _across_servers(
    fleet: Fleet,
    caller: Principal,
    source: FsTarget,
    body: FsMoveCopy,
    to: FsDestination,
    method: str,
    params: dict[str, Any],
) -> dict[str, Any]:
    """A move or copy to another server of the caller's org: owners and super-admins only; the
    bytes go server to server over SSH (`remote_copy`). Audited on both servers."""
    assert to.server_id is not None
    caller.require_role("owner")
    scope = to.scope or source.scope
    domain = (to.domain or source.domain) if scope in ("site", "logs") else None
    dest = await resolve_target(fleet, caller, to.server_id, scope, domain, write=True)
    transfer_id = remote_copy.new_transfer_id()
    source_details = {**params, "to": {"server_id": dest.server_id, "scope": dest.scope, "domain": dest.domain}}
    dest_details: dict[str, Any] = {
        "paths": [body.destination],
        "overwrite": body.overwrite,
        "from": {"server_id": source.server_id, "scope": source.scope, "domain": source.domain, "paths": body.paths},
    }
    for details in (source_details, dest_details):
        details["transfer_id"] = transfer_id
    try:
        result = await remote_copy.transfer(
            fleet,
            caller.org_id,
            source,
            dest,
            body.paths,
            body.destination,
            overwrite=body.overwrite,
            move=method == "fs.move",
            transfer_id=transfer_id,
        )
    except ApiError as exc:
        for target, details in ((source, source_details), (dest, dest_details)):
            await _audit(fleet, caller, target, method, details, outcome="error", error_code=exc.error_code)
        raise
    placed = result.get("moved", result.get("copied", []))
    await _audit(fleet, caller, source, method, {**source_details, "skipped": result.get("skipped", [])})
    await _audit(fleet, caller, dest, method, {**dest_details, "paths": placed or [body.destination]})
    return result


async def _cross_scope(fleet: Fleet, caller: Principal, source: FsTarget, to: FsDestination) -> dict[str, Any]:
    """The destination scope of a cross-site move or copy: owners and super-admins only; a copy
    from a site's logs into the same site needs the site's writes only. Nothing goes into logs."""
    scope = to.scope or source.scope
    domain = to.domain if scope in ("site", "logs") else None
    if scope == "logs":
        raise Forbidden(LOGS_READ_ONLY, details={"scope": "logs"})
    if (scope, domain) != (source.scope, source.domain):
        if not _own_logs(source, scope, domain):
            caller.require("root_scope")
        await resolve_target(fleet, caller, source.server_id, scope, domain, write=True)
    return {"scope": scope, "domain": domain}


def _own_logs(source: FsTarget, scope: str, domain: str | None) -> bool:
    """Whether `source` is the logs of the site (`scope`, `domain`): a user saving a log into it."""
    same_site = domain is not None and source.domain is not None and domain.lower() == source.domain.lower()
    return source.scope == "logs" and scope == "site" and same_site


@router.post("/move", response_model=FsMoveResult, openapi_extra=body_limit(PATH_LIST_BODY_LIMIT))
async def move(server_id: str, body: FsMoveCopy, caller: Caller, fleet: FleetDep) -> Response:
    return _checked(FsMoveResult, await _move_or_copy(server_id, body, caller, fleet, "fs.move"), "fs.move", server_id)


@router.post("/copy", response_model=FsCopyResult, openapi_extra=body_limit(PATH_LIST_BODY_LIMIT))
async def copy(server_id: str, body: FsMoveCopy, caller: Caller, fleet: FleetDep) -> Response:
    return _checked(FsCopyResult, await _move_or_copy(server_id, body, caller, fleet, "fs.copy"), "fs.copy", server_id)


@router.post("/delete", response_model=FsDeleteResult, openapi_extra=body_limit(PATH_LIST_BODY_LIMIT))
async def delete(
    given: Annotated[InBody[FsDelete], target_in_body(FsDelete)], caller: Caller, fleet: FleetDep
) -> Response:
    body, target = given.body, given.target
    server_id = target.server_id
    params = {"paths": body.paths, "permanent": body.permanent}
    return _checked(
        _DELETE_RESULT, await _audited(fleet, caller, target, "fs.delete", params, params), "fs.delete", server_id
    )


def _mode(value: int | str) -> int:
    """`"0755"`, `"755"` or `493`; only permission bits (setuid, setgid and sticky are refused)."""
    try:
        mode = int(value, 8) if isinstance(value, str) else value
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o777:
        raise ValidationFailed(
            "mode must be permission bits 000-777 (setuid, setgid and sticky bits are refused)",
            details={"errors": [{"loc": ["body", "mode"], "msg": "not a permission mode"}]},
        )
    return mode


@router.post("/chmod", response_model=FsChmodResult, openapi_extra=body_limit(PATH_LIST_BODY_LIMIT))
async def chmod(
    given: Annotated[InBody[FsChmod], target_in_body(FsChmod)], caller: Caller, fleet: FleetDep
) -> Response:
    body, target = given.body, given.target
    server_id = target.server_id
    params = {"paths": body.paths, "mode": _mode(body.mode), "recursive": body.recursive, "only": body.only}
    return _checked(
        FsChmodResult, await _audited(fleet, caller, target, "fs.chmod", params, params), "fs.chmod", server_id
    )


@router.get("/dirsize", response_model=FsDirSize)
async def dirsize(target: ReadTarget, fleet: FleetDep, path: str = "") -> Response:
    server_id = target.server_id
    return _checked(
        FsDirSize, await fleet.call_agent(server_id, "fs.dirsize", target.params(path=path)), "fs.dirsize", server_id
    )


@router.get("/search", response_model=FsSearchResult)
async def search(
    target: ReadTarget,
    fleet: FleetDep,
    query: str = Query(min_length=1, max_length=256),
    path: str = "",
    content: bool = False,
    limit: int = Query(500, ge=1, le=5000),
) -> Response:
    server_id = target.server_id
    params = target.params(path=path, query=query, content=content, limit=limit)
    # A content search reads every file, big logs included: the deadline of a tree operation.
    timeout = fleet.settings.transfer_timeout_s if content else None
    answer = await fleet.call_agent(server_id, "fs.search", params, timeout=timeout)
    return _checked(FsSearchResult, answer, "fs.search", server_id)


@router.get("/find", response_model=FsFound)
async def find(
    target: ReadTarget,
    fleet: FleetDep,
    path: str = "",
    query: str | None = Query(None, min_length=1, max_length=MAX_FIND_QUERY),
    line: int | None = Query(None, ge=1, le=MAX_INTEGER),
    offset: int = Query(0, ge=0, le=MAX_INTEGER),
    backward: bool = False,
    case_sensitive: bool = False,
) -> Response:
    """In one file of any size, searched on its server: the first match of `query` at or after
    `offset` (`backward`: the last one before it), or with `line`, where that line starts."""
    if (query is None) == (line is None):
        raise ValidationFailed(
            "give either query or line",
            details={"errors": [{"loc": ["query", "query"], "msg": "give either query or line"}]},
        )
    server_id = target.server_id
    params = target.params(
        path=path, query=query, line=line, offset=offset, backward=backward, case_sensitive=case_sensitive
    )
    # A 1 GiB log is read whole when the match is at its end: the deadline of a tree operation.
    answer = await fleet.call_agent(server_id, "fs.find", params, timeout=fleet.settings.transfer_timeout_s)
    return _checked(FsFound, answer, "fs.find", server_id)


# --- trash ------------------------------------------------------------------------------------


@router.get("/trash", response_model=FsTrashList)
async def trash(target: WriteTarget, fleet: FleetDep) -> Response:
    # Opening the trash purges what is older than 30 days: a write, so it needs write access.
    server_id = target.server_id
    return _checked(
        FsTrashList, await fleet.call_agent(server_id, "fs.trash.list", target.params()), "fs.trash.list", server_id
    )


@router.post("/trash/restore", response_model=FsRestoreResult, openapi_extra=body_limit(PATH_LIST_BODY_LIMIT))
async def trash_restore(
    given: Annotated[InBody[FsTrashRestore], target_in_body(FsTrashRestore)], caller: Caller, fleet: FleetDep
) -> Response:
    body, target = given.body, given.target
    server_id = target.server_id
    params = {"ids": body.ids, "overwrite": body.overwrite}
    answer = await _audited(fleet, caller, target, "fs.trash.restore", params, {"paths": body.ids, **params})
    return _checked(FsRestoreResult, answer, "fs.trash.restore", server_id)


@router.post("/trash/empty", response_model=FsEmptyTrashResult)
async def trash_empty(
    given: Annotated[InBody[FsRequest], target_in_body(FsRequest)], caller: Caller, fleet: FleetDep
) -> Response:
    target = given.target
    answer = await _audited(fleet, caller, target, "fs.trash.empty", {}, {"path": TRASH_FOLDER})
    return _checked(FsEmptyTrashResult, answer, "fs.trash.empty", target.server_id)


# --- archives ---------------------------------------------------------------------------------


async def _start_operation(
    fleet: Fleet, caller: Principal, target: FsTarget, method: str, params: dict[str, Any]
) -> Response:
    async def finished(operation: Operation, error_code: str | None) -> None:
        outcome = "ok" if error_code is None else "error"
        details = {**params, "operation_id": operation.id}
        await _audit(fleet, caller, target, method, details, outcome=outcome, error_code=error_code)

    await fleet.call_agent(target.server_id, "fs.stat", target.params(path=""))  # fail fast: offline, bad scope
    operation_id = fleet.operations.start(caller.org_id, target.server_id, method, target.params(**params), finished)
    return Response(orjson.dumps({"operation_id": operation_id}), status_code=202, media_type="application/json")


@router.post(
    "/compress", status_code=202, response_model=OperationStarted, openapi_extra=body_limit(PATH_LIST_BODY_LIMIT)
)
async def compress(
    given: Annotated[InBody[FsArchive], target_in_body(FsArchive)], caller: Caller, fleet: FleetDep
) -> Response:
    body, target = given.body, given.target
    params = {"paths": body.paths, "format": body.format, "destination": body.destination}
    return await _start_operation(fleet, caller, target, "fs.compress", params)


ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")


@router.post("/extract", status_code=202, response_model=OperationStarted)
async def extract(
    given: Annotated[InBody[FsExtract], target_in_body(FsExtract)], caller: Caller, fleet: FleetDep
) -> Response:
    body, target = given.body, given.target
    _require_archive(body.path, "body")
    params = {"path": body.path, "destination": body.destination, "on_conflict": body.on_conflict}
    return await _start_operation(fleet, caller, target, "fs.extract", params)


@router.get("/extract/check", response_model=FsExtractCheck)
async def extract_check(target: ReadTarget, fleet: FleetDep, path: str, destination: str = "") -> Response:
    """What an extraction would meet (the archive's top-level names, the paths already taken),
    asked before it starts so the user chooses what conflicts get; writes nothing."""
    server_id = target.server_id
    _require_archive(path, "query")
    params = target.params(path=path, destination=destination)
    return _checked(
        FsExtractCheck, await fleet.call_agent(server_id, "fs.extract.check", params), "fs.extract.check", server_id
    )


def _require_archive(path: str, where: str) -> None:
    if not path.lower().endswith(ARCHIVE_SUFFIXES):
        raise ValidationFailed(
            f"only {', '.join(ARCHIVE_SUFFIXES)} archives can be extracted",
            details={"errors": [{"loc": [where, "path"], "msg": "not a supported archive"}]},
        )


@router.get(
    "/operations/{operation_id}/stream",
    response_class=Response,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def operation_stream(
    operation_id: str, request: Request, server_id: str, caller: Caller, fleet: FleetDep
) -> Response:
    """SSE: `progress` events, then `done` or `error`. Resumes after `Last-Event-ID`."""
    await server_row(fleet, caller.org_id, server_id)
    operation = fleet.operations.get(caller.org_id, server_id, operation_id)
    if operation is None:
        raise NotFound("no such operation")
    return sse.response(operation.follow(sse.resume_seq(request)))


@router.delete("/operations/{operation_id}", status_code=204)
async def cancel_operation(operation_id: str, server_id: str, caller: Caller, fleet: FleetDep) -> Response:
    """Cancel a compress or extract: the agent stops and removes the partial result."""
    await server_row(fleet, caller.org_id, server_id)
    caller.require("file_write")
    operation = fleet.operations.get(caller.org_id, server_id, operation_id)
    if operation is None:
        raise NotFound("no such operation")
    operation.scope.cancel()
    return Response(status_code=204)


# --- transfers --------------------------------------------------------------------------------


# A raw body, not JSON: up to RELAY_UPLOAD_LIMIT, checked here with its own message.
@router.put("/upload", response_model=FsEntryResult, openapi_extra=body_limit(None))
async def upload(
    target: WriteTarget, request: Request, caller: Caller, fleet: FleetDep, path: str, overwrite: bool = False
) -> Response:
    """Relay upload: the raw body, up to 64 MiB, streamed to the agent as it arrives (never held
    whole here). The agent writes a temporary file and renames it only once every byte is in."""
    server_id = target.server_id
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > RELAY_UPLOAD_LIMIT:
        return _unread_body_error(_too_large(int(declared)))
    details = {
        "path": path,
        "overwrite": overwrite,
        "bytes": int(declared) if declared and declared.isdigit() else None,
    }
    params = target.params(
        path=path, overwrite=overwrite, size=int(declared) if declared and declared.isdigit() else None
    )
    read_all = False
    try:
        async with fleet.agent_upload(server_id, "fs.upload", params) as sending:
            received = 0
            async for chunk in _body(request):
                received += len(chunk)
                if received > RELAY_UPLOAD_LIMIT:
                    raise _too_large(received)  # leaving the upload unfinished cancels it
                if chunk:
                    await sending.send(chunk)
            read_all = True
            result = await sending.finish()
    except ApiError as exc:
        await _audit(fleet, caller, target, "fs.upload", details, outcome="error", error_code=exc.error_code)
        if not read_all:
            return _unread_body_error(exc)
        raise
    await _audit(fleet, caller, target, "fs.upload", {**details, "bytes": received})
    return _checked(FsEntryResult, result, "fs.upload", server_id)


@router.websocket("/upload/stream")
async def upload_stream(websocket: WebSocket, server_id: str) -> None:
    """Uploads of any size: binary frames in, then `{"done": true}`; answers `{"entry"}` or
    `{"error"}`. Bytes go on to the agent as they come, paced by its credit (so by TCP back to
    the client); a client that goes away mid-way leaves no file behind."""
    await websocket.accept()
    fleet: Fleet = websocket.app.state.fleet
    caller: Principal | None = None
    target: FsTarget | None = None
    details: dict[str, Any] = {}
    try:
        caller = await authenticate(websocket)
        query = websocket.query_params
        # The query routes' dependency, called here (a WebSocket's errors are frames, sent once it
        # is accepted); what the query leaves out takes the dependency's defaults.
        named = {name: query[name] for name in ("scope", "domain") if name in query}
        target = await _WRITE_TARGET(server_id, caller, fleet, **named)
        size = _query_size(query.get("size"))
        overwrite = query.get("overwrite", "").lower() in ("1", "true", "yes")
        details = {"path": query.get("path", ""), "overwrite": overwrite, "bytes": size, "via": "stream"}
        params = target.params(path=query.get("path", ""), overwrite=overwrite, size=size)
        async with fleet.agent_upload(server_id, "fs.upload", params) as sending:
            received = 0
            while True:
                message = await _next_frame(websocket)
                if message["type"] == "websocket.disconnect":
                    raise BadRequest("the client went away before the upload was done")
                if message.get("bytes"):
                    received += len(message["bytes"])
                    if received > size:
                        raise BadRequest(f"more bytes than the announced size ({size})")
                    await sending.send(message["bytes"])
                elif message.get("text") is not None and _is_done(message["text"]):
                    break
            result = _model(FsEntryResult, await sending.finish(), "fs.upload", server_id).model_dump(mode="json")
    except ApiError as exc:
        if caller is not None and target is not None:
            await _audit(fleet, caller, target, "fs.upload", details, outcome="error", error_code=exc.error_code)
        body = {"error": {"code": exc.error_code, "message": exc.message, "details": exc.details}}
        with contextlib.suppress(Exception):  # the client may be gone already
            await websocket.send_text(orjson.dumps(body).decode())
            await websocket.close()
        return
    assert caller is not None and target is not None
    await _audit(fleet, caller, target, "fs.upload", details)
    await websocket.send_text(orjson.dumps(result).decode())
    await websocket.close()


async def _next_frame(websocket: WebSocket) -> Message:
    """An upload stream's next frame: one must come every `BODY_IDLE_TIMEOUT_S` (a stalled client
    would hold the agent's upload open for ever); no limit on the whole, so a slow link still works."""
    with anyio.move_on_after(BODY_IDLE_TIMEOUT_S):
        return await websocket.receive()
    raise Timeout(f"the upload stalled: no data for {BODY_IDLE_TIMEOUT_S:g} s", details={"idle_s": BODY_IDLE_TIMEOUT_S})


def _query_size(text: str | None) -> int:
    if text is None or not (text.isascii() and text.isdigit()) or int(text) > MAX_INTEGER:
        raise ValidationFailed(
            "size (bytes, a whole number) is required",
            details={"errors": [{"loc": ["query", "size"], "msg": f"a whole number from 0 to {MAX_INTEGER}"}]},
        )
    return int(text)


def _is_done(text: str) -> bool:
    """Whether a text frame of an upload stream is the `{"done": true}` that ends it; any other
    text is the client's mistake (400), not the server's."""
    try:
        message = orjson.loads(text)
    except orjson.JSONDecodeError:
        message = None
    if not isinstance(message, dict) or message.get("done") is not True:
        raise BadRequest('a text frame of an upload must be {"done": true}')
    return True


async def _body(request: Request) -> AsyncIterator[bytes]:
    """The request body as it arrives (at the front door's pace, `control_plane.frontdoor`); a
    client that goes away is an error of the upload."""
    try:
        async for chunk in request.stream():
            yield chunk
    except ClientDisconnect:
        # The front door cut it (too slow), or the client went away.
        raise refusal(request.scope) or BadRequest("the client went away before the upload was done") from None


def _unread_body_error(exc: ApiError) -> Response:
    """The answer to a request refused before its body was read: the connection closes after it,
    so the client stops sending (and sees the answer) instead of writing into a socket nobody reads."""
    response = error_response(exc.status_code, exc.error_code, exc.message, exc.details)
    response.headers["Connection"] = "close"
    return response


def _too_large(size: int) -> TooLarge:
    return TooLarge(
        "relay uploads stop at 64 MiB: larger files go over the streaming upload",
        details={"limit": RELAY_UPLOAD_LIMIT, "size": size},
    )


# Asked of the replica holding the agent's link, and answered by it (`control_plane.replicas.calls`):
# the link's signing key never leaves its replica, so the URL is made there.
DIRECT_UPLOAD_METHOD = "replica.upload.direct"


@router.post("/upload/direct", response_model=DirectUpload)
async def upload_direct(
    given: Annotated[InBody[FsUploadDirect], target_in_body(FsUploadDirect)], caller: Caller, fleet: FleetDep
) -> DirectUpload:
    """A signed URL on the server's own ingress, when it has one; `{url: null}` tells the client
    to fall back to the relay without bothering the user (also above 2 GiB: the stream takes those).

    What the upload would refuse (a path outside the scope, a missing folder, a name taken
    without `overwrite`) is refused here, before a byte is sent; the agent checks again at the PUT.
    The audit entry is written when the agent reports the upload's end (see `direct.py`)."""
    body, target = given.body, given.target
    server_id = target.server_id
    session = fleet.hub.session(server_id)
    if session is not None:
        return await direct_upload_here(fleet, caller, session, target, body)
    if not await fleet.agent_online(server_id):
        raise AgentOffline("the server's agent is not connected")
    caller_fields = caller.model_dump(mode="json")
    params = {"caller": caller_fields, "scope": target.scope, "domain": target.domain, "upload": body.model_dump()}
    return DirectUpload.model_validate(await fleet.call_agent(server_id, DIRECT_UPLOAD_METHOD, params))


async def direct_upload_here(
    fleet: Fleet, caller: Principal, session: AgentSession, target: FsTarget, body: FsUploadDirect
) -> DirectUpload:
    """The direct upload's URL, made by the replica holding the agent's link (`session`)."""
    if session.ingress_key is None or session.direct_ingress_url is None or body.size > DIRECT_UPLOAD_LIMIT:
        return DirectUpload(url=None)
    if "fs.upload.check" in session.handlers:
        params = {"path": body.path, "overwrite": body.overwrite}
        details = {**params, "bytes": body.size, "via": "direct"}
        try:
            await fleet.call_agent(target.server_id, "fs.upload.check", target.params(**params))
        except ApiError as exc:
            await _audit(fleet, caller, target, "fs.upload", details, outcome="error", error_code=exc.error_code)
            raise
    return fleet.direct_uploads.issue(
        caller,
        session,
        scope=target.scope,
        domain=target.domain,
        path=body.path,
        size=body.size,
        overwrite=body.overwrite,
    )


async def answer_relayed_direct_upload(fleet: Fleet, session: AgentSession, params: dict[str, Any]) -> Any:
    """`DIRECT_UPLOAD_METHOD`, asked by the replica the client asked (which checked the caller
    and the target): the URL made here, where the agent's link is."""
    caller = Principal.model_validate(params["caller"])
    target = FsTarget(session.server_id, str(params["scope"]), params["domain"])
    body = FsUploadDirect.model_validate(params["upload"])
    answer = await direct_upload_here(fleet, caller, session, target, body)
    return answer.model_dump(mode="json")


DIRECT_DOWNLOAD_METHOD = "replica.download.direct"


@router.post("/download/direct", response_model=DirectDownload)
async def download_direct(target: ReadTarget, caller: Caller, fleet: FleetDep, path: str) -> DirectDownload:
    """A signed URL on the server's own ingress, when it has one, from which the file downloads
    without passing through here; `{url: null}` tells the client to use `fs/download`. What the
    download would refuse (a missing file, a folder, a path outside the scope) the ingress
    answers at the GET, with the same codes."""
    session = fleet.hub.session(target.server_id)
    if session is not None:
        return direct_download_here(fleet, caller, session, target, path)
    if not await fleet.agent_online(target.server_id):
        raise AgentOffline("the server's agent is not connected")
    params = {"caller": caller.model_dump(mode="json"), "scope": target.scope, "domain": target.domain, "path": path}
    return DirectDownload.model_validate(await fleet.call_agent(target.server_id, DIRECT_DOWNLOAD_METHOD, params))


def direct_download_here(
    fleet: Fleet, caller: Principal, session: AgentSession, target: FsTarget, path: str
) -> DirectDownload:
    """The direct download's URL, made by the replica holding the agent's link (`session`)."""
    if session.ingress_key is None or session.direct_ingress_url is None:
        return DirectDownload(url=None)
    return fleet.direct_uploads.issue_download(caller, session, scope=target.scope, domain=target.domain, path=path)


async def answer_relayed_direct_download(fleet: Fleet, session: AgentSession, params: dict[str, Any]) -> Any:
    """`DIRECT_DOWNLOAD_METHOD`, asked by the replica the client asked (which checked the caller
    and the target): the URL made here, where the agent's link is."""
    caller = Principal.model_validate(params["caller"])
    target = FsTarget(session.server_id, str(params["scope"]), params["domain"])
    return direct_download_here(fleet, caller, session, target, str(params["path"])).model_dump(mode="json")


@router.get("/download", response_class=Response, responses={200: {"content": {"application/octet-stream": {}}}})
async def download(target: ReadTarget, fleet: FleetDep, path: str) -> Response:
    """The file's bytes, streamed from the agent with flow control: no size cap, little memory."""
    head, stream, stack = await _open_agent_stream(fleet, target.server_id, "fs.download", target.params(path=path))
    if head is None:
        raise AgentError("agent error: fs.download answered without the file's size")
    name = path.rstrip("/").rsplit("/", 1)[-1] or "download"
    try:
        size = _declared_size(head.get("size"), MAX_INTEGER, "fs.download")
    except ApiError:
        await stack.aclose()
        raise
    headers = {"Content-Disposition": f"attachment; filename*=UTF-8''{quote(name)}", "Content-Length": str(size)}
    return StreamingResponse(_bytes_of(stream, stack), media_type="application/octet-stream", headers=headers)
