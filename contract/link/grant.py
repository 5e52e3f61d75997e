"""Signed direct-transfer grants: the control plane signs, the agent's HTTP ingress verifies.

An upload grant is the whole authority of one ``PUT`` on the agent's ingress: which server,
scope, site, path, how many bytes, whether it may replace a file, until when, and a random nonce
that makes it single-use. A download grant is that of one ``GET``: server, scope, site, path,
expiry and nonce. A grant travels in the URL path as ``<payload>.<mac>`` (both unpadded
base64url), where the payload is the grant's JSON and the mac is HMAC-SHA256 over the payload
prefixed by its kind's context, so an upload's token is no download's and the other way round.

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
from typing import Any, Final, TypeVar

import orjson

KEY_BYTES: Final = 32
NONCE_BYTES: Final = 16
DEFAULT_TTL_S: Final = 300.0
DIRECT_UPLOAD_LIMIT: Final = 2 * 1024**3  # 2 GiB: larger uploads stream through the control plane
MAX_TOKEN_LENGTH: Final = 8192
_CONTEXTS: Final = {"upload": b"fleetdeck direct upload v1\n", "download": b"fleetdeck direct download v1\n"}


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


@dataclass(frozen=True)
class DownloadGrant:
    server_id: str
    scope: str
    domain: str | None
    path: str
    expires: float  # unix seconds, control plane clock
    nonce: str
    user_id: str | None = None

    def params(self) -> dict[str, Any]:
        """The ``fs.download`` params this grant allows (what the agent's jailed read takes)."""
        return {"scope": self.scope, "domain": self.domain, "path": self.path}


Grant = TypeVar("Grant", UploadGrant, DownloadGrant)


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


def sign(key: bytes, grant: UploadGrant | DownloadGrant) -> str:
    payload = _b64(orjson.dumps(asdict(grant)))
    return f"{payload}.{_b64(_mac(key, _kind(type(grant)), payload))}"


def verify(key: bytes, token: str, *, now: float, kind: type[Grant] = UploadGrant) -> Grant:  # type: ignore[assignment]
    """The grant of `kind` (`UploadGrant` or `DownloadGrant`) of a token signed with `key` for
    that kind and not expired at `now` (control plane clock).

    Raises `GrantError`: reason ``malformed``, ``signature`` (also a token of the other kind) or
    ``expired``. Reuse is the verifier's business (it remembers nonces until they expire).
    """
    name = _kind(kind)
    if len(token) > MAX_TOKEN_LENGTH or token.count(".") != 1:
        raise GrantError("malformed", f"not an {name} token")
    payload, _, mac = token.partition(".")
    try:
        given = _unb64(mac)
    except ValueError:
        raise GrantError("malformed", f"not an {name} token") from None
    if not hmac.compare_digest(given, _mac(key, name, payload)):
        raise GrantError("signature", f"the {name} URL is not valid (tampered with, or signed for another link)")
    try:
        fields = orjson.loads(_unb64(payload))
        grant = kind(**fields)
    except (ValueError, TypeError):
        raise GrantError("malformed", f"not an {name} token") from None
    if not _well_typed(grant):
        raise GrantError("malformed", f"not an {name} token")
    if grant.expires <= now:
        raise GrantError("expired", f"the {name} URL has expired: ask for a new one")
    return grant


def _kind(kind: type[UploadGrant | DownloadGrant]) -> str:
    return "upload" if kind is UploadGrant else "download"


def _well_typed(grant: UploadGrant | DownloadGrant) -> bool:
    common = (
        isinstance(grant.server_id, str)
        and isinstance(grant.scope, str)
        and (grant.domain is None or isinstance(grant.domain, str))
        and isinstance(grant.path, str)
        and isinstance(grant.expires, int | float)
        and isinstance(grant.nonce, str)
        and (grant.user_id is None or isinstance(grant.user_id, str))
    )
    if not isinstance(grant, UploadGrant):
        return common
    sized = type(grant.size) is int and 0 <= grant.size <= DIRECT_UPLOAD_LIMIT
    return common and sized and type(grant.overwrite) is bool


def _mac(key: bytes, kind: str, payload: str) -> bytes:
    return hmac.new(key, _CONTEXTS[kind] + payload.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("not base64url") from None
