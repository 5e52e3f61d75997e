"""Direct uploads and downloads: the control plane signs a short-lived, single-use URL on the
agent's own HTTP ingress, and audits the outcome of an upload the agent reports over its link.
No byte passes through here.

The signing key is the one this control plane made for the agent's current link and sent it in
``welcome`` (see `contract.link.grant`). The grant binds the server, scope, site, path, size,
overwrite flag, an expiry (`grant.DEFAULT_TTL_S`) and a nonce the agent accepts once; a
download's, the server, scope, site, path, expiry and nonce. Downloads are reads, not audited,
as the relayed `fs/download` is not.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from contract.link import grant
from contract.link.grant import DownloadGrant, UploadGrant
from contract.models import DirectDownload, DirectUpload
from control_plane.audit import store as audit
from control_plane.auth.principal import Principal
from control_plane.hub import AgentSession
from control_plane.servers import store as server_store
from control_plane.storage import Database

REPORT_KIND = "fs.upload.direct"
# Who asked for a grant is kept until its upload is reported: a long upload may end well after
# the URL expired. Past this (or a restart), the report is audited from what the grant carried.
KEEP_ISSUED_S = 6 * 3600.0
MAX_ISSUED = 10_000


@dataclass(frozen=True)
class _Issued:
    caller: Principal
    claims: UploadGrant


class DirectUploads:
    def __init__(self, db: Database, *, ttl_s: float = grant.DEFAULT_TTL_S) -> None:
        self.db = db
        self.ttl_s = ttl_s
        self._issued: OrderedDict[str, _Issued] = OrderedDict()

    def issue(
        self,
        caller: Principal,
        session: AgentSession,
        *,
        scope: str,
        domain: str | None,
        path: str,
        size: int,
        overwrite: bool,
    ) -> DirectUpload:
        """A signed URL for one PUT of `size` bytes (the session must have an ingress)."""
        claims = UploadGrant(**self._common(caller, session, scope, domain, path), size=size, overwrite=overwrite)
        self._forget_old()
        self._issued[claims.nonce] = _Issued(caller, claims)
        return DirectUpload(url=_url(session, "upload", claims), expires_at=datetime.fromtimestamp(claims.expires, UTC))

    def issue_download(
        self, caller: Principal, session: AgentSession, *, scope: str, domain: str | None, path: str
    ) -> DirectDownload:
        """A signed URL for one GET of the file at `path` (the session must have an ingress)."""
        claims = DownloadGrant(**self._common(caller, session, scope, domain, path))
        url = _url(session, "download", claims)
        return DirectDownload(url=url, expires_at=datetime.fromtimestamp(claims.expires, UTC))

    def _common(
        self, caller: Principal, session: AgentSession, scope: str, domain: str | None, path: str
    ) -> dict[str, Any]:
        """What every grant binds: the server, scope, site and path, an expiry, a nonce, who asked."""
        return {
            "server_id": session.server_id,
            "scope": scope,
            "domain": domain,
            "path": path,
            "expires": time.time() + self.ttl_s,
            "nonce": grant.new_nonce(),
            "user_id": caller.user_id,
        }

    def _forget_old(self) -> None:
        horizon = time.time() - KEEP_ISSUED_S
        while self._issued and (
            len(self._issued) >= MAX_ISSUED or next(iter(self._issued.values())).claims.expires < horizon
        ):
            self._issued.popitem(last=False)

    async def on_report(self, server_id: str, message: dict[str, Any]) -> None:
        """The agent's report of a direct upload that ended: the audit entry (fs.upload)."""
        if message.get("kind") != REPORT_KIND:
            return
        # Kept (not popped): a later attempt to reuse the URL is reported too, and attributed.
        issued = self._issued.get(str(message.get("nonce")))
        if issued is not None and issued.claims.server_id == server_id:
            claims: dict[str, Any] = issued.claims.params()
            identity: dict[str, Any] = {
                "org_id": issued.caller.org_id,
                "user_id": issued.caller.user_id,
                "actor_email": issued.caller.email,
            }
        else:
            # Not (or no longer) known here: the agent's report echoes the signed grant.
            claims = {key: _short(message.get(key)) for key in ("scope", "domain", "path", "size", "overwrite")}
            org_id = await self.db.run_retrying(server_store.org_of_server, server_id)
            identity = {"org_id": org_id, "user_id": _short(message.get("user_id"))}
        outcome = "ok" if message.get("outcome") == "ok" else "error"
        received = message.get("bytes")
        details = {
            "scope": claims["scope"],
            "domain": claims["domain"],
            "path": claims["path"],
            "overwrite": claims["overwrite"],
            "bytes": received if type(received) is int else None,
            "size": claims["size"],
            "via": "direct",
        }
        await self.db.run_retrying(  # through an outage: the audit entry is kept, if late
            audit.record,
            action="fs.upload",
            server_id=server_id,
            target=str(claims["path"])[:1000],
            details=details,
            outcome=outcome,
            error_code=None if outcome == "ok" else _short(message.get("error_code")) or "internal",
            **identity,
        )


def _url(session: AgentSession, route: str, claims: UploadGrant | DownloadGrant) -> str:
    """The URL of a grant on the session's ingress (`route`: upload or download)."""
    assert session.ingress_key is not None and session.direct_ingress_url is not None
    return f"{session.direct_ingress_url.rstrip('/')}/{route}/{grant.sign(session.ingress_key, claims)}"


def _short(value: Any) -> Any:
    """A reported field as it may be stored: scalars only, strings bounded."""
    if isinstance(value, str):
        return value[:1000]
    return value if isinstance(value, bool | int | float) or value is None else None
