"""The ``fs.*`` RPC handlers: validate params, pick the scope's jail, do the work in a thread.

Each method's params are validated by its model in `contract.link.params` (`params_of`: a
refusal is ``validation_error`` naming the field) before anything is opened; the scope and domain
the model checked are then opened by `FileHandlers.open_scope`, from the call's params as they
came (the cross-server copy and the upload ingress open scopes from theirs the same way).

The blocking file work runs in `trio.to_thread.run_sync`, so the link keeps answering heartbeats
and other calls while a big directory is listed. Long operations (copy, delete, chmod, sizes,
search, compress, extract) run with ``abandon_on_cancel=False`` and a `CancelToken` the worker
checks between files: a cancelled call stops promptly and its cleanup (a partial archive, a
temporary folder) runs before the call ends.

Methods: ``fs.scopes``, ``fs.list``, ``fs.stat``, ``fs.read``, ``fs.write``, ``fs.mkdir``,
``fs.move``, ``fs.copy``, ``fs.delete``, ``fs.trash.list``, ``fs.trash.restore``,
``fs.trash.empty``, ``fs.chmod``, ``fs.dirsize``, ``fs.search``, ``fs.find`` (in one file: a
match before or after an offset, or where a line starts), ``fs.compress`` and
``fs.extract`` (streamed: progress items), ``fs.extract.check`` (the archive's top-level names and
the paths an extraction would find taken, writing nothing), ``fs.download`` (streamed: one items message, then
bytes), ``fs.upload`` (an upload call), ``fs.upload.check`` (would an upload to this path be
accepted now: the scope, the jail, the folder, a name taken without ``overwrite``). ``fs.list``
called as a stream with ``encoded: true`` answers like a download, with the bytes of the page's
JSON document.

Scopes: ``site`` (a site's folder beneath the home), ``root`` (the home) and ``logs``, a site's web
server and PHP logs in ``<sites' log folder>/<slug>`` (root's folder, outside the site: see
`agent.jobs.toolkit.site_web.site_log_dir`), resolved through a jail beneath that folder like any scope and
read-only: a scope is opened for a write unless the work says it only reads, and a write there is
``forbidden`` whatever the control plane let through.
"""

from __future__ import annotations

import functools
import logging
import os
import stat
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import trio
from trio_websocket import ConnectionClosed  # what a call's sends raise once its link is gone

from agent.files import archives, find, read, sweep, transfer, trash, tree, write
from agent.files.entries import rfc3339
from agent.files.fdops import CancelToken, OperationCancelled, Progress
from agent.files.jail import Jail, refusal
from agent.link.call import Call, Handler
from agent.sites import SiteRegistry
from contract.link.params import (
    FsChmod,
    FsCompress,
    FsDelete,
    FsExtract,
    FsFind,
    FsList,
    FsMkdir,
    FsParams,
    FsPath,
    FsRead,
    FsSearch,
    FsTransfer,
    FsTrashRestore,
    FsUpload,
    FsWrite,
    params_of,
)
from contract.link.protocol import RpcError, single_error
from contract.models import LOGS_READ_ONLY, WINDOW_LIMIT

T = TypeVar("T")
log = logging.getLogger("fleetdeck.agent.files")

PROGRESS_INTERVAL_S = 0.1  # at most ~10 progress items a second
UPLOAD_BUFFER = 1024 * 1024
DOWNLOAD_READ = 4 * 1024 * 1024  # per thread hop; the link cuts it into frames


class FileHandlers:
    """The file workspace over `home` and its sites.

    The root scope is `home` itself; a site scope is ``home/<slug>``, itself resolved inside
    the home jail (a site folder that is a symlink cannot lead out of the home). When the agent
    runs as root, what it creates in a site scope is given to the owner of the site folder.
    A logs scope is ``<site_logs()>/<slug>``, resolved inside the jail of `site_logs()` (the host
    layout's ``system.sites_log_dir``, asked at each call: the layout file may change); without
    `site_logs` this agent has no logs scope.
    """

    def __init__(
        self,
        home: str,
        sites: SiteRegistry,
        *,
        use_openat2: bool | None = None,
        site_logs: Callable[[], str] | None = None,
    ) -> None:
        self.home = home
        self.sites = sites
        self._use_openat2 = use_openat2
        self._site_logs = site_logs
        self._swept: set[str] = set()  # the scopes whose leftovers were looked for (`sweep.scope`)

    def handlers(self) -> dict[str, Handler]:
        return {method: _refusals_named(handler) for method, handler in self._methods().items()}

    def _methods(self) -> dict[str, Handler]:
        return {
            "fs.scopes": self.fs_scopes,
            "fs.list": self.fs_list,
            "fs.stat": self.fs_stat,
            "fs.read": self.fs_read,
            "fs.write": self.fs_write,
            "fs.mkdir": self.fs_mkdir,
            "fs.move": self.fs_move,
            "fs.copy": self.fs_copy,
            "fs.delete": self.fs_delete,
            "fs.trash.list": self.fs_trash_list,
            "fs.trash.restore": self.fs_trash_restore,
            "fs.trash.empty": self.fs_trash_empty,
            "fs.chmod": self.fs_chmod,
            "fs.dirsize": self.fs_dirsize,
            "fs.search": self.fs_search,
            "fs.find": self.fs_find,
            "fs.compress": self.fs_compress,
            "fs.extract": self.fs_extract,
            "fs.extract.check": self.fs_extract_check,
            "fs.download": self.fs_download,
            "fs.upload": self.fs_upload,
            "fs.upload.check": self.fs_upload_check,
        }

    async def fs_scopes(self, call: Call) -> dict[str, Any]:
        """The sites, and the domains of those whose log folder exists (`logs`: their logs scope;
        an agent that does not send it has none)."""

        def scopes() -> dict[str, Any]:
            sites = self.sites.sites()
            top = self._site_logs() if self._site_logs is not None else None
            logs = [site.domain for site in sites if top is not None and _is_folder(top, site.slug)]
            return {"sites": [site.to_wire() for site in sites], "logs": logs}

        return await trio.to_thread.run_sync(scopes)

    async def fs_list(self, call: Call) -> dict[str, Any]:
        """A page as the result; or, streamed with ``"encoded": true``, as the bytes of its JSON
        document: one items message ``[{size}]``, the bytes, then ``{size}``. The control plane
        then answers with those bytes as they are, never decoding a 50,000-entry page."""
        params = params_of(FsList, call.params)
        path, cursor, limit = params.path, params.cursor or None, params.limit
        if not (call.streaming and params.encoded):
            return await self._in_scope(
                call.params, lambda jail: read.list_dir(jail, path, cursor=cursor, limit=limit), read_only=True
            )
        data = await self._in_scope(
            call.params, lambda jail: read.list_dir_json(jail, path, cursor=cursor, limit=limit), read_only=True
        )
        await call.send_items([{"size": len(data)}])
        await call.send_bytes(data)
        return {"size": len(data)}

    async def fs_stat(self, call: Call) -> dict[str, Any]:
        path = params_of(FsPath, call.params).path
        return await self._in_scope(call.params, lambda jail: read.stat_entry(jail, path), read_only=True)

    async def fs_read(self, call: Call) -> dict[str, Any]:
        """The whole text file (the editor's read); with ``offset`` or ``length``, a window of
        bytes of any file (the viewer's read)."""
        params = params_of(FsRead, call.params)
        path = params.path
        if params.offset is None and params.length is None:
            return await self._in_scope(call.params, lambda jail: read.read_text(jail, path), read_only=True)
        offset = params.offset or 0
        length = WINDOW_LIMIT if params.length is None else params.length
        return await self._in_scope(
            call.params, lambda jail: read.read_window(jail, path, offset, length), read_only=True
        )

    # --- writes ---------------------------------------------------------------------------

    async def fs_write(self, call: Call) -> dict[str, Any]:
        params = params_of(FsWrite, call.params)

        def work(jail: Jail) -> dict[str, Any]:
            return write.write_text(
                jail, params.path, params.content, if_match=params.if_match, create_only=params.create_only
            )

        return await self._in_scope(call.params, work)

    async def fs_mkdir(self, call: Call) -> dict[str, Any]:
        params = params_of(FsMkdir, call.params)
        return await self._in_scope(call.params, lambda jail: write.make_dir(jail, params.path, parents=params.parents))

    async def fs_move(self, call: Call) -> dict[str, Any]:
        return await self._transfer(call, transfer.move)

    async def fs_copy(self, call: Call) -> dict[str, Any]:
        return await self._transfer(call, transfer.copy)

    async def _transfer(self, call: Call, operation: Callable[..., dict[str, Any]]) -> dict[str, Any]:
        params = params_of(FsTransfer, call.params)
        paths, destination, overwrite, target = params.paths, params.destination, params.overwrite, params.target()

        def work(jail: Jail, token: CancelToken) -> dict[str, Any]:
            if target is None:
                return operation(jail, jail, paths, destination, overwrite=overwrite, token=token)
            with self.open_scope(target) as other:
                return operation(jail, other, paths, destination, overwrite=overwrite, token=token)

        # A copy into another scope only reads its source (a log copied out of the logs scope).
        reads_source = operation is transfer.copy and target is not None
        return await self._cancellable(call.params, work, read_only=reads_source)

    async def fs_delete(self, call: Call) -> dict[str, Any]:
        params = params_of(FsDelete, call.params)
        return await self._cancellable(
            call.params, lambda jail, token: trash.delete(jail, params.paths, permanent=params.permanent, token=token)
        )

    async def fs_trash_list(self, call: Call) -> dict[str, Any]:
        params_of(FsParams, call.params)
        return await self._cancellable(call.params, lambda jail, token: trash.trash_list(jail, token=token))

    async def fs_trash_restore(self, call: Call) -> dict[str, Any]:
        params = params_of(FsTrashRestore, call.params)
        return await self._cancellable(
            call.params, lambda jail, token: trash.restore(jail, params.ids, overwrite=params.overwrite, token=token)
        )

    async def fs_trash_empty(self, call: Call) -> dict[str, Any]:
        params_of(FsParams, call.params)
        return await self._cancellable(call.params, lambda jail, token: trash.empty(jail, token=token))

    async def fs_chmod(self, call: Call) -> dict[str, Any]:
        params = params_of(FsChmod, call.params)

        def work(jail: Jail, token: CancelToken) -> dict[str, Any]:
            return tree.chmod(
                jail, params.paths, params.mode, recursive=params.recursive, only=params.only, token=token
            )

        return await self._cancellable(call.params, work)

    # --- reads over trees -----------------------------------------------------------------

    async def fs_dirsize(self, call: Call) -> dict[str, Any]:
        path = params_of(FsPath, call.params).path
        return await self._cancellable(
            call.params, lambda jail, token: tree.dirsize(jail, path, token=token), read_only=True
        )

    async def fs_search(self, call: Call) -> dict[str, Any]:
        params = params_of(FsSearch, call.params)

        def work(jail: Jail, token: CancelToken) -> dict[str, Any]:
            return tree.search(jail, params.path, params.query, content=params.content, limit=params.limit, token=token)

        return await self._cancellable(call.params, work, read_only=True)

    async def fs_find(self, call: Call) -> dict[str, Any]:
        params = params_of(FsFind, call.params)

        def work(jail: Jail, token: CancelToken) -> dict[str, Any]:
            return find.find(
                jail,
                params.path,
                query=params.query,
                line=params.line,
                offset=params.offset,
                backward=params.backward,
                case_sensitive=params.case_sensitive,
                token=token,
            )

        return await self._cancellable(call.params, work, read_only=True)

    # --- archives -------------------------------------------------------------------------

    async def fs_compress(self, call: Call) -> dict[str, Any]:
        params = params_of(FsCompress, call.params)
        progress = Progress()

        def work(jail: Jail, token: CancelToken) -> dict[str, Any]:
            return archives.compress(
                jail, params.paths, params.format, params.destination, token=token, progress=progress
            )

        return await self._cancellable(call.params, work, call=call, progress=progress)

    async def fs_extract(self, call: Call) -> dict[str, Any]:
        params = params_of(FsExtract, call.params)
        path, destination, on_conflict = params.path, params.destination, params.on_conflict
        archives.archive_kind(path)
        progress = Progress()

        def work(jail: Jail, token: CancelToken) -> dict[str, Any]:
            return archives.extract(jail, path, destination, token=token, progress=progress, on_conflict=on_conflict)

        return await self._cancellable(call.params, work, call=call, progress=progress)

    async def fs_extract_check(self, call: Call) -> dict[str, Any]:
        params = params_of(FsExtract, call.params)
        path, destination = params.path, params.destination
        archives.archive_kind(path)

        def work(jail: Jail, token: CancelToken) -> dict[str, Any]:
            return archives.extract_check(jail, path, destination, token=token)

        return await self._cancellable(call.params, work, read_only=True)

    # --- transfers ------------------------------------------------------------------------

    async def fs_download(self, call: Call) -> dict[str, Any]:
        """One items message ``[{size, mtime}]``, then the bytes (frames of at most the link's
        chunk size), then ``{size}``: the bytes sent (the size at open time, or less if the file
        shrank meanwhile)."""
        path = params_of(FsPath, call.params).path
        if not call.streaming:
            raise RpcError("validation_error", "fs.download must be called as a streamed call")
        fd, st = await self._in_scope(call.params, lambda jail: read.open_regular(jail, path), read_only=True)
        try:
            await call.send_items([{"size": st.st_size, "mtime": rfc3339(st.st_mtime)}])
            sent = 0
            while sent < st.st_size:
                data = await trio.to_thread.run_sync(os.pread, fd, min(DOWNLOAD_READ, st.st_size - sent), sent)
                if not data:
                    break
                await call.send_bytes(data)
                sent += len(data)
            return {"size": sent}
        finally:
            os.close(fd)

    async def fs_upload(self, call: Call) -> dict[str, Any]:
        """Bytes arrive with `Call.receive_bytes` into a temporary file beside the destination;
        it is renamed into place only once all of them did (and match ``size`` when given). A
        failure or a cancel removes it: an interrupted transfer leaves nothing at the path."""
        params = params_of(FsUpload, call.params)
        path, overwrite, size = params.path, params.overwrite, params.size
        if not call.upload:
            raise RpcError("validation_error", "fs.upload must be called as an upload")
        upload = await self._in_scope(call.params, lambda jail: write.Upload(jail, path, overwrite=overwrite))
        try:
            try:
                await _receive_writing_behind(call, upload, size)
            except BaseExceptionGroup as group:  # the writer's or the receiver's, from their nursery
                raise single_error(group) from None
            if size is not None and upload.received != size:
                raise RpcError(
                    "validation_error",
                    f"the upload ended after {upload.received} of {size} bytes",
                    {"size": size, "received": upload.received},
                )
            return await trio.to_thread.run_sync(upload.commit)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(upload.close)

    async def fs_upload_check(self, call: Call) -> dict[str, Any]:
        """Before a direct upload is signed: refuse now what the upload itself would refuse."""
        params = params_of(FsUpload, call.params)

        def check(jail: Jail) -> dict[str, Any]:
            write.file_target(jail, params.path, may_exist=params.overwrite).close()
            return {"ok": True}

        return await self._in_scope(call.params, check)

    # --- plumbing -------------------------------------------------------------------------

    async def _cancellable(
        self,
        params: dict[str, Any],
        work: Callable[[Jail, CancelToken], T],
        *,
        call: Call | None = None,
        progress: Progress | None = None,
        read_only: bool = False,
    ) -> T:
        """`work` in a thread with a token that a cancellation of this task sets; progress (if
        any) goes out as items while it runs, and once more at the end. `read_only`: the work
        only reads the scope (see `open_scope`)."""
        token = CancelToken()
        finished = trio.Event()
        watch_scope = trio.CancelScope()
        outcome: list[Any] = []
        failure: list[Exception] = []
        pumping = progress is not None and call is not None and call.streaming

        async def watch() -> None:
            with watch_scope:
                try:
                    await trio.sleep_forever()
                finally:
                    token.cancel()

        def run() -> T:
            with self.open_scope(params, read_only=read_only) as jail:
                return work(jail, token)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            if pumping:
                assert call is not None and progress is not None
                nursery.start_soon(_pump_progress, call, progress, finished)
            try:
                outcome.append(await trio.to_thread.run_sync(run, abandon_on_cancel=False))
            except Exception as exc:
                failure.append(exc)
            finished.set()
            watch_scope.cancel()
        if failure:
            if isinstance(failure[0], OperationCancelled):
                await trio.lowlevel.checkpoint()  # raises Cancelled: the token is only set by one
                raise RpcError("cancelled", "the operation was cancelled")
            raise failure[0]
        if pumping:
            assert call is not None and progress is not None
            await call.send_items([progress.snapshot()[1]])
        result: T = outcome[0]
        return result

    async def _in_scope(self, params: dict[str, Any], work: Callable[[Jail], T], *, read_only: bool = False) -> T:
        return await trio.to_thread.run_sync(partial(self._run_in_scope, params, work, read_only))

    def _run_in_scope(self, params: dict[str, Any], work: Callable[[Jail], T], read_only: bool = False) -> T:
        with self.open_scope(params, read_only=read_only) as jail:
            return work(jail)

    def open_scope(self, params: dict[str, Any], *, read_only: bool = False) -> Jail:
        """The jail of the request's scope (blocking; the caller closes it). `read_only`: the
        caller only reads through it; otherwise a read-only scope (a site's logs) is refused."""
        scope = params.get("scope")
        if scope == "root":
            self._sweep_once("")
            jail = Jail(self.home, use_openat2=self._use_openat2)
            jail.sites_beneath = True
            return jail
        if scope == "logs":
            if not read_only:
                raise RpcError("forbidden", LOGS_READ_ONLY, {"scope": "logs"})
            return self._open_logs(params.get("domain"))
        if scope != "site":
            raise RpcError("validation_error", "scope must be 'site', 'logs' or 'root'")
        site = self.sites.lookup(params.get("domain"))
        self._sweep_once(site.slug)
        with Jail(self.home, use_openat2=self._use_openat2) as home:
            try:
                jail = home.subjail(site.slug)
            except RpcError as exc:
                if exc.code == "not_found":
                    raise RpcError("not_found", f"the folder of site {site.domain} is missing") from None
                raise
        if os.geteuid() == 0:
            st = os.fstat(jail.fileno())
            jail.owner = (st.st_uid, st.st_gid)
        return jail

    def _open_logs(self, domain: Any) -> Jail:
        """The jail of a site's log folder, beneath the sites' log folder's own jail: links in it
        (nginx writes there as root) never lead out. Nothing is ever created there: no owner."""
        site = self.sites.lookup(domain)
        missing = RpcError("not_found", f"site {site.domain} has no log folder", {"domain": site.domain})
        if self._site_logs is None:
            raise missing
        try:
            top = Jail(self._site_logs(), use_openat2=self._use_openat2)
        except (FileNotFoundError, NotADirectoryError):
            raise missing from None
        with top:
            try:
                return top.subjail(site.slug)
            except RpcError as exc:
                if exc.code == "not_found":
                    raise missing from None
                raise

    def _sweep_once(self, prefix: str) -> None:
        """The first touch of a scope settles the leftovers a dead process left in it."""
        if prefix in self._swept:
            return
        self._swept.add(prefix)
        sweep.scope(self.home, prefix)


def _refusals_named(handler: Handler) -> Handler:
    """`handler`, with what the file system refuses (permission denied, a name too long)
    answered as the contract's error wherever in the operation it came from: never ``internal``
    with a traceback in the log."""

    @functools.wraps(handler)
    async def named(call: Call) -> Any:
        try:
            return await handler(call)
        except Exception as exc:
            error = single_error(exc)
            named = refusal(error, request_path(call.params)) if isinstance(error, OSError) else None
            if named is None:
                raise
            if named.code == "insufficient_storage":  # a fact about the server, not a bug: one line
                log.warning("%s: %s at %s", call.method, named.message, named.details["path"] or "/")
            raise named from None

    return named


def _is_folder(parent: str, name: str) -> bool:
    """Whether `name` in `parent` (root's folder) is a folder itself, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(os.path.join(parent, name)).st_mode)
    except OSError:
        return False


def request_path(params: dict[str, Any]) -> str:
    """The path a request names, for an error's details: the ``destination`` it writes to (copy,
    move, compress, extract), else its ``path``, else its first of ``paths``."""
    destination = params.get("destination")
    if isinstance(destination, str):
        return destination
    path = params.get("path")
    if isinstance(path, str):
        return path
    paths = params.get("paths")
    if isinstance(paths, list) and paths and isinstance(paths[0], str):
        return paths[0]
    return ""


async def _pump_progress(call: Call, progress: Progress, finished: trio.Event) -> None:
    """Send the progress as an items message when it changed, at most every 0.1 s, until
    `finished` (never cancelled mid-send by its caller: it ends between sends)."""
    last = -1
    try:
        while not finished.is_set():
            with trio.move_on_after(PROGRESS_INTERVAL_S):
                await finished.wait()
            if finished.is_set():
                return
            version, snapshot = progress.snapshot()
            if version != last:
                last = version
                await call.send_items([snapshot])
    except ConnectionClosed:  # the link went away: the call ends with it, the work must not
        return


async def _receive_writing_behind(call: Call, upload: write.Upload, size: int | None) -> None:
    """An upload's bytes into `upload`, `UPLOAD_BUFFER` at a time: a worker thread writes one
    buffer while the next arrives (one buffer waits at most), so the link keeps receiving, and
    granting credit, while the disk works; written one after the other, in order."""
    send, receive = trio.open_memory_channel[bytes](1)

    async def write_behind() -> None:
        async with receive:
            async for data in receive:
                await trio.to_thread.run_sync(upload.write, data)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write_behind)
        async with send:
            buffer = bytearray()
            taken = 0
            while (chunk := await call.receive_bytes()) is not None:
                taken += len(chunk)
                if size is not None and taken > size:
                    raise RpcError("validation_error", "more bytes arrived than the announced size", {"size": size})
                if not buffer and len(chunk) >= UPLOAD_BUFFER:  # a whole buffer's worth already: no copy
                    await send.send(chunk)
                    continue
                buffer += chunk
                if len(buffer) >= UPLOAD_BUFFER:
                    await send.send(bytes(buffer))
                    buffer = bytearray()
            if buffer:
                await send.send(bytes(buffer))
