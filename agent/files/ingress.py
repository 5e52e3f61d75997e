"""The agent's HTTP ingress: direct uploads and downloads that skip the control plane.

``fleetdeck agent --ingress HOST:PORT`` serves two routes, ``PUT <prefix>/upload/<token>`` and
``GET <prefix>/download/<token>``, where the token is a grant the control plane signed
(`contract.link.grant`) with the key it gave this agent's link in ``welcome``. The ingress
checks the signature (for the route's kind of grant), the expiry (in the control plane's clock),
that the grant names this server, that its nonce was never presented before, and for an upload
that ``Content-Length`` is exactly the signed size (at most 2 GiB). Then the bytes go through the same
jailed upload the relay uses (`agent.files.write.Upload`: a temporary file beside the
destination, fsync, rename, ownership), so a cut transfer leaves nothing at the path.

The request head is parsed with h11; the body is read straight from the socket into a 1 MiB
buffer and written to the temporary file in a worker thread (no per-chunk event loop round trip).
Every answer is JSON; errors use the `/v1` contract's shape and codes. Every request that
presented a well-signed, unexpired grant is reported to the control plane over the link
(``report`` kind ``fs.upload.direct``), which writes the audit entry: the control plane holds no
byte, but it still knows who uploaded what, and how it ended.

Plain HTTP: behind TLS termination, give the public ``https://`` URL with ``--ingress-url``.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import quote

import h11
import orjson
import trio

from agent.files.fdops import CancelToken, OperationCancelled
from agent.files.handlers import FileHandlers
from agent.files.jail import refusal
from agent.files.read import open_regular
from agent.files.write import Upload
from contract.link import grant
from contract.link.protocol import RpcError

log = logging.getLogger("fleetdeck.agent.files.ingress")

REPORT_KIND = "fs.upload.direct"
MAX_HEAD = 16 * 1024
HEAD_TIMEOUT_S = 15.0
IDLE_TIMEOUT_S = 60.0  # a body that stops arriving for this long is given up
LINGER_S = 1.0  # after an early error answer, read (and drop) what the client still sends
MAX_CONNECTIONS = 64
BODY_BUFFER = 1024 * 1024
SENDFILE_CHUNK = 8 * 1024 * 1024  # per sendfile call: the cancel token and idle clock are checked between
_POLL_MS = 200

_STATUS = {
    "bad_request": 400,
    "unauthenticated": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "length_required": 411,
    "too_large": 413,
    "validation_error": 422,
    "path_outside_scope": 422,
    "cancelled": 503,
    "insufficient_storage": 507,
}
_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    401: b"Unauthorized",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    409: b"Conflict",
    411: b"Length Required",
    413: b"Content Too Large",
    422: b"Unprocessable Content",
    500: b"Internal Server Error",
    503: b"Service Unavailable",
    507: b"Insufficient Storage",
}


class HttpError(Exception):
    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}

    @classmethod
    def from_rpc(cls, exc: RpcError) -> HttpError:
        return cls(_STATUS.get(exc.code, 500), exc.code, exc.message, exc.details)


class ClientGone(Exception):
    """The client stopped sending before the last byte (closed, reset, or silent too long)."""


@dataclass
class _LinkState:
    key: bytes
    server_id: str
    clock_offset: float  # control plane clock minus ours


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8443`` for IPv6); ValueError when it is not that."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"not HOST:PORT: {text!r}")
    return host.strip("[]"), int(port)


class Ingress:
    """The HTTP ingress of one agent. `serve` in the agent's nursery; `on_welcome` on each link."""

    def __init__(
        self,
        files: FileHandlers,
        listen: str,
        *,
        public_url: str | None = None,
        report: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.files = files
        self.host, self.port = parse_listen(listen)
        self._public_url = public_url.rstrip("/") if public_url else None
        self.report = report
        self._link: _LinkState | None = None
        self._used: dict[str, float] = {}  # nonce -> expiry (control plane clock)
        self._limiter = trio.CapacityLimiter(MAX_CONNECTIONS)

    @property
    def url(self) -> str:
        """The public base URL (known once `serve` has started)."""
        if self._public_url is not None:
            return self._public_url
        host = socket.gethostname() if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    # --- the link's part --------------------------------------------------------------------

    def on_welcome(self, welcome: dict[str, Any]) -> None:
        """A new link: its signing key replaces the previous one (URLs of old links stop working)."""
        key, now = welcome.get("ingress_key"), welcome.get("now")
        try:
            if not isinstance(key, str) or not isinstance(now, int | float):
                raise ValueError("welcome without ingress_key and now")
            self._link = _LinkState(grant.decode_key(key), str(welcome["server_id"]), float(now) - time.time())
        except ValueError as exc:
            self._link = None
            log.warning("direct uploads are off on this link: %s", exc)

    def _now(self, link: _LinkState) -> float:
        return time.time() + link.clock_offset

    # --- serving ----------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        if self.port == 0:
            self.port = listeners[0].socket.getsockname()[1]
        log.info("direct upload ingress on %s:%d, announced as %s", self.host, self.port, self.url)
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._connection, listeners)
            task_status.started(self.url)

    async def _connection(self, stream: trio.SocketStream) -> None:
        async with self._limiter, stream:
            try:
                await self._request(stream)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                log.debug("ingress connection dropped: %s", exc)
            except Exception:
                log.exception("ingress request failed")

    async def _request(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        try:
            with trio.fail_after(HEAD_TIMEOUT_S):
                request = await read_head(stream, conn)
        except (h11.RemoteProtocolError, trio.TooSlowError) as exc:
            await _answer(stream, 400, _error("bad_request", f"not a usable HTTP request: {exc}"), linger=True)
            return
        except ClientGone:
            return
        if request is None:
            return
        started = time.perf_counter()
        try:
            if request.method == b"GET":
                sent = await self._download(stream, request)
                log.info("direct download: %d bytes in %.2f s", sent, time.perf_counter() - started)
                return
            status, body = await self._upload(stream, conn, request)
        except HttpError as exc:
            await _answer(stream, exc.status, _error(exc.code, exc.message, exc.details), linger=True)
            return
        log.info("direct upload: %s in %.2f s", status, time.perf_counter() - started)
        await _answer(stream, status, body)

    async def _download(self, stream: trio.SocketStream, request: h11.Request) -> int:
        """The file a download grant names, sent with `sendfile`; the bytes sent. Once the head
        is out, a failure can only cut the connection: the client sees fewer bytes than the
        `Content-Length` (a file that shrank meanwhile ends the same way), never a short file
        passed off as whole."""
        target = request.target.split(b"?", 1)[0]
        _prefix, sep, token = target.rpartition(b"/download/")
        if not sep or not token:
            raise HttpError(404, "not_found", "no such route: GET <ingress>/download/<token>")
        claims = self._check(token.decode("ascii", "replace"), grant.DownloadGrant)
        try:
            fd, st = await trio.to_thread.run_sync(self._open_download, claims)
        except RpcError as exc:
            raise HttpError.from_rpc(exc) from None
        except OSError as exc:
            named = refusal(exc, claims.path)
            if named is not None:
                raise HttpError.from_rpc(named) from None
            raise HttpError(500, "internal", f"the agent could not read the file: {exc.strerror or exc}") from None
        try:
            name = claims.path.rstrip("/").rsplit("/", 1)[-1] or "download"
            head = (
                b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n"
                b"Content-Disposition: attachment; filename*=UTF-8''%s\r\nConnection: close\r\n\r\n"
                % (st.st_size, quote(name).encode("ascii"))
            )
            await stream.send_all(head)
            sent: int = await _in_thread(partial(_send_file, stream, fd, st.st_size))
        except ClientGone as exc:
            log.info("direct download of %s: the client went (%s)", claims.path, exc)
            return 0
        finally:
            os.close(fd)
        if sent < st.st_size:
            log.warning("direct download of %s cut at %d of %d bytes (the file shrank)", claims.path, sent, st.st_size)
        return sent

    def _open_download(self, claims: grant.DownloadGrant) -> tuple[int, os.stat_result]:
        with self.files.open_scope(claims.params(), read_only=True) as jail:
            return open_regular(jail, claims.path)

    async def _upload(self, stream: trio.SocketStream, conn: h11.Connection, request: h11.Request) -> tuple[int, Any]:
        if request.method != b"PUT":
            raise HttpError(405, "bad_request", "only PUT (uploads) and GET (downloads) are served here")
        target = request.target.split(b"?", 1)[0]
        _prefix, sep, token = target.rpartition(b"/upload/")
        if not sep or not token:
            raise HttpError(404, "not_found", "no such route: PUT <ingress>/upload/<token>")
        claims = self._check(token.decode("ascii", "replace"))
        upload: Upload | None = None
        try:
            declared = _content_length(request, claims.size)
            upload = await _in_thread(lambda token: self._open(claims))
            assert upload is not None
            try:
                if _header(request, b"expect").lower() == b"100-continue":
                    await stream.send_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                initial = _buffered_body(conn)
                await _in_thread(partial(_receive, stream, upload, initial, declared))
                result: dict[str, Any] = await _in_thread(lambda token: upload.commit())
            finally:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(upload.close)
        except HttpError as exc:
            self._report(claims, exc.code, upload)
            raise
        except RpcError as exc:
            self._report(claims, exc.code, upload)
            raise HttpError.from_rpc(exc) from None
        except ClientGone as exc:
            self._report(claims, "bad_request", upload)
            raise HttpError(400, "bad_request", f"the upload was cut: {exc}") from None
        except OSError as exc:  # the disk's (no space, quota, I/O error): the socket's are ClientGone
            named = refusal(exc, claims.path)
            if named is not None:
                if named.code == "insufficient_storage":
                    log.warning("direct upload to %s: %s", claims.path, named.message)
                self._report(claims, named.code, upload)
                raise HttpError.from_rpc(named) from None
            log.error("direct upload to %s failed: %s", claims.path, exc)
            self._report(claims, "internal", upload)
            raise HttpError(500, "internal", f"the agent could not write the file: {exc.strerror or exc}") from None
        except trio.Cancelled:  # the agent is stopping
            self._report(claims, "cancelled", upload)
            raise
        self._report(claims, None, upload, result["entry"])
        return 200, result

    def _check(self, token: str, kind: type[grant.Grant] = grant.UploadGrant) -> grant.Grant:  # type: ignore[assignment]
        link = self._link
        if link is None:
            raise HttpError(401, "unauthenticated", "this agent is not linked to its control plane right now")
        now = self._now(link)
        try:
            claims = grant.verify(link.key, token, now=now, kind=kind)
        except grant.GrantError as exc:
            raise HttpError(401, "unauthenticated", str(exc), {"reason": exc.reason}) from None
        what = "upload" if isinstance(claims, grant.UploadGrant) else "download"
        if claims.server_id != link.server_id:
            raise HttpError(403, "forbidden", f"the {what} URL is for another server")
        for nonce in [n for n, expires in self._used.items() if expires <= now]:
            del self._used[nonce]
        if claims.nonce in self._used:
            if isinstance(claims, grant.UploadGrant):
                self._report(claims, "forbidden", None)
            raise HttpError(403, "forbidden", f"the {what} URL was used already: ask for a new one")
        self._used[claims.nonce] = claims.expires
        return claims

    def _open(self, claims: grant.UploadGrant) -> Upload:
        params = claims.params()
        with self.files.open_scope(params) as jail:
            return Upload(jail, claims.path, overwrite=claims.overwrite)

    def _report(
        self,
        claims: grant.UploadGrant,
        error_code: str | None,
        upload: Upload | None,
        entry: dict[str, Any] | None = None,
    ) -> None:
        if self.report is None:
            return
        self.report(
            {
                "kind": REPORT_KIND,
                "nonce": claims.nonce,
                **claims.params(),
                "user_id": claims.user_id,
                "outcome": "ok" if error_code is None else "error",
                "error_code": error_code,
                "bytes": upload.received if upload is not None else 0,
                "entry": entry,
            }
        )


async def read_head(stream: trio.SocketStream, conn: h11.Connection) -> h11.Request | None:
    """The next request's head on `conn` (the ingress's and `agent.jobs.toolkit.git_proxy`'s), or None
    when the client closed before one."""
    while True:
        event = conn.next_event()
        if isinstance(event, h11.Request):
            return event
        if event is h11.NEED_DATA:
            data = await stream.receive_some(64 * 1024)
            if not data:
                return None  # closed before a whole request
            conn.receive_data(data)
            continue
        if isinstance(event, h11.ConnectionClosed):
            return None
        raise h11.RemoteProtocolError(f"unexpected {type(event).__name__}")


def _header(request: h11.Request, name: bytes) -> bytes:
    for key, value in request.headers:
        if key == name:
            return bytes(value)
    return b""


def _content_length(request: h11.Request, size: int) -> int:
    if _header(request, b"transfer-encoding"):
        raise HttpError(411, "bad_request", "send the body with a Content-Length, not chunked")
    text = _header(request, b"content-length")
    if not text:
        raise HttpError(411, "bad_request", "Content-Length is required")
    declared = int(text)  # h11 has checked it is a number
    if declared > size or declared > grant.DIRECT_UPLOAD_LIMIT:
        raise HttpError(413, "too_large", "the body is larger than the signed size", {"limit": size, "size": declared})
    if declared < size:
        raise HttpError(
            422, "validation_error", "the body is smaller than the signed size", {"size": size, "declared": declared}
        )
    return declared


def _buffered_body(conn: h11.Connection) -> bytes:
    """Body bytes that arrived with the head (h11 holds them)."""
    parts: list[bytes] = []
    while True:
        event = conn.next_event()
        if isinstance(event, h11.Data):
            parts.append(bytes(event.data))
            continue
        return b"".join(parts)


def _receive(stream: trio.SocketStream, upload: Upload, initial: bytes, length: int, token: CancelToken) -> None:
    """Blocking (a worker thread): the rest of the body, straight from the socket into `upload`.

    The socket stays non-blocking (trio owns it): readv until it would block, then poll, checking
    the cancel token and the idle time between polls.
    """
    upload.write(initial[:length])
    remaining = length - len(initial[:length])
    fd = stream.socket.fileno()
    view = memoryview(bytearray(BODY_BUFFER))
    filled = 0
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    last = time.monotonic()
    try:
        while remaining:
            try:
                n = os.readv(fd, [view[filled : filled + min(BODY_BUFFER - filled, remaining)]])
            except BlockingIOError:
                if filled:  # write what we have while the client is slower than the disk
                    upload.write(view[:filled])
                    filled = 0
                while not poller.poll(_POLL_MS):
                    token.check()
                    if time.monotonic() - last > IDLE_TIMEOUT_S:
                        raise ClientGone(f"nothing arrived for {IDLE_TIMEOUT_S:.0f} s") from None
                continue
            except OSError as exc:
                raise ClientGone(os.strerror(exc.errno or 0)) from None
            if n == 0:
                raise ClientGone(f"the connection closed {remaining} bytes before the end")
            last = time.monotonic()
            filled += n
            remaining -= n
            if filled == BODY_BUFFER or not remaining:
                upload.write(view[:filled])
                filled = 0
    except ClientGone:
        upload.write(view[:filled])  # only to count what arrived: the file is removed
        raise


def _send_file(stream: trio.SocketStream, fd: int, size: int, token: CancelToken) -> int:
    """Blocking (a worker thread): `size` bytes of `fd` to the socket with `sendfile`; the bytes
    sent (fewer when the file shrank). The socket stays non-blocking (trio owns it): sendfile
    until it would block, then poll, checking the cancel token and the idle time between polls.
    Raises `ClientGone` when the client stops reading or goes."""
    out = stream.socket.fileno()
    poller = select.poll()
    poller.register(out, select.POLLOUT)
    sent = 0
    last = time.monotonic()
    while sent < size:
        try:
            n = os.sendfile(out, fd, sent, min(SENDFILE_CHUNK, size - sent))
        except BlockingIOError:
            while not poller.poll(_POLL_MS):
                token.check()
                if time.monotonic() - last > IDLE_TIMEOUT_S:
                    raise ClientGone(f"the client read nothing for {IDLE_TIMEOUT_S:.0f} s") from None
            continue
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ClientGone(os.strerror(exc.errno or 0)) from None
        if n == 0:  # the end of the file came early: it shrank since it was opened
            break
        sent += n
        last = time.monotonic()
        token.check()
    return sent


async def _in_thread(work: Callable[[CancelToken], Any]) -> Any:
    """`work(token)` in a worker thread; a cancellation of this task sets the token (and waits for
    the work to notice), so the cleanup after it always runs."""
    token = CancelToken()
    outcome: list[Any] = []
    failure: list[BaseException] = []

    async def watch(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            task_status.started()
            await trio.sleep_forever()
        finally:
            token.cancel()

    async with trio.open_nursery() as nursery:
        await nursery.start(watch)
        try:
            outcome.append(await trio.to_thread.run_sync(work, token, abandon_on_cancel=False))
        except Exception as exc:  # raised outside the nursery, not wrapped in a group
            failure.append(exc)
        nursery.cancel_scope.cancel()
    if failure:
        if isinstance(failure[0], OperationCancelled):
            await trio.lowlevel.checkpoint()  # raises Cancelled: only a cancellation sets the token
        raise failure[0]
    return outcome[0]


def _error(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


async def _answer(stream: trio.SocketStream, status: int, body: Any, *, linger: bool = False) -> None:
    """A JSON answer, then the connection ends (one request per connection).

    `linger`: the body may not have been read; shut our side, then drop what still comes for a
    moment, so the client is not reset before it has read the answer (a client writing a large
    body reads the answer once its write fails)."""
    payload = orjson.dumps(body)
    head = b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (
        status,
        _REASONS.get(status, b"Error"),
        len(payload),
    )
    await stream.send_all(head + payload)
    if not linger:
        return
    try:
        stream.socket.shutdown(socket.SHUT_WR)
        with trio.move_on_after(LINGER_S):
            while await stream.receive_some(1024 * 1024):
                pass
    except (trio.BrokenResourceError, OSError):
        pass
