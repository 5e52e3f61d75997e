"""Which control plane the TUI talks to, with which token: resolved before the TUI starts.

Remote control planes: a given token (`FLEETDECK_TOKEN`), else a saved session token, else a password login
(prompted with getpass). Session tokens are kept per base URL in the user's config directory, in
files only the user can read (mode 0600, created so from the start, never chmod-ed after the fact).
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
        try:
            data = json.loads(self.path_for(base_url).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("token"), str):
            return None
        return data

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

    def forget(self, base_url: str) -> None:
        self.path_for(base_url).unlink(missing_ok=True)


def normalise_url(base_url: str) -> str:
    return base_url.strip().rstrip("/")


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
    try:
        if token:
            try:
                return Connection(base_url, token, check_token(base_url, token))
            except api_errors.Unauthenticated as exc:
                raise ConnectError(f"{base_url} refuses the token in FLEETDECK_TOKEN.") from exc
        saved = store.load(base_url)
        if saved is not None:
            try:
                return Connection(base_url, saved["token"], check_token(base_url, saved["token"]))
            except api_errors.Unauthenticated:
                say(f"Your saved session for {base_url} has expired: please log in again.")
                store.forget(base_url)
            email = email or saved.get("email")
        return _prompt_login(base_url, email, store, ask_email, ask_password or getpass.getpass, say)
    except api_errors.FleetdeckError as exc:
        raise ConnectError(f"Cannot connect to {base_url}: {exc}") from exc


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
        email = email or ask_email(f"Email for {base_url}: ").strip()
        for attempt in range(1, LOGIN_ATTEMPTS + 1):
            password = ask_password(f"Password for {email}: ")
            try:
                token = log_in(base_url, email, password)
            except api_errors.Unauthenticated:
                if attempt == LOGIN_ATTEMPTS:
                    raise ConnectError(f"Login failed for {email}.") from None
                say("Wrong email or password, try again.")
                continue
            store.save(base_url, token, email)
            return Connection(base_url, token, email)
    except (EOFError, KeyboardInterrupt) as exc:
        raise ConnectError("Login cancelled.") from exc
    raise AssertionError("unreachable")
