"""TLS certificates for the load balancers on port 443, from an ACME CA, answered over HTTP-01.

The client is certbot's `acme` library (synchronous, on `requests`): every exchange with the CA
runs in a worker thread, so the agent's event loop never waits on the CA. The node answers the
CA's HTTP-01 validations itself: `Http01Responder` is a small HTTP server on 127.0.0.1 that the
engines route `/.well-known/acme-challenge/` of their port-80 listener to, and `Http01Challenges`
is what the ACME exchange (thread) and the responder (event loop) share: token → key authorization.

On disk, under `AcmeSettings.acme_dir`::

    account/account-key.pem          the ACME account's key: made once, kept (0600)
    certs/<hostname>/current         -> the newest issuance (a symbolic link, swapped atomically)
    certs/<hostname>/<issuance>/     fullchain.pem, privkey.pem (0600), bundle.pem (chain + key,
                                     0600, the one file HAProxy's `crt` takes), issuer.json

Sites' certificates (`ssl.issue`) use the same code: their HTTP-01 answers are files the site's
nginx serves (`FileChallenges`), a certificate may name several hosts (the domain and its
aliases) and its key type is the caller's choice.

A certificate's key is generated here, for each issuance, and never leaves the node: the CA only
sees the CSR. An issuance is written whole in its own folder before `current` points at it, so an
engine never reads a key that does not match its certificate. Configurations name the paths
through `current`, which stay the same across renewals (a reload picks up the new files).

Renewal: from 30 days before expiry, or past two thirds of the lifetime for short-lived
certificates (`needs_renewal`); `renew_due` / `keep_renewed` are what the agent's monitor runs.
Whatever the CA refuses comes back as `AcmeError`, whose text is the CA's own problem detail.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import logging
import os
import re
import shutil
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal, NoReturn, Protocol

import h11
import requests
import trio
from acme import challenges as acme_challenges
from acme import client as acme_client
from acme import crypto_util, messages
from acme import errors as acme_errors
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from josepy.jwk import JWKRSA

from agent.sites import write_atomically
from agent.state import open_lock_file

log = logging.getLogger("fleetdeck.agent.acme")

LETS_ENCRYPT_DIRECTORY = "https://acme-v02.api.letsencrypt.org/directory"
RENEW_BEFORE_EXPIRY = datetime.timedelta(days=30)
ORDER_TIMEOUT = datetime.timedelta(seconds=90)  # the whole order: validation, finalization, download
RENEWAL_CHECK_S = 6 * 3600.0
CHALLENGE_PATH = b"/.well-known/acme-challenge/"
RESPONDER_TIMEOUT_S = 10.0  # one request per connection; a client that stalls longer is dropped
MAX_REQUEST_HEAD = 8192
SERVED_KEPT = 64
TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]+$")  # RFC 8555 § 8.3: base64url
HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
USER_AGENT = "fleetdeck-agent (acme-python)"


KeyType = Literal["ec256", "ec384", "rsa2048", "rsa4096"]
REVOCATION_REASONS = {"unspecified": 0, "key_compromise": 1, "superseded": 4, "cessation_of_operation": 5}


class AcmeError(Exception):
    """The certificate could not be obtained; the text is the CA's own problem detail when it gave one."""


@dataclass(frozen=True)
class AcmeSettings:
    """Where certificates come from and where they are kept.

    `acme_dir`: the folder for the account key and the certificates (e.g. `<lb root>/acme`).
    `directory_url`: the CA's ACME directory. `ca_bundle`: the file of CA certificates to trust
    for the directory's HTTPS (pebble's, in tests); None is the system's trust.
    """

    acme_dir: Path
    directory_url: str = LETS_ENCRYPT_DIRECTORY
    ca_bundle: Path | None = None
    email: str | None = None

    @property
    def account_dir(self) -> Path:
        return self.acme_dir / "account"

    @property
    def certs_dir(self) -> Path:
        return self.acme_dir / "certs"


@dataclass(frozen=True)
class CertFiles:
    """A certificate on disk. The paths go through `current` and stay the same across renewals."""

    hostname: str
    fullchain: Path  # the certificate, then its intermediates (nginx `ssl_certificate`)
    key: Path  # its private key, 0600 (nginx `ssl_certificate_key`)
    bundle: Path  # fullchain then key in one file, 0600 (HAProxy `crt`)
    not_before: datetime.datetime
    not_after: datetime.datetime
    names: tuple[str, ...] = ()  # the DNS names it is valid for (its subjectAltName)

    @property
    def renew_at(self) -> datetime.datetime:
        return renewal_time(self.not_before, self.not_after)


@dataclass(frozen=True)
class Renewal:
    """One certificate `renew_due` found due: its new files, or why the CA did not renew it."""

    hostname: str
    files: CertFiles | None
    error: str | None = None


class ChallengeStore(Protocol):
    """Where the HTTP-01 answers of an order are published while the CA validates them."""

    def add(self, token: str, key_authorization: str) -> None: ...

    def discard(self, token: str) -> None: ...


class FileChallenges:
    """HTTP-01 answers as files `<folder>/<token>` (mode 0644), for a web server that serves the
    folder at `/.well-known/acme-challenge/` (the sites' nginx). Written whole, then renamed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def add(self, token: str, key_authorization: str) -> None:
        if not TOKEN_RE.match(token):
            raise AcmeError(f"the CA sent a token that is not base64url: {token!r}")
        if not self.folder.is_dir():
            self.folder.mkdir(mode=0o755, parents=True, exist_ok=True)
            self.folder.chmod(0o755)  # whatever the umask: the web server's workers read it
        write_atomically(str(self.folder / token), key_authorization.encode("ascii"), 0o644)

    def discard(self, token: str) -> None:
        if TOKEN_RE.match(token):
            (self.folder / token).unlink(missing_ok=True)


class Http01Challenges:
    """Pending HTTP-01 answers: token → key authorization.

    Written by the ACME exchange in its worker thread, read by the responder on the event loop;
    the lock makes that safe whatever the interpreter guarantees about dicts.
    """

    def __init__(self) -> None:
        self._answers: dict[str, str] = {}
        self._lock = threading.Lock()

    def add(self, token: str, key_authorization: str) -> None:
        with self._lock:
            self._answers[token] = key_authorization

    def discard(self, token: str) -> None:
        with self._lock:
            self._answers.pop(token, None)

    def answer(self, token: str) -> str | None:
        with self._lock:
            return self._answers.get(token)


@dataclass
class Http01Responder:
    """The node's answer to HTTP-01: `GET /.well-known/acme-challenge/<token>` → key authorization.

    Run it with `port = await nursery.start(responder.run)`; it listens on `host:port` (a free
    port by default) until cancelled. Anything else is 404. One request per connection.
    `served` lists the last tokens answered, in order (what the validations asked for).
    """

    challenges: Http01Challenges
    host: str = "127.0.0.1"
    port: int = 0
    served: deque[str] = field(default_factory=lambda: deque(maxlen=SERVED_KEPT))

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        log.info("ACME HTTP-01 responder on %s:%d", self.host, self.port)
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._connection, listeners)
            task_status.started(self.port)

    async def _connection(self, stream: trio.SocketStream) -> None:
        async with stream:
            with trio.move_on_after(RESPONDER_TIMEOUT_S):
                try:
                    await self._exchange(stream)
                except (h11.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    log.debug("HTTP-01 responder: connection dropped: %s", exc)

    async def _exchange(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_HEAD)
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(MAX_REQUEST_HEAD))
                continue
            if not isinstance(event, h11.Request):
                return  # the client closed before a whole request head
            break
        status, body = self._answer(event)
        headers = [("content-type", "text/plain"), ("content-length", str(len(body))), ("connection", "close")]
        data = conn.send(h11.Response(status_code=status, headers=headers)) or b""
        if event.method != b"HEAD":
            data += conn.send(h11.Data(data=body)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
        await stream.send_all(data)

    def _answer(self, request: h11.Request) -> tuple[int, bytes]:
        path = request.target.split(b"?", 1)[0]
        if request.method not in (b"GET", b"HEAD") or not path.startswith(CHALLENGE_PATH):
            return 404, b"not found\n"
        token = path[len(CHALLENGE_PATH) :].decode("ascii", "replace")
        answer = self.challenges.answer(token) if TOKEN_RE.match(token) else None
        if answer is None:
            return 404, b"no such challenge\n"
        self.served.append(token)
        return 200, answer.encode("ascii")


# --- renewal rule -----------------------------------------------------------------------------


def renewal_time(not_before: datetime.datetime, not_after: datetime.datetime) -> datetime.datetime:
    """30 days before expiry; for a certificate that lives less than 90 days, two thirds into its life
    (30 days before the end of a 6-day certificate is before its start)."""
    two_thirds = not_before + (not_after - not_before) * 2 / 3
    return max(not_after - RENEW_BEFORE_EXPIRY, two_thirds)


def needs_renewal(cert: x509.Certificate, now: datetime.datetime) -> bool:
    return now >= renewal_time(cert.not_valid_before_utc, cert.not_valid_after_utc)


# --- the agent's calls --------------------------------------------------------------------------


async def ensure_certificate(
    settings: AcmeSettings,
    hostname: str,
    challenges: ChallengeStore,
    now: datetime.datetime | None = None,
    *,
    aliases: Iterable[str] = (),
    key_type: KeyType = "ec256",
    force: bool = False,
) -> CertFiles:
    """The certificate for `hostname` (and `aliases`, also named in it): the one on disk while it
    is not due for renewal (see `needs_renewal`; `now` defaults to the clock), names them all and
    `force` is false, otherwise a new one from the CA, validated over HTTP-01 through `challenges`
    (whatever serves them must be reachable on each name's port 80).

    Raises `AcmeError` (the CA's problem text) when the CA refuses or cannot be reached; the files
    on disk are then unchanged. A cancelled call leaves its worker thread to finish or time out
    (bounded by `ORDER_TIMEOUT`); what it writes is whole, so it cannot leave a broken pair.
    """
    hostname = checked_hostname(hostname)
    names = tuple(dict.fromkeys([hostname, *(checked_hostname(alias) for alias in aliases)]))
    when = now or datetime.datetime.now(datetime.UTC)
    order = _Order(names, key_type, force)
    work = partial(_ensure, settings, hostname, challenges, when, order)
    return await trio.to_thread.run_sync(work, abandon_on_cancel=True)


async def revoke_certificate(settings: AcmeSettings, hostname: str, reason: str = "unspecified") -> CertFiles:
    """Ask the CA to revoke the current certificate of `hostname` (signed with the account key
    that ordered it); the files stay (the caller removes them). AcmeError when there is none."""
    work = partial(_revoke, settings, checked_hostname(hostname), REVOCATION_REASONS[reason])
    return await trio.to_thread.run_sync(work, abandon_on_cancel=True)


def current_certificate(settings: AcmeSettings, hostname: str) -> CertFiles | None:
    """The certificate on disk for `hostname` from this directory, or None (none, unreadable, or
    from another CA: a switch from a test CA to a real one gets a new certificate). Blocking."""
    current = settings.certs_dir / checked_hostname(hostname) / "current"
    try:
        issuer = json.loads((current / "issuer.json").read_text())
        cert = x509.load_pem_x509_certificate((current / "fullchain.pem").read_bytes())
        key_present = (current / "privkey.pem").is_file() and (current / "bundle.pem").is_file()
    except (OSError, ValueError) as exc:
        if not isinstance(exc, FileNotFoundError):
            log.warning("certificate for %s unreadable, a new one will be asked for: %s", hostname, exc)
        return None
    if issuer.get("directory_url") != settings.directory_url or not key_present:
        return None
    return _cert_files(current, hostname, cert)


async def renew_due(
    settings: AcmeSettings,
    hostnames: Iterable[str],
    challenges: ChallengeStore,
    now: datetime.datetime | None = None,
) -> list[Renewal]:
    """Renew, one after the other, the certificates of `hostnames` that are due (a name with no
    certificate yet is left to its `lb.apply`). Returns one `Renewal` per certificate that was due:
    the caller reloads the engines serving the renewed ones and reports the failures."""
    when = now or datetime.datetime.now(datetime.UTC)
    renewals: list[Renewal] = []
    for hostname in dict.fromkeys(hostnames):
        cert = await trio.to_thread.run_sync(current_certificate, settings, hostname)
        if cert is None or when < cert.renew_at:
            continue
        try:
            files = await ensure_certificate(settings, hostname, challenges, when, aliases=cert.names)
        except AcmeError as exc:
            log.warning("renewal of the certificate for %s failed: %s", hostname, exc)
            renewals.append(Renewal(hostname, None, str(exc)))
        else:
            log.info("certificate for %s renewed, valid until %s", hostname, files.not_after.isoformat())
            renewals.append(Renewal(hostname, files))
    return renewals


async def keep_renewed(
    settings: AcmeSettings,
    hostnames: Callable[[], Iterable[str]],
    challenges: Http01Challenges,
    on_renewed: Callable[[CertFiles], Awaitable[None]],
    check_every_s: float = RENEWAL_CHECK_S,
) -> NoReturn:
    """The renewal loop for the agent's nursery: every `check_every_s`, `renew_due` on the names
    `hostnames()` returns then (the TLS load balancers this node serves), and `on_renewed` for each
    certificate renewed (reload the engine serving it). A failure is logged and retried next round."""
    while True:
        for renewal in await renew_due(settings, hostnames(), challenges):
            if renewal.files is not None:
                await on_renewed(renewal.files)
        await trio.sleep(check_every_s)


def checked_hostname(hostname: str) -> str:
    """A DNS name fit for a certificate and a folder name (no wildcard, no path): lower-cased."""
    name = hostname.strip().lower().rstrip(".")
    if not HOSTNAME_RE.match(name):
        raise AcmeError(f"{hostname!r} is not a DNS name a certificate can be issued for")
    return name


# --- the blocking part, in a worker thread ------------------------------------------------------


@dataclass(frozen=True)
class _Order:
    names: tuple[str, ...]  # the hostname first
    key_type: KeyType = "ec256"
    force: bool = False


def _ensure(
    settings: AcmeSettings,
    hostname: str,
    challenges: ChallengeStore,
    now: datetime.datetime,
    wanted: _Order | None = None,
) -> CertFiles:
    wanted = wanted or _Order((hostname,))
    host_dir = settings.certs_dir / hostname
    with _ca_errors(settings):
        for folder in (settings.acme_dir, settings.certs_dir, host_dir):
            folder.mkdir(mode=0o700, exist_ok=True, parents=True)
        with _locked(host_dir / ".lock"):  # one issuance per name at a time (an apply and the renewal loop)
            current = current_certificate(settings, hostname)
            fits = current is not None and set(wanted.names) <= set(current.names)
            if current is not None and fits and now < current.renew_at and not wanted.force:
                return current
            log.info("asking %s for a certificate for %s", settings.directory_url, ", ".join(wanted.names))
            return _issue(settings, hostname, challenges, wanted)


def _private_key(key_type: KeyType) -> bytes:
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    if key_type.startswith("ec"):
        key = ec.generate_private_key(ec.SECP384R1() if key_type == "ec384" else ec.SECP256R1())
    else:
        key = rsa.generate_private_key(public_exponent=65537, key_size=int(key_type.removeprefix("rsa")))
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _issue(
    settings: AcmeSettings, hostname: str, challenges: ChallengeStore, wanted: _Order | None = None
) -> CertFiles:
    wanted = wanted or _Order((hostname,))
    account_key = _account_key(settings)
    client = _client(settings, account_key)
    key_pem = _private_key(wanted.key_type)
    order = client.new_order(crypto_util.make_csr(key_pem, list(wanted.names)))
    tokens = _answer_challenges(client, order, account_key, challenges)
    try:
        deadline = datetime.datetime.now() + ORDER_TIMEOUT  # the library compares with naive local time
        order = client.poll_and_finalize(order, deadline)
    finally:
        for token in tokens:
            challenges.discard(token)
    return _store(settings, hostname, order.fullchain_pem.encode("ascii"), key_pem)


def _client(settings: AcmeSettings, account_key: JWKRSA) -> acme_client.ClientV2:
    # `requests` takes a CA bundle's path where it takes True; the library passes it through.
    verify = str(settings.ca_bundle) if settings.ca_bundle else True
    net = acme_client.ClientNetwork(account_key, verify_ssl=verify, user_agent=USER_AGENT)  # type: ignore[arg-type]
    client = acme_client.ClientV2(acme_client.ClientV2.get_directory(settings.directory_url, net), net)
    registration = messages.NewRegistration.from_data(email=settings.email, terms_of_service_agreed=True)
    try:
        client.new_account(registration)
    except acme_errors.ConflictError as known:  # this key has its account already: use it
        net.account = messages.RegistrationResource(uri=known.location, body=messages.Registration())
    return client


def _answer_challenges(
    client: acme_client.ClientV2,
    order: messages.OrderResource,
    account_key: JWKRSA,
    challenges: ChallengeStore,
) -> list[str]:
    """Publish the HTTP-01 answer of each pending authorization, then tell the CA to validate."""
    tokens: list[str] = []
    for authz in order.authorizations:
        if authz.body.status == messages.STATUS_VALID:
            continue  # the CA still trusts an earlier validation of this name
        http01 = [c for c in authz.body.challenges if isinstance(c.chall, acme_challenges.HTTP01)]
        if not http01:
            raise AcmeError(f"the CA offers no HTTP-01 challenge for {authz.body.identifier.value}")
        response, key_authorization = http01[0].response_and_validation(account_key)
        token = http01[0].chall.encode("token")
        challenges.add(token, key_authorization)
        tokens.append(token)
        client.answer_challenge(http01[0], response)
    return tokens


def _revoke(settings: AcmeSettings, hostname: str, reason: int) -> CertFiles:
    with _ca_errors(settings):
        current = current_certificate(settings, hostname)
        if current is None:
            raise AcmeError(f"no certificate for {hostname} from {settings.directory_url} on this server")
        cert = x509.load_pem_x509_certificate(current.fullchain.read_bytes())
        _client(settings, _account_key(settings)).revoke(cert, reason)
        return current


def _account_key(settings: AcmeSettings) -> JWKRSA:
    """The account's key, made on first use and kept (0600)."""
    settings.account_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = settings.account_dir / "account-key.pem"
    with _locked(settings.account_dir / ".lock"):
        if not path.exists():
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            pem = key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
            write_atomically(str(path), pem, 0o600)
        loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(loaded, rsa.RSAPrivateKey):
        raise AcmeError(f"{path} is not an RSA key")
    return JWKRSA(key=loaded)


def _store(settings: AcmeSettings, hostname: str, fullchain: bytes, key_pem: bytes) -> CertFiles:
    """Write one issuance in its own folder, point `current` at it, drop the older ones."""
    cert = x509.load_pem_x509_certificate(fullchain)
    host_dir = settings.certs_dir / hostname
    issuance = host_dir / f"{cert.not_valid_before_utc:%Y%m%dT%H%M%S}-{cert.serial_number:x}"[:48]
    issuance.mkdir(mode=0o700)
    write_atomically(str(issuance / "privkey.pem"), key_pem, 0o600)
    write_atomically(str(issuance / "fullchain.pem"), fullchain, 0o644)
    write_atomically(str(issuance / "bundle.pem"), fullchain.rstrip(b"\n") + b"\n" + key_pem, 0o600)
    write_atomically(str(issuance / "issuer.json"), json.dumps({"directory_url": settings.directory_url}).encode())
    link = host_dir / ".current.new"
    link.unlink(missing_ok=True)
    link.symlink_to(issuance.name)
    os.replace(link, host_dir / "current")
    _fsync_dir(host_dir)
    for older in host_dir.iterdir():
        if older.is_dir() and not older.is_symlink() and older.name != issuance.name:
            shutil.rmtree(older, ignore_errors=True)
    log.info("certificate for %s stored, valid until %s", hostname, cert.not_valid_after_utc.isoformat())
    return _cert_files(host_dir / "current", hostname, cert)


def certificate_names(cert: x509.Certificate) -> tuple[str, ...]:
    """The DNS names of a certificate's subjectAltName (none: an empty tuple)."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(san.get_values_for_type(x509.DNSName))


def _cert_files(folder: Path, hostname: str, cert: x509.Certificate) -> CertFiles:
    return CertFiles(
        hostname=hostname,
        fullchain=folder / "fullchain.pem",
        key=folder / "privkey.pem",
        bundle=folder / "bundle.pem",
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        names=certificate_names(cert),
    )


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open_lock_file(str(path)) as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        yield


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def _ca_errors(settings: AcmeSettings) -> Iterator[None]:
    """The library's exceptions as one `AcmeError` carrying the CA's own words."""
    try:
        yield
    except messages.Error as exc:  # a problem document (RFC 7807) from the CA
        raise AcmeError(_problem_text(exc)) from exc
    except acme_errors.ValidationError as exc:
        failures = [
            f"{authz.body.identifier.value}: {_problem_text(challenge.error)}"
            for authz in exc.failed_authzrs
            for challenge in authz.body.challenges
            if challenge.error is not None
        ]
        raise AcmeError("the CA could not validate " + "; ".join(failures)) from exc
    except acme_errors.IssuanceError as exc:
        raise AcmeError(_problem_text(exc.error)) from exc
    except acme_errors.TimeoutError as exc:
        raise AcmeError(f"the CA did not complete the order in {ORDER_TIMEOUT.seconds} s") from exc
    except requests.RequestException as exc:
        raise AcmeError(f"cannot reach the ACME directory {settings.directory_url}: {exc}") from exc
    except acme_errors.Error as exc:
        raise AcmeError(str(exc) or type(exc).__name__) from exc
    except OSError as exc:  # after requests' errors, which are OSErrors too: this is the disk's
        raise AcmeError(f"cannot keep the certificate under {settings.acme_dir}: {exc}") from exc


def _problem_text(problem: messages.Error) -> str:
    kind = problem.code or problem.typ
    return f"{problem.detail or problem.description or problem.title or 'no detail given'} ({kind})"
