"""`fleetdeck local`: the embedded default. A control plane on 127.0.0.1, one agent linked to it
in the same process, a demo workspace and a demo org, until SIGINT or SIGTERM."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import orjson
import trio

from agent.load_balancers.settings import LbSettings
from agent.runner import AgentConfig, run_agent
from control_plane.app import build_fleet
from control_plane.auth import store as accounts
from control_plane.serving import base_url, bind, close_unless_served, serve_fleet
from fleetdeck.demo import ensure_account, ensure_workspace, write_private
from fleetdeck.launcher import free_port
from fleetdeck.paths import StackLayout, private_dir
from fleetdeck.settings import Settings

log = logging.getLogger("fleetdeck.local")

AGENT_READY_TIMEOUT_S = 30.0


async def run_local(data_dir: Path, settings: Settings, port: int = 0, ingress: str | None = None) -> None:
    layout = StackLayout(private_dir(data_dir))
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        home, agent_state = layout.home, layout.agent_state
        await trio.to_thread.run_sync(ensure_workspace, home, agent_state)
        db_url = layout.db_url
        fleet = build_fleet(settings.for_control_plane(db_url))
        account = ensure_account(fleet.db, layout)
        sock = bind("127.0.0.1", port)
        url = base_url(sock)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(serve_fleet, fleet, sock)
                lb_ports = {80: free_port(), 443: free_port()}
                agent = AgentConfig(
                    url=url,
                    token=account.agent_token,
                    home=str(home),
                    state_dir=str(agent_state),
                    ingress=ingress,
                    lb=LbSettings(bind="127.0.0.1", port_map=lb_ports),
                )
                nursery.start_soon(_supervised_agent, agent)
                with trio.fail_after(AGENT_READY_TIMEOUT_S):
                    # The hub has no "came online" event to wait on; 20 ms polls cost nothing at start-up.
                    while not fleet.hub.is_online(account.server_id):  # noqa: ASYNC110
                        await trio.sleep(0.02)
                org = fleet.db.run_sync(accounts.org_by_name, "demo")
                user = fleet.db.run_sync(accounts.user_by_email, account.email)
                assert org is not None and user is not None
                token, _ = fleet.db.run_sync(accounts.create_session, user["id"], org["id"], fleet.settings.session_ttl)
                credentials = {
                    "base_url": url,
                    "email": account.email,
                    "password": account.password,
                    "token": token,
                    "server_id": account.server_id,
                    "db_url": db_url,
                    "lb_ports": {str(public): actual for public, actual in lb_ports.items()},
                }
                write_private(layout.credentials, orjson.dumps(credentials, option=orjson.OPT_INDENT_2).decode())
                print(f"fleetdeck is running at {url}", flush=True)
                print(f"credentials: {layout.credentials}", flush=True)
                async for signum in signals:
                    log.info("stopping on %s", signal.Signals(signum).name)
                    break
                nursery.cancel_scope.cancel()
        finally:
            close_unless_served(sock)
            fleet.db.dispose()


async def _supervised_agent(config: AgentConfig) -> None:
    """The in-process agent, restarted if it ever fails: on a real server the agent is its own
    process, so its failure never takes the control plane down; here it must not either."""
    while True:
        try:
            await run_agent(config)
        except Exception:
            log.exception("the local agent failed; restarting it in 1 s")
        await trio.sleep(1)
