"""Login throttling: too many wrong passwords for one account, or from one address, within a
window and further attempts are refused (429 `rate_limited`, with `Retry-After`) before any
password is checked, so a guessed password stops working too.

Accounts are keyed by the email as typed (lowercased): an unknown email is throttled exactly like
a known one, so the answers say nothing about which accounts exist. The record is in this
process's memory, bounded in keys; each replica of the control plane throttles on its own.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ThrottlePolicy:
    per_account: int = 10  # failures per window for one email
    per_address: int = 50  # failures per window from one client address, whatever the email
    window_s: float = 900.0
    max_keys: int = 100_000  # each of the two tables; the least recently failed go first


class _FailureLog:
    """Failure times per key, within the window, in a table of at most `max_keys` keys."""

    def __init__(self, limit: int, policy: ThrottlePolicy, clock: Callable[[], float]) -> None:
        self.limit = limit
        self.policy = policy
        self.clock = clock
        self.failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, key: str) -> deque[float] | None:
        times = self.failures.get(key)
        if times is None:
            return None
        horizon = self.clock() - self.policy.window_s
        while times and times[0] <= horizon:
            times.popleft()
        if not times:
            del self.failures[key]
            return None
        return times

    def retry_after(self, key: str) -> float | None:
        times = self._recent(key)
        if times is None or len(times) < self.limit:
            return None
        return times[-self.limit] + self.policy.window_s - self.clock()

    def add(self, key: str) -> bool:
        """Record a failure; True when it is the one that reaches the limit."""
        times = self._recent(key) or deque(maxlen=self.limit)
        times.append(self.clock())
        self.failures[key] = times
        self.failures.move_to_end(key)
        while len(self.failures) > self.policy.max_keys:
            self.failures.popitem(last=False)
        return len(times) == self.limit

    def clear(self, key: str) -> None:
        self.failures.pop(key, None)


class LoginThrottle:
    def __init__(self, policy: ThrottlePolicy | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy or ThrottlePolicy()
        self._accounts = _FailureLog(self.policy.per_account, self.policy, clock)
        self._addresses = _FailureLog(self.policy.per_address, self.policy, clock)

    def retry_after(self, email: str, address: str) -> int | None:
        """Whole seconds until a login for `email` from `address` may be tried, or None: now."""
        waits = [w for w in (self._accounts.retry_after(email.lower()), self._addresses.retry_after(address)) if w]
        return max(1, math.ceil(max(waits))) if waits else None

    def failed(self, email: str, address: str) -> bool:
        """Record a wrong password; True when this failure locks the account or the address."""
        account_locked = self._accounts.add(email.lower())
        address_locked = self._addresses.add(address)
        return account_locked or address_locked

    def succeeded(self, email: str) -> None:
        self._accounts.clear(email.lower())
