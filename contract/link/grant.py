"""Signed direct-upload grants: the control plane signs, the agent's HTTP ingress verifies.

A grant is the whole authority of one ``PUT`` on the agent's ingress: which server, scope, site,
path, how many bytes, whether it may replace a file, until when, and a random nonce that makes it
single-use. It travels in the URL path as ``<payload>.<mac>`` (both unpadded base64url), where the
payload is the grant's JSON and the mac is HMAC-SHA256 over the domain-separated payload.

The key is made by the control plane for one agent link (fresh on every connect), sent to the
agent in ``welcome`` over the authenticated link and never stored: a URL dies with the link it was
signed for, and a key seen by one agent is worth nothing against another. Expiry is in the
control plane's clock; the agent learns the offset of its own clock from ``welcome``.

Pure functions, no I/O: both ends import this module.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import asdict, dataclass
from typing import Any, Final

import orjson

KEY_BYTES: Final = 32
NONCE_BYTES: Final = 16
DEFAULT_TTL_S: Final = 300.0
DIRECT_UPLOAD_LIMIT: Final = 2 * 1024**3  # 2 GiB: larger uploads stream through the control plane
MAX_TOKEN_LENGTH: Final = 8192
_CONTEXT: Final = b"fleetdeck direct upload v1\n"


class GrantError(ValueError):
    """A token that is malformed, not signed with the key, or expired. `reason` says which."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class UploadGrant:
    server_id: str
    scope: str
    domain: str | None
    path: str
    size: int
    overwrite: bool
    expires: float  # unix seconds, control plane clock
    nonce: str
    user_id: str | None = None

    def params(self) -> dict[str, Any]:
        """The ``fs.upload`` params this grant allows (what the agent's jailed upload takes)."""
        return {
            "scope": self.scope,
            "domain": self.domain,
            "path": self.path,
            "size": self.size,
            "overwrite": self.overwrite,
        }


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def new_nonce() -> str:
    return secrets.token_urlsafe(NONCE_BYTES)


def encode_key(key: bytes) -> str:
    return _b64(key)


def decode_key(text: str) -> bytes:
    key = _unb64(text)
    if len(key) != KEY_BYTES:
        raise ValueError("an ingress key is 32 bytes")
    return key


def sign(key: bytes, grant: UploadGrant) -> str:
    payload = _b64(orjson.dumps(asdict(grant)))
    return f"{payload}.{_b64(_mac(key, payload))}"


def verify(key: bytes, token: str, *, now: float) -> UploadGrant:
    """The grant of a token signed with `key` and not expired at `now` (control plane clock).

    Raises `GrantError`: reason ``malformed``, ``signature`` or ``expired``. Reuse is the
    verifier's business (it remembers nonces until they expire).
    """
    if len(token) > MAX_TOKEN_LENGTH or token.count(".") != 1:
        raise GrantError("malformed", "not an upload token")
    payload, _, mac = token.partition(".")
    try:
        given = _unb64(mac)
    except ValueError:
        raise GrantError("malformed", "not an upload token") from None
    if not hmac.compare_digest(given, _mac(key, payload)):
        raise GrantError("signature", "the upload URL is not valid (tampered with, or signed for another link)")
    try:
        fields = orjson.loads(_unb64(payload))
        grant = UploadGrant(**fields)
    except (ValueError, TypeError):
        raise GrantError("malformed", "not an upload token") from None
    if not _well_typed(grant):
        raise GrantError("malformed", "not an upload token")
    if grant.expires <= now:
        raise GrantError("expired", "the upload URL has expired: ask for a new one")
    return grant


def _well_typed(grant: UploadGrant) -> bool:
    return (
        isinstance(grant.server_id, str)
        and isinstance(grant.scope, str)
        and (grant.domain is None or isinstance(grant.domain, str))
        and isinstance(grant.path, str)
        and type(grant.size) is int
        and 0 <= grant.size <= DIRECT_UPLOAD_LIMIT
        and type(grant.overwrite) is bool
        and isinstance(grant.expires, int | float)
        and isinstance(grant.nonce, str)
        and (grant.user_id is None or isinstance(grant.user_id, str))
    )


def _mac(key: bytes, payload: str) -> bytes:
    return hmac.new(key, _CONTEXT + payload.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("not base64url") from None
