"""Cross-server copy and move: the control plane only directs, the bytes go server to server.

Four agent calls (see `agent.files.remote_copy`): the source prepares an ephemeral key and
checks the selection, the destination checks where it goes and lets that key in (from the
source's address only, for the receive command only), the source pushes over SSH, and both
close, whatever happened. The routes check roles and write the audit entries.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
from typing import Any, Protocol

import anyio

from contract.errors import AgentOffline, ApiError, ValidationFailed
from control_plane.servers.routes import server_row
from control_plane.state import Fleet

log = logging.getLogger("fleetdeck.files")

CLOSE_TIMEOUT_S = 15.0


class Target(Protocol):
    @property
    def server_id(self) -> str: ...

    def params(self, **extra: Any) -> dict[str, Any]: ...


def new_transfer_id() -> str:
    return secrets.token_hex(16)


async def transfer(
    fleet: Fleet,
    org_id: str,
    source: Target,
    dest: Target,
    paths: list[str],
    destination: str,
    *,
    overwrite: bool,
    move: bool,
    transfer_id: str,
) -> dict[str, Any]:
    """Copy (or move) `paths` of `source` into `destination` of `dest`; the agent's answer
    (``{copied|moved, skipped}``). Both agents must be online."""
    for server_id in (source.server_id, dest.server_id):
        if not await fleet.agent_online(server_id):
            raise AgentOffline("a server's agent is not connected", details={"server_id": server_id})
    source_ip = await _source_ip(fleet, org_id, source.server_id)
    dest_row = await server_row(fleet, org_id, dest.server_id)
    try:
        prepared = await fleet.call_agent(
            source.server_id, "fs.xfer.prepare", source.params(transfer_id=transfer_id, paths=paths)
        )
        accepted = await fleet.call_agent(
            dest.server_id,
            "fs.xfer.accept",
            dest.params(
                transfer_id=transfer_id,
                destination=destination,
                overwrite=overwrite,
                names=prepared["names"],
                public_key=prepared["public_key"],
                source_ip=source_ip,
            ),
        )
        host = accepted.get("host") or dest_row.get("address")
        if not host:
            raise ValidationFailed(
                "the destination server has no address to reach it at: set its address, or start its agent "
                "with --ssh-host",
                details={"errors": [{"loc": ["body", "to", "server_id"], "msg": "no address"}]},
            )
        push = source.params(
            transfer_id=transfer_id,
            paths=paths,
            host=host,
            port=accepted["port"],
            user=accepted["user"],
            host_keys=accepted.get("host_keys") or [],
            remove_sources=move,
        )
        result: dict[str, Any] = await fleet.call_agent(
            source.server_id, "fs.xfer.push", push, timeout=fleet.settings.transfer_timeout_s
        )
        return result
    finally:
        with anyio.CancelScope(shield=True):
            await _close(fleet, transfer_id, source.server_id, dest.server_id)


async def _close(fleet: Fleet, transfer_id: str, *server_ids: str) -> None:
    """Both sides drop the transfer's key and spec (an agent gone now sweeps them once expired)."""
    for server_id in server_ids:
        with anyio.move_on_after(CLOSE_TIMEOUT_S):
            try:
                await fleet.call_agent(server_id, "fs.xfer.close", {"transfer_id": transfer_id})
            except ApiError as exc:
                log.warning("transfer %s: server %s could not close it: %s", transfer_id, server_id, exc.message)


async def _source_ip(fleet: Fleet, org_id: str, server_id: str) -> str:
    """The address the destination lets the key in from: the source server's address when it is
    an IP address, else the address its agent link comes from."""
    row = await server_row(fleet, org_id, server_id)
    address = row.get("address")
    if address:
        try:
            return str(ipaddress.ip_address(address))
        except ValueError:
            pass
    peer = await fleet.agent_peer(server_id)
    if not peer:
        raise AgentOffline("the source server's agent is not connected", details={"server_id": server_id})
    return str(ipaddress.ip_address(peer))
