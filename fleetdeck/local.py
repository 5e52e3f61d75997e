"""`fleetdeck local`: the embedded default. A control plane on 127.0.0.1, one agent linked to it
in the same process, a demo workspace and a demo org, until SIGINT or SIGTERM, or, started for
the TUI (`idle_minutes`), until it has been idle that long (`fleetdeck.running` says how).

Written against anyio, it runs on the event loop of the control plane's server
(`control_plane.serving.run`). The agent is trio code: under hypercorn's trio worker it shares the
stack's trio loop; under uvicorn (asyncio) it gets a thread with a `trio.run` of its own, and
stops with the stack all the same."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import orjson
import trio

from agent import unix_sockets
from agent.jobs.toolkit.host import HostLayout, SystemLayout
from agent.load_balancers.settings import LbSettings
from agent.runner import AgentConfig, run_agent
from agent.sites import write_atomically
from control_plane.app import build_fleet
from control_plane.auth import store as accounts
from control_plane.serving import base_url, bind, close_unless_served, serve_fleet
from control_plane.settings import ServerName
from fleetdeck import local_mariadb, local_nginx, local_php, running
from fleetdeck.demo import ensure_account, ensure_workspace, write_private
from fleetdeck.launcher import free_ports
from fleetdeck.local_children import Child, run_child
from fleetdeck.paths import StackLayout, private_dir, stack_dir
from fleetdeck.settings import Settings

log = logging.getLogger("fleetdeck.local")

AGENT_READY_TIMEOUT_S = 30.0
# The stack's server unless FLEETDECK_SERVER names another. Not `fleetdeck serve`'s uvicorn
# (`control_plane.serving` has the figures): the whole test suite runs on this stack, and only
# the API, jobs, files, load-balancer and local-stack tests have been run under uvicorn; the
# stack serves one user's TUI, far from the request rates where uvicorn pulls ahead; and under
# hypercorn its control plane and agent share one trio loop on one thread, with no second loop.
LOCAL_SERVER: ServerName = "hypercorn"


async def run_local(
    data_dir: Path,
    settings: Settings,
    port: int = 0,
    ingress: str | None = None,
    idle_minutes: float | None = None,
    db_url: str | None = None,
) -> None:
    """Run until a signal, or, with `idle_minutes`, until idle that long with no TUI attached.
    `db_url`: the control plane's database (default: the SQLite file of the data dir)."""
    layout = StackLayout(stack_dir(data_dir))
    activity = RequestActivity()
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        home, agent_state = layout.home, layout.agent_state
        stack_dir(home)  # as root, its sites' users pass through it to their own folders
        await anyio.to_thread.run_sync(ensure_workspace, home, agent_state, layout.site_logs)
        # Stacks killed on purpose could not remove their sockets folders: nobody holds them now.
        for stale in await anyio.to_thread.run_sync(unix_sockets.sweep_stale_runtime_dirs):
            log.info("removed %s, the sockets folder of a stack that is gone", stale)
        sockets = await anyio.to_thread.run_sync(unix_sockets.runtime_dir, layout.root)
        db_url = db_url or layout.db_url
        fleet = build_fleet(settings.for_control_plane(db_url, default_server=LOCAL_SERVER))
        account = ensure_account(fleet.db, layout)
        sock = bind("127.0.0.1", port)
        url = base_url(sock)
        try:
            async with anyio.create_task_group() as stack:
                await stack.start(partial(serve_fleet, fleet, sock, wrap=activity.around))
                lb_ports = dict(zip((80, 443), free_ports(2), strict=True))
                children = await anyio.to_thread.run_sync(_prepare_services, layout, sockets)
                for child in children:
                    if child.setup is None:
                        await stack.start(run_child, child)
                agent = AgentConfig(
                    urls=(url,),
                    token=account.agent_token,
                    home=str(home),
                    state_dir=str(agent_state),
                    ingress=ingress,
                    lb=LbSettings(bind="127.0.0.1", port_map=lb_ports),
                    host_layout=str(layout.host_layout),  # its nginx, PHP-FPM and MariaDB are the stack's own
                )
                if fleet.settings.server == "hypercorn":
                    stack.start_soon(_supervised_agent, agent)
                else:
                    stack.start_soon(_agent_on_its_own_trio, agent)
                with anyio.fail_after(AGENT_READY_TIMEOUT_S):
                    # The hub has no "came online" event to wait on; 20 ms polls cost nothing at start-up.
                    while not fleet.hub.is_online(account.server_id):  # noqa: ASYNC110
                        await anyio.sleep(0.02)
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
                write_private(layout.run_file, running.RunFile(url, os.getpid(), running.stack_version()).to_json())
                # A first start's blocking setup (MariaDB's data folder: a second or so of CPU on
                # a fresh data dir) waits until the server list can be drawn: nothing there needs it.
                for child in children:
                    if child.setup is not None:
                        await stack.start(run_child, child)
                print(f"fleetdeck is running at {url}", flush=True)
                print(f"credentials: {layout.credentials}", flush=True)
                if idle_minutes is not None:
                    _stop_writing_to_the_launcher()
                    stack.start_soon(_exit_when_idle, layout, idle_minutes * 60, activity, stack.cancel_scope)
                async for signum in signals:
                    log.info("stopping on %s", signal.Signals(signum).name)
                    break
                stack.cancel_scope.cancel()
        finally:
            if (run := running.read_run_file(layout.run_file)) is not None and run.pid == os.getpid():
                layout.run_file.unlink(missing_ok=True)
            close_unless_served(sock)
            fleet.db.dispose()
            unix_sockets.remove_runtime_dir(sockets)  # its services have stopped: their sockets are gone


def _prepare_services(layout: StackLayout, sockets: Path) -> list[Child]:
    """Write the configuration of the stack's own services and the agent's host layout pointing
    at them; the services to run (those installed). `sockets`: their unix sockets' folder."""
    nginx, web = local_nginx.prepare(layout.nginx, *free_ports(2))
    php, fpms = local_php.prepare(private_dir(layout.php), sockets)
    mariadb, databases = local_mariadb.prepare(private_dir(layout.mariadb), sockets)
    system = SystemLayout(sites_log_dir=str(layout.site_logs))  # never the machine's /var/log
    host = HostLayout(nginx=nginx, php=php, mariadb=mariadb, system=system)
    write_atomically(str(layout.host_layout), host.model_dump_json(indent=2).encode())
    return [*databases, *fpms, *web]


async def _supervised_agent(config: AgentConfig) -> None:
    """The in-process agent, restarted if it ever fails: on a real server the agent is its own
    process, so its failure never takes the control plane down; here it must not either."""
    while True:
        try:
            await run_agent(config)
        except Exception:
            log.exception("the local agent failed; restarting it in 1 s")
        await trio.sleep(1)


async def _agent_on_its_own_trio(config: AgentConfig) -> None:
    """The in-process agent beside an asyncio stack: a thread running it with `trio.run`, until
    this task is cancelled; then the agent is cancelled and its thread waited for."""
    stopping = threading.Event()

    async def until_stopping() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_supervised_agent, config)
            await trio.to_thread.run_sync(stopping.wait)
            nursery.cancel_scope.cancel()

    async with anyio.create_task_group() as beside:
        # A thread's run is not cancelled with its task: the task waits until the agent has stopped.
        beside.start_soon(anyio.to_thread.run_sync, trio.run, until_stopping)
        try:
            await anyio.sleep_forever()
        finally:
            stopping.set()


Scope = MutableMapping[str, Any]
Channel = Callable[..., Awaitable[Any]]  # ASGI's receive and send
ASGIApp = Callable[[Scope, Channel, Channel], Awaitable[None]]


class RequestActivity:
    """When the last API request ended, and whether one is still running (a stream the TUI
    follows is activity for as long as it lasts). WebSockets (agent links) are not requests."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.last_ended = 0.0  # the event loop's clock
        self._quiet = anyio.Event()
        self._quiet.set()

    def around(self, app: ASGIApp) -> ASGIApp:
        """`app`, noting each HTTP request's start and end here."""

        async def noted(scope: Scope, receive: Channel, send: Channel) -> None:
            if scope["type"] != "http":
                return await app(scope, receive, send)
            self.in_flight += 1
            if self.in_flight == 1:
                self._quiet = anyio.Event()
            try:
                return await app(scope, receive, send)
            finally:
                self.in_flight -= 1
                self.last_ended = anyio.current_time()
                if self.in_flight == 0:
                    self._quiet.set()

        return noted

    async def quiet_since(self) -> float:
        """Once no request runs: when the last one ended."""
        await self._quiet.wait()
        return self.last_ended


async def _exit_when_idle(
    layout: StackLayout, idle_s: float, activity: RequestActivity, stack_scope: anyio.CancelScope
) -> None:
    """Cancel `stack_scope` once no TUI has been starting or attached, and no API request has
    come, for `idle_s` seconds; the locks taken to decide are held until the process is gone."""
    while True:
        await anyio.to_thread.run_sync(running.wait_until_unlocked, layout.start_lock, abandon_on_cancel=True)
        await anyio.to_thread.run_sync(running.wait_until_unlocked, layout.attach_lock, abandon_on_cancel=True)
        await _quiet_for(idle_s, anyio.current_time(), activity)
        starting = running.lock_if_free(layout.start_lock)
        attached = running.lock_if_free(layout.attach_lock) if starting is not None else None
        if starting is not None and attached is not None:
            # Gone before the start lock is released: a TUI waiting on it starts a new stack.
            layout.run_file.unlink(missing_ok=True)
            log.info("idle for %.0f s with no TUI attached: stopping", idle_s)
            stack_scope.cancel()
            return
        for descriptor in (starting, attached):
            if descriptor is not None:
                os.close(descriptor)


async def _quiet_for(idle_s: float, since: float, activity: RequestActivity) -> None:
    """Return once no request has run for `idle_s` seconds, nor since `since` (the loop's clock)."""
    while True:
        deadline = max(since, await activity.quiet_since()) + idle_s
        if deadline <= anyio.current_time():
            return
        await anyio.sleep_until(deadline)  # a request in the meantime moves the deadline


def _stop_writing_to_the_launcher() -> None:
    """Point stdout at /dev/null: the launcher reads it only until the address, and once that TUI
    has quit, a write to its pipe would fail."""
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
