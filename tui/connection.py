"""Which control plane the TUI talks to, with which token: resolved before the TUI starts.

Remote control planes: the URL is checked first (`GET /v1/health`: nothing is asked of a URL that
does not answer), then a given token (`FLEETDECK_TOKEN`), else a saved session token (unless
`--email` names another user), else a password login (prompted with getpass; an empty answer is
asked again). Session tokens are kept per base URL in the user's config directory, in files only
the user can read (mode 0600, created so from the start, never chmod-ed after the fact).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The API client (httpx, pydantic) and trio are imported in the functions that use them: the
# TUI's first frame needs `Connection` and `PendingConnection` only.

LOGIN_ATTEMPTS = 3
HEALTH_TIMEOUT_S = 10


@dataclass(frozen=True)
class Connection:
    """A base URL and a token that works there; `label` says where, for the title bar. `local`:
    the embedded control plane (the header calls it `local` rather than by its address)."""

    base_url: str
    token: str
    label: str
    local: bool = False


class ConnectError(Exception):
    """The control plane cannot be used: the message says why, in one or two lines."""


@dataclass(frozen=True)
class PendingConnection:
    """A connection that is not there yet (a local stack starting): the app draws its first frame
    at once and says `description`; then it calls `wait` in a thread. `wait` blocks until the
    connection works, or raises `ConnectError` saying why it never will."""

    description: str
    wait: Callable[[], Connection]


class SessionStore:
    """Session tokens per base URL: `<config dir>/sessions/<host>-<hash>.json`, mode 0600."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path_for(self, base_url: str) -> Path:
        base_url = normalise_url(base_url)
        readable = re.sub(r"[^A-Za-z0-9.-]+", "_", base_url.split("://", 1)[-1]).strip("_")[:60]
        import hashlib

        digest = hashlib.sha256(base_url.encode()).hexdigest()[:12]
        return self.directory / f"{readable}-{digest}.json"

    def load(self, base_url: str) -> dict[str, Any] | None:
        """The saved `{base_url, token, email}` for `base_url`, or None."""
        return _read_session(self.path_for(base_url))

    def save(self, base_url: str, token: str, email: str | None) -> Path:
        """Write the token so that no other user can ever read it, replacing the file atomically."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        target = self.path_for(base_url)
        temporary = target.with_suffix(f".{os.getpid()}.tmp")
        payload = json.dumps({"base_url": normalise_url(base_url), "token": token, "email": email}, indent=2)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(payload)
            os.replace(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)
        return target

    def forget(self, base_url: str) -> bool:
        """Delete the session saved for `base_url`; whether there was one."""
        path = self.path_for(base_url)
        existed = path.exists()
        path.unlink(missing_ok=True)
        return existed

    def saved_urls(self) -> list[str]:
        """The base URLs that have a session saved, sorted."""
        if not self.directory.is_dir():
            return []
        urls = {str(data["base_url"]) for path in self.directory.glob("*.json") if (data := _read_session(path))}
        return sorted(urls)


def _read_session(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("token"), str):
        return None
    return data


def normalise_url(base_url: str) -> str:
    return base_url.strip().rstrip("/")


def check_reachable(base_url: str) -> None:
    """Raise `ConnectError` naming `base_url` unless it answers as a fleetdeck control plane
    (`GET /v1/health`, no token needed): said before any credentials are asked for."""

    import trio

    from api_client import Client
    from api_client import errors as api_errors

    async def health() -> None:
        async with Client(base_url, timeout=HEALTH_TIMEOUT_S) as client:
            await client.health()

    try:
        trio.run(health)
    except api_errors.TransportError as exc:
        why = str(exc.__cause__ or exc) or type(exc.__cause__ or exc).__name__
        raise ConnectError(
            f"Cannot connect to {base_url} ({why}): check the URL and that the control plane runs."
        ) from exc
    except (api_errors.FleetdeckError, ValueError) as exc:  # an error answer, or a body that is not a health
        raise ConnectError(f"{base_url} does not answer as a fleetdeck control plane: check the URL.") from exc


def check_token(base_url: str, token: str) -> str:
    """The email of the token's user; `Unauthenticated` if the token is refused."""

    import trio

    from api_client import Client

    async def who() -> str:
        async with Client(base_url, token=token, timeout=15) as client:
            me = await client.auth.me()
            return me.user.email

    return trio.run(who)


def log_in(base_url: str, email: str, password: str) -> str:
    """A new session token for `email`; `Unauthenticated` if the password is wrong."""

    import trio

    from api_client import Client

    async def login() -> str:
        async with Client(base_url, timeout=15) as client:
            return (await client.auth.login(email, password)).token

    return trio.run(login)


def connect_remote(
    base_url: str,
    *,
    store: SessionStore,
    email: str | None = None,
    token: str | None = None,
    ask_email: Callable[[str], str] = input,
    ask_password: Callable[[str], str] | None = None,
    say: Callable[[str], None] = print,
) -> Connection:
    """A working connection to `base_url`: the given `token` (from `FLEETDECK_TOKEN`), a saved
    token, or a fresh login (prompted; `ask_password` is `getpass.getpass` unless given)."""
    import getpass

    from api_client import errors as api_errors

    base_url = normalise_url(base_url)
    check_reachable(base_url)
    try:
        if token:
            try:
                return Connection(base_url, token, check_token(base_url, token))
            except api_errors.Unauthenticated as exc:
                raise ConnectError(f"{base_url} refuses the token in FLEETDECK_TOKEN.") from exc
        saved = store.load(base_url)
        if saved is not None and not _same_user(email, saved.get("email")):
            saved = None  # --email names another user: log in as them (the saved session is replaced)
        if saved is not None:
            try:
                user = check_token(base_url, saved["token"])
            except api_errors.Unauthenticated:
                say(f"Your saved session for {base_url} has expired: please log in again.")
                store.forget(base_url)
            else:
                if _same_user(email, user):
                    return Connection(base_url, saved["token"], user)
            email = email or saved.get("email")
        return _prompt_login(base_url, email, store, ask_email, ask_password or getpass.getpass, say)
    except api_errors.FleetdeckError as exc:
        raise ConnectError(f"Cannot connect to {base_url}: {exc}") from exc


def _same_user(wanted: str | None, saved: object) -> bool:
    """Whether a session of `saved` serves a start asking for `wanted` (None: anyone)."""
    return wanted is None or (isinstance(saved, str) and saved.strip().lower() == wanted.strip().lower())


def _prompt_login(
    base_url: str,
    email: str | None,
    store: SessionStore,
    ask_email: Callable[[str], str],
    ask_password: Callable[[str], str],
    say: Callable[[str], None],
) -> Connection:
    from api_client import errors as api_errors

    try:
        email = email or _ask_until_given(ask_email, f"Email for {base_url}: ", "An email is needed", say)
        for attempt in range(1, LOGIN_ATTEMPTS + 1):
            password = _ask_until_given(
                ask_password, f"Password for {email}: ", "A password is needed", say, secret=True
            )
            try:
                token = log_in(base_url, email, password)
            except (api_errors.Unauthenticated, api_errors.ValidationFailed):
                # A refused form (an email too short to be one) is a wrong login too, not a schema dump.
                if attempt == LOGIN_ATTEMPTS:
                    raise ConnectError(f"Login failed for {email}.") from None
                say("Wrong email or password, try again.")
                continue
            store.save(base_url, token, email)
            return Connection(base_url, token, email)
    except (EOFError, KeyboardInterrupt) as exc:
        raise ConnectError("Login cancelled.") from exc
    raise AssertionError("unreachable")


def _ask_until_given(
    ask: Callable[[str], str], prompt: str, needed: str, say: Callable[[str], None], *, secret: bool = False
) -> str:
    """An answer that is not empty, asked up to `LOGIN_ATTEMPTS` times; then `ConnectError`.

    A secret is taken as typed (spaces and all); anything else is stripped."""
    for attempt in range(1, LOGIN_ATTEMPTS + 1):
        answer = ask(prompt)
        if (answer if secret else answer.strip()) != "":
            return answer if secret else answer.strip()
        if attempt < LOGIN_ATTEMPTS:
            say(f"{needed}: type it, or press Ctrl+C to give up.")
    raise ConnectError(f"{needed}: nothing was typed, so not logged in.")
