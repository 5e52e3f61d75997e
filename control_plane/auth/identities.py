"""Who a bearer token is, remembered for a second: most requests skip the identity lookup.

Profiled under 50 concurrent clients (benchmarks/concurrency.py, py-spy --gil), the token's lookup
(`identity_for_token`: four tables joined, built and compiled by SQLAlchemy on each request) held
the interpreter's lock for some 23 % of the control plane's time. A client sends many requests with
one token, so the principal it resolves to is kept (`control_plane.storage.kept.KeptReads`).

How a kept principal stays correct (a security decision; docs/security-load.md):

- Any write that this process makes to the tables a principal comes from (tokens, users, orgs,
  memberships: a revoked API token, and any role, membership, user or plan change made through
  this process) forgets every kept principal at once. The watch is on the engine, so no route has
  to remember to call it.
- A change made by another process (another replica on the same database, `fleetdeck admin
  set-plan`) takes effect within `KEEP_S`: no principal is used longer than that after it was read.
- A token's expiry is checked on every request, kept or not (`authenticate`); an unknown, expired
  or refused token is never kept, so each of its requests is looked up (and refused) as before.
- Tokens are kept by their hash (`hash_token`), never as the secret itself.
"""

from __future__ import annotations

from datetime import datetime

from control_plane.auth.principal import Principal
from control_plane.storage.kept import KeptReads

KEEP_S = 1.0  # the longest a principal is used after it was read (another process's change)
# The tables a principal is read from (`control_plane.auth.store.identity_for_token`).
WATCHED_TABLES = frozenset({"tokens", "users", "orgs", "memberships"})

# By token hash: the principal and its token's expiry (None: never).
IdentityCache = KeptReads[str, tuple[Principal, datetime | None]]


def identity_cache() -> IdentityCache:
    return KeptReads(WATCHED_TABLES, KEEP_S)
