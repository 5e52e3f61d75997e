"""Login throttling that an attacker cannot turn against the account's owner.

Wrong passwords are counted per (account, source address) and per source address, within a
window; a source over either limit is refused (429 `rate_limited`, with `Retry-After`) before any
password is checked, so a guessed password stops working too. Nothing is counted per account
alone: a source that has not been failing still logs in with the right password while another
source is throttled on the same account (the price: N attacking addresses get N times the
guesses; IPv6 sources are counted per /64, the block one subscriber gets).

Accounts are keyed by the email as typed (lowercased): an unknown email is throttled exactly like
a known one, so the answers say nothing about which accounts exist. The failures live in the
database (`login_failures`, keyed by a SHA-256 of what they count: nothing typed is kept), so
every replica on one database counts the same failures.

The source address is the client's as this process sees it; behind proxies the operator lists
(`Settings.trusted_proxies`), the address those proxies say they received the request from, in
`X-Forwarded-For` (`source_address`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from starlette.requests import HTTPConnection

from control_plane.settings import Network
from control_plane.storage import Database
from control_plane.storage.schema import login_failures

# Which count a throttling event reached: one account from one source, or one source over accounts.
Limit = Literal["account_source", "source"]
IPV6_SOURCE_PREFIX = 64


@dataclass(frozen=True)
class ThrottlePolicy:
    per_account_source: int = 10  # failures per window for one email from one source
    per_source: int = 50  # failures per window from one source, whatever the emails (spraying)
    window_s: float = 900.0


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def _trusted(address: ipaddress.IPv4Address | ipaddress.IPv6Address | None, proxies: tuple[Network, ...]) -> bool:
    return address is not None and any(address in network for network in proxies)


def source_address(connection: HTTPConnection, trusted_proxies: tuple[Network, ...]) -> str:
    """The client's address: the peer's, unless the peer is a trusted proxy; then the nearest
    address in `X-Forwarded-For` that is not one. It is read from the right: each proxy appends
    the address it received from, so what stands left of the last trusted proxy's entry was
    written by the client and proves nothing. With no trusted proxies it is never read; a value
    that is not an address stops the walk at the last trusted hop."""
    peer = connection.client.host if connection.client else "unknown"
    if not _trusted(_address(peer), trusted_proxies):
        return peer
    forwarded = [part.strip() for header in connection.headers.getlist("x-forwarded-for") for part in header.split(",")]
    nearest = peer
    for hop in reversed(forwarded):
        address = _address(hop)
        if address is None:
            break
        if not _trusted(address, trusted_proxies):
            return str(address)
        nearest = str(address)
    return nearest


def source_key(address: str) -> str:
    """The source a failure is counted against: the address; an IPv6 one as its /64."""
    parsed = _address(address)
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, IPV6_SOURCE_PREFIX), strict=False))
    return str(parsed) if parsed is not None else address


def _key(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


class LoginThrottle:
    """The throttle of one database's logins, shared by every replica on it."""

    def __init__(self, db: Database, policy: ThrottlePolicy | None = None, clock: Callable[[], float] = time.time):
        self.db = db
        self.policy = policy or ThrottlePolicy()
        self.clock = clock

    def _keys(self, email: str, source: str) -> dict[Limit, tuple[str, int]]:
        source = source_key(source)
        return {
            "account_source": (_key("account+source", email.strip().lower(), source), self.policy.per_account_source),
            "source": (_key("source", source), self.policy.per_source),
        }

    async def retry_after(self, email: str, source: str) -> int | None:
        """Whole seconds until a login for `email` from `source` may be tried, or None: now."""
        now = self.clock()
        waits = await self.db.run(_waits, list(self._keys(email, source).values()), now, self.policy.window_s)
        return max(1, math.ceil(max(waits))) if waits else None

    async def failed(self, email: str, source: str) -> list[Limit]:
        """Record a wrong password; returns the limits this failure reached (a throttling event)."""
        keys = self._keys(email, source)
        reached = await self.db.run(_record_failure, keys, self.clock(), self.policy.window_s)
        return [limit for limit in keys if limit in reached]

    async def succeeded(self, email: str, source: str) -> None:
        """The right password: this account's failures from this source are forgotten (the
        source's own count is not: one known password must not reset a sprayer's count)."""
        key, _limit = self._keys(email, source)["account_source"]
        await self.db.run(_forget, key)


def _waits(conn: Connection, keys: list[tuple[str, int]], now: float, window_s: float) -> list[float]:
    """For each key at its limit within the window: the seconds until its oldest counted failure
    leaves the window."""
    waits = []
    for key, limit in keys:
        query = (
            sa.select(login_failures.c.at)
            .where(login_failures.c.key == key, login_failures.c.at > now - window_s)
            .order_by(login_failures.c.at.desc())
            .limit(1)
            .offset(limit - 1)
        )
        oldest = conn.execute(query).scalar()
        if oldest is not None:
            waits.append(oldest + window_s - now)
    return waits


def _record_failure(conn: Connection, keys: dict[Limit, tuple[str, int]], now: float, window_s: float) -> set[Limit]:
    conn.execute(login_failures.delete().where(login_failures.c.at <= now - window_s))
    conn.execute(login_failures.insert(), [{"key": key, "at": now} for key, _limit in keys.values()])
    reached: set[Limit] = set()
    for name, (key, limit) in keys.items():
        count = conn.execute(
            sa.select(sa.func.count()).select_from(login_failures).where(login_failures.c.key == key)
        ).scalar_one()
        if count == limit:
            reached.add(name)
    return reached


def _forget(conn: Connection, key: str) -> None:
    conn.execute(login_failures.delete().where(login_failures.c.key == key))
