"""What every request handler reaches through `request.app.state.fleet`, and the caller's identity."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends
from starlette.requests import HTTPConnection

from contract.errors import AgentError, AgentOffline, AgentTimeout, ApiError, TierRequired, Unauthenticated
from control_plane.audit import store as audit
from control_plane.auth.identities import IdentityCache, identity_cache
from control_plane.auth.principal import Principal, capabilities_for
from control_plane.auth.secrets import hash_token
from control_plane.auth.store import identity_for_token
from control_plane.auth.throttle import LoginThrottle
from control_plane.bus import BusAway
from control_plane.clock import parse, utcnow
from control_plane.errors import BUS_AWAY, unavailable
from control_plane.files.direct import DirectUploads
from control_plane.files.operations import FileOperations
from control_plane.hub import AgentCallError, AgentHub, AgentOfflineError, AgentTimeoutError, ReplyStream, UploadStream
from control_plane.jobs.runner import JobRunner
from control_plane.load_balancers.reports import LbReports
from control_plane.replicas import Replicas
from control_plane.servers.presence import PresenceFeed
from control_plane.servers.pulses import PulseRings
from control_plane.settings import Settings
from control_plane.storage import Database
from control_plane.storage.kept import KeptReads


def kept_servers() -> KeptReads[tuple[str, str], dict[str, Any]]:
    """A server's row by (org, id): read by every file operation's and job's checks."""
    return KeptReads(frozenset({"servers"}), keep_s=1.0)


@dataclass
class Fleet:
    settings: Settings
    db: Database
    hub: AgentHub
    presence: PresenceFeed
    pulses: PulseRings  # the linked agents' last pulses (published on `presence`)
    jobs: JobRunner
    operations: FileOperations
    direct_uploads: DirectUploads
    lb_reports: LbReports
    login_throttle: LoginThrottle
    # Other control-plane processes on the same database, over the bus (None: this one alone).
    replicas: Replicas | None = None
    # Callers by token, and servers' rows by org and id, forgotten on this process's writes to
    # their tables (`watch`, below) and a second after they were read (control_plane.storage.kept).
    identities: IdentityCache = field(default_factory=identity_cache)
    servers_kept: KeptReads[tuple[str, str], dict[str, Any]] = field(default_factory=kept_servers)

    def __post_init__(self) -> None:
        self.identities.watch(self.db.engine)
        self.servers_kept.watch(self.db.engine)

    async def agent_online(self, server_id: str) -> bool:
        """Linked here, or to another live replica."""
        return self.hub.is_online(server_id) or server_id in await self.linked_elsewhere([server_id])

    async def agents_online(self) -> int:
        """The agents linked to any live replica of this control plane, this one's included."""
        here = self.hub.online_count
        return here if self.replicas is None else here + await self.replicas.count_linked_elsewhere()

    async def agent_peer(self, server_id: str) -> str | None:
        """The address a server's agent link comes from, as the replica holding it sees it (None:
        not linked)."""
        session = self.hub.session(server_id)
        if session is not None:
            return session.peer
        return None if self.replicas is None else await self.replicas.peer_elsewhere(server_id)

    async def linked_elsewhere(self, server_ids: list[str]) -> set[str]:
        """Those of `server_ids` whose agents are linked to another live replica."""
        if self.replicas is None or not server_ids:
            return set()
        return await self.replicas.linked_elsewhere(server_ids)

    async def call_agent(
        self,
        server_id: str,
        method: str,
        params: dict[str, Any],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the agent is told too
    ) -> Any:
        """One RPC to a server's agent, its failures turned into the contract's errors."""
        limit = self.settings.agent_call_timeout_s if timeout is None else timeout
        with agent_errors():
            return await self.hub.call(server_id, method, params, timeout=limit)

    @asynccontextmanager
    async def agent_stream(
        self, server_id: str, method: str, params: dict[str, Any], *, time_limit: float | None = None
    ) -> AsyncIterator[ReplyStream]:
        """A streamed reply from the agent (downloads, encoded listings), with the contract's
        errors; `time_limit` bounds the whole call (None: no limit, for transfers of any size)."""
        with agent_errors():
            async with self.hub.open_stream(server_id, method, params, timeout=time_limit) as stream:
                yield stream

    @asynccontextmanager
    async def agent_upload(self, server_id: str, method: str, params: dict[str, Any]) -> AsyncIterator[UploadStream]:
        """Bytes streamed to the agent (uploads), with the contract's errors."""
        with agent_errors():
            async with self.hub.open_upload(server_id, method, params) as upload:
                yield upload

    async def audit(self, principal: Principal | None, action: str, **fields: Any) -> None:
        await self.db.run(audit.record, action=action, **self.audit_identity(principal), **fields)

    @staticmethod
    def audit_identity(principal: Principal | None) -> dict[str, Any]:
        """Who an audit entry names: `audit.record`'s org, user and email of `principal`."""
        if principal is None:
            return {}
        return {"org_id": principal.org_id, "user_id": principal.user_id, "actor_email": principal.email}


@contextmanager
def agent_errors() -> Iterator[None]:
    """Turn the hub's failures into the contract's errors."""
    try:
        yield
    except BusAway as exc:
        raise unavailable("bus", BUS_AWAY) from exc
    except AgentOfflineError as exc:
        raise AgentOffline("the server's agent is not connected") from exc
    except AgentTimeoutError as exc:
        raise AgentTimeout("the server's agent did not answer in time") from exc
    except AgentCallError as exc:
        klass = ApiError.for_code(exc.public_code)
        if klass is ApiError or klass is AgentError:
            raise AgentError(f"the server's agent failed: {exc.message}", details={"agent_code": exc.code}) from exc
        raise klass(exc.message, details=exc.details) from exc


def fleet_of(request: HTTPConnection) -> Fleet:
    fleet: Fleet = request.app.state.fleet
    return fleet


async def authenticate(request: HTTPConnection) -> Principal:
    """The caller of an HTTP request or a WebSocket, from its bearer token."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("missing bearer token")
    fleet, token_hash, now = fleet_of(request), hash_token(token.strip()), utcnow()
    kept = fleet.identities.get(token_hash)
    if kept is not None and (kept[1] is None or kept[1] > now):
        return kept[0]
    generation = fleet.identities.generation  # before the read: a write during it makes it stale
    row = await fleet.db.read(identity_for_token, token.strip())
    expires_at = parse(row["expires_at"]) if row is not None and row["expires_at"] else None
    if row is None or (expires_at is not None and expires_at <= now):
        raise Unauthenticated("unknown or expired token")
    if row["token_kind"] == "api" and row["plan"] != "max":
        raise TierRequired(
            "API tokens work only for organisations on plan max",
            details={"required_plan": "max", "current_plan": row["plan"]},
        )
    granted = capabilities_for(row["role"], bool(row["super_admin"]), row["narrowed"])
    principal = Principal.model_validate({**row, "capabilities": granted})
    fleet.identities.keep(token_hash, (principal, expires_at), generation)
    return principal


Caller = Annotated[Principal, Depends(authenticate)]


async def _fleet_dependency(request: HTTPConnection) -> Fleet:
    """`fleet_of` as a dependency: FastAPI runs a plain function's dependency on a worker thread,
    two thread hand-offs per request (5 % of the control plane's time under 50 clients,
    benchmarks/concurrency.py) for an attribute read."""
    return fleet_of(request)


FleetDep = Annotated[Fleet, Depends(_fleet_dependency)]
