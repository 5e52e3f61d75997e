"""Password hashing with argon2id (argon2-cffi's defaults, which follow RFC 9106)."""

from __future__ import annotations

from functools import cache

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher()


@cache
def _dummy_hash() -> str:
    """Verified against when the email is unknown, so a wrong email costs the same time as a wrong
    password. Made on first use, not at import: a hash takes a quarter of a second of start-up."""
    return _hasher.hash("fleetdeck-timing-equaliser")


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    try:
        return _hasher.verify(password_hash or _dummy_hash(), password) and password_hash is not None
    except (VerificationError, InvalidHashError):
        return False
