"""Random secrets and ids. Tokens are 256-bit random strings; only their SHA-256 is stored.

A fast hash is right for tokens (unlike passwords): they carry full entropy, so there is nothing
to brute-force, and every request has to look one up.
"""

from __future__ import annotations

import hashlib
import secrets

SESSION_PREFIX = "fds_"
API_PREFIX = "fdk_"
AGENT_PREFIX = "fda_"


def new_token(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"
