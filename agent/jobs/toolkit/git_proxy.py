"""A one-job door between a site's git and a token's https repository: the token never reaches
a process of the site's user.

A deploy with a token (`agent.jobs.deploy`) still runs the site's git as the site's user, but
points it at ``http://127.0.0.1:<port>/<128 random bits>/``, which the agent (root) serves for
that job alone (`one_job_url`). The agent forwards git's smart-HTTP reads to the https URL it
recorded itself at ``deploy.init``/``deploy.git`` (never one read back from the repository's
config, which the site's user edits), adding ``Authorization: Basic`` with the token on the way:

- only ``GET <path>/info/refs?service=git-upload-pack`` and ``POST <path>/git-upload-pack``;
  receive-pack answers 403, git's dumb protocol and any other path 404;
- only to a connection from a process of the site's own uid (the owner of the connecting socket,
  read from ``/proc/net/tcp``): the URL is in the argv of git's remote helper, which every local
  user can read, and another site's user must not read the repository through it;
- the bodies stream both ways as they come (a pack may be large: none is held whole), still
  compressed as the remote sent them;
- a redirect is followed only for ``info/refs`` (like git's own ``http.followRedirects=initial``),
  only to https on the same host and port, and the later requests go where it led; a redirect to
  another host is refused (502 to git, a line in the job's output): the token goes to the
  recorded host alone.

The listener exists only inside `one_job_url`'s block: when the job ends (done, failed or
cancelled) it is closed, its connections cut, and the URL answers nothing.
"""

from __future__ import annotations

import base64
import logging
import secrets
import socket
import ssl
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from urllib.parse import SplitResult, urljoin, urlsplit

import h11
import httpx
import trio

from agent.files.ingress import HEAD_TIMEOUT_S, IDLE_TIMEOUT_S, MAX_HEAD, read_head
from agent.jobs.toolkit.output import JobError, Output

log = logging.getLogger("fleetdeck.agent.jobs")

UPLOAD_PACK = "git-upload-pack"
INFO_REFS = "info/refs"
ADVERTISEMENT_QUERY = f"service={UPLOAD_PACK}"
MAX_REDIRECTS = 5
MAX_CONNECTIONS = 8  # git opens one or two at a time
CHUNK = 64 * 1024
# What git's request may carry to the remote (never its own Authorization or cookies).
REQUEST_HEADERS = (
    "accept",
    "accept-encoding",
    "accept-language",
    "content-encoding",
    "content-length",
    "content-type",
    "git-protocol",
    "pragma",
    "user-agent",
)
# What the remote's answer may carry back (never a WWW-Authenticate: git would ask for credentials).
RESPONSE_HEADERS = ("cache-control", "content-encoding", "content-type", "expires", "pragma")
UPSTREAM_TIMEOUT = httpx.Timeout(30.0, read=300.0, write=300.0)


def https_remote_problem(url: str) -> str | None:
    """Why a token may not go to `url`, or None: it must be an https URL with a host and no
    credentials, query or fragment of its own."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not one)
    except ValueError:
        return f"{url} is not a URL"
    if parts.scheme != "https" or not parts.hostname:
        return f"a token is sent only to an https:// repository, not to {url}"
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        return f"the repository URL {url} may not hold credentials, a query or a fragment"
    return None


def tls_context(ca_bundle: str | None) -> ssl.SSLContext:
    """What the agent trusts for the remote: `ca_bundle` when given, else the system's CAs (as
    the site's own git would)."""
    return ssl.create_default_context(cafile=ca_bundle) if ca_bundle else ssl.create_default_context()


def socket_owner(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the IPv4 TCP socket at `client` that is connected to `server` (this network
    namespace's ``/proc/net/tcp``), or None when there is no such socket (any more)."""
    local, remote = _proc_address(*client), _proc_address(*server)
    with open("/proc/net/tcp", encoding="ascii") as table:
        next(table, None)
        for line in table:
            fields = line.split()
            if len(fields) > 7 and fields[1] == local and fields[2] == remote:
                return int(fields[7])
    return None


def _proc_address(host: str, port: int) -> str:
    # /proc/net/tcp prints the address as the kernel holds it (network order) read as a native int.
    return f"{int.from_bytes(socket.inet_aton(host), sys.byteorder):08X}:{port:04X}"


class Refused(Exception):
    """An answer to git instead of the remote's: `status` and a line for git's log."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class GitProxy:
    """The forwarding of one job: git's requests under `prefix` to `remote` with `token`."""

    def __init__(self, remote: str, token: str, *, uid: int, client: httpx.AsyncClient, out: Output) -> None:
        self.base = remote.rstrip("/")
        self.origin = urlsplit(self.base)
        self.authorization = "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()
        self.prefix = f"/{secrets.token_hex(16)}"
        self.uid = uid
        self.client = client
        self.out = out
        self._limiter = trio.CapacityLimiter(MAX_CONNECTIONS)

    async def connection(self, stream: trio.SocketStream) -> None:
        async with stream:
            conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
            try:
                client, server = stream.socket.getpeername(), stream.socket.getsockname()
                owner = await trio.to_thread.run_sync(socket_owner, client, server)
                with trio.fail_after(HEAD_TIMEOUT_S):
                    request = await read_head(stream, conn)
                if request is None:
                    return
                if owner != self.uid:  # before the limiter: another user cannot crowd the site's git out
                    raise Refused(403, "only the site's own git may use this URL")
                async with self._limiter:
                    await self._exchange(stream, conn, request)
            except Refused as refused:
                await _refuse(stream, conn, refused)
            except httpx.HTTPError as exc:  # the remote's answer was cut half-way: so is git's
                self.out.stderr(f"error: the answer of {self.origin.netloc} was cut: {exc}")
            except (h11.ProtocolError, trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                log.debug("deploy token door: connection dropped: %s", exc)
            except OSError as exc:  # git went away
                log.debug("deploy token door: connection dropped: %s", exc)
            except Exception:  # never the job's failure: git's own error says the fetch failed
                log.exception("deploy token door: request failed")

    async def _exchange(self, stream: trio.SocketStream, conn: h11.Connection, request: h11.Request) -> None:
        """One request of the site's git: forwarded, or Refused."""
        method, what = self._route(request)
        if what == INFO_REFS:
            upstream = await self._advertisement(request)
        else:
            body = _request_body(stream, conn)
            upstream = await self._send(method, f"{self.base}/{UPLOAD_PACK}", request, body)
            if upstream.is_redirect:
                await upstream.aclose()
                raise self._refusal(f"the remote redirected {method} {UPLOAD_PACK}; git follows only the first")
        async with _closing(upstream):
            if upstream.status_code in (401, 403):
                self.out.stderr(
                    f"the remote {self.origin.hostname} answered {upstream.status_code} with the token:"
                    " is it valid, and allowed to read the repository?"
                )
            await self._relay(stream, conn, upstream)

    def _route(self, request: h11.Request) -> tuple[str, str]:
        """(method, what: info/refs or git-upload-pack) of a request git may make, else Refused."""
        target = request.target.decode("ascii", "replace")
        path, _, query = target.partition("?")
        if not path.startswith(f"{self.prefix}/"):
            raise Refused(404, "no such repository")
        what, method = path[len(self.prefix) + 1 :], request.method.decode("ascii", "replace")
        if "receive-pack" in what or "receive-pack" in query:
            raise Refused(403, "this URL only reads: pushes are refused")
        if (method, what, query) == ("GET", INFO_REFS, ADVERTISEMENT_QUERY):
            return method, what
        if (method, what, query) == ("POST", UPLOAD_PACK, ""):
            return method, what
        raise Refused(404, "only git's smart HTTP reads are served here")

    async def _advertisement(self, request: h11.Request) -> httpx.Response:
        """The remote's answer to ``GET info/refs``, after its redirects to the same host (the
        base of the later requests moves with them, as git's own does)."""
        suffix = f"/{INFO_REFS}?{ADVERTISEMENT_QUERY}"
        url = self.base + suffix
        for _ in range(MAX_REDIRECTS + 1):
            upstream = await self._send("GET", url, request, None)
            if not upstream.is_redirect:
                return upstream
            await upstream.aclose()
            target = urljoin(url, upstream.headers.get("location", ""))
            parts = urlsplit(target)
            if not self._same_host(parts):
                raise self._refusal(
                    f"the remote redirected to {parts.scheme}://{parts.netloc}: the token goes only to"
                    f" {self.origin.netloc} (give deploy.init the repository's new URL)"
                )
            if not target.endswith(suffix):
                raise self._refusal(f"the remote redirected to {target}, which is not a git repository's URL")
            url, self.base = target, target[: -len(suffix)]
        raise self._refusal(f"the remote redirected more than {MAX_REDIRECTS} times")

    def _same_host(self, parts: SplitResult) -> bool:
        """`parts` is an https URL of the recorded host and port, with no credentials."""
        try:
            port = parts.port or 443
        except ValueError:
            return False
        return (
            parts.scheme == "https"
            and parts.username is None
            and (parts.hostname, port) == (self.origin.hostname, self.origin.port or 443)
        )

    async def _send(
        self, method: str, url: str, request: h11.Request, body: AsyncIterator[bytes] | None
    ) -> httpx.Response:
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in request.headers
            if name.decode("latin-1") in REQUEST_HEADERS
        ]
        headers.append(("Authorization", self.authorization))
        outgoing = self.client.build_request(method, url, headers=headers, content=body)
        try:
            return await self.client.send(outgoing, stream=True)
        except httpx.HTTPError as exc:
            raise self._refusal(f"could not reach {self.origin.netloc}: {exc}") from None

    def _refusal(self, reason: str) -> Refused:
        self.out.stderr(f"error: {reason}")
        return Refused(502, reason)

    async def _relay(self, stream: trio.SocketStream, conn: h11.Connection, upstream: httpx.Response) -> None:
        """The remote's answer to git as it comes: its status, a few headers, its bytes as they were
        sent (still compressed), chunked to git whatever framing the remote used."""
        headers = [(name, value) for name, value in upstream.headers.items() if name in RESPONSE_HEADERS]
        await _send(stream, conn, h11.Response(status_code=upstream.status_code, headers=[*headers, _CLOSE]))
        async for chunk in upstream.aiter_raw(CHUNK):
            await _send(stream, conn, h11.Data(data=chunk))
        await _send(stream, conn, h11.EndOfMessage())


_CLOSE = ("connection", "close")  # one request per connection: each is checked on its own


@asynccontextmanager
async def _closing(response: httpx.Response) -> AsyncIterator[httpx.Response]:
    try:
        yield response
    finally:
        with trio.CancelScope(shield=True):
            await response.aclose()


async def _request_body(stream: trio.SocketStream, conn: h11.Connection) -> AsyncIterator[bytes]:
    """git's request body as it arrives (h11 undoes its chunking); a silent client is given up."""
    if conn.client_is_waiting_for_100_continue:
        await _send(stream, conn, h11.InformationalResponse(status_code=100, headers=[]))
    while True:
        event = conn.next_event()
        if isinstance(event, h11.Data):
            yield bytes(event.data)
        elif isinstance(event, h11.EndOfMessage):
            return
        elif event is h11.NEED_DATA:
            with trio.fail_after(IDLE_TIMEOUT_S):
                conn.receive_data(await stream.receive_some(CHUNK))
        else:
            raise h11.RemoteProtocolError(f"unexpected {type(event).__name__} in a request body")


async def _send(stream: trio.SocketStream, conn: h11.Connection, event: h11.Event) -> None:
    data = conn.send(event)
    if data:
        await stream.send_all(data)


async def _refuse(stream: trio.SocketStream, conn: h11.Connection, refused: Refused) -> None:
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return  # the answer has begun: cutting the connection is all that is left
    body = f"{refused}\n".encode()
    headers = [("content-type", "text/plain"), ("content-length", str(len(body))), _CLOSE]
    try:
        await _send(stream, conn, h11.Response(status_code=refused.status, headers=headers))
        await _send(stream, conn, h11.Data(data=body))
        await _send(stream, conn, h11.EndOfMessage())
    except (h11.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        log.debug("deploy token door: answer not sent: %s", exc)


@asynccontextmanager
async def one_job_url(remote: str, token: str, *, uid: int, ca_bundle: str | None, out: Output) -> AsyncIterator[str]:
    """The URL the site's git reads `remote` through with `token`, served only inside the block.

    Args:
        remote: the https URL the agent recorded (not one from the repository's config).
        token: sent to `remote`'s host only, in an Authorization header the agent adds.
        uid: the site's user: the only owner of a connection the URL answers.
        ca_bundle: the CA certificates to trust for `remote` (None: the system's).
        out: the job's output, where a refusal of the door is said.

    Raises:
        JobError: `remote` is not an https URL (exit 2), or `ca_bundle` cannot be read.
    """
    problem = https_remote_problem(remote)
    if problem is not None:
        raise JobError(problem, exit_code=2)
    try:
        verify = await trio.to_thread.run_sync(tls_context, ca_bundle)
    except OSError as exc:  # ssl.SSLError too
        raise JobError(f"the layout's git.ca_bundle {ca_bundle} cannot be used: {exc}") from None
    async with httpx.AsyncClient(
        verify=verify, trust_env=False, follow_redirects=False, timeout=UPSTREAM_TIMEOUT
    ) as client:
        proxy = GitProxy(remote, token, uid=uid, client=client, out=out)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(trio.serve_listeners, proxy.connection, listeners))
            try:
                yield f"http://127.0.0.1:{port}{proxy.prefix}/"
            finally:
                nursery.cancel_scope.cancel()  # closes the listener and cuts its connections
