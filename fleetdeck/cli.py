"""`fleetdeck`: the one command line, dispatching to the TUI, the embedded stack and each tower.

    fleetdeck [--url URL] [--email EMAIL] [--data-dir DIR] [--theme NAME]   the TUI
    fleetdeck logout [--url URL | --all]                                     forget saved sessions
    fleetdeck local ...                                                      the embedded stack
    fleetdeck serve | admin ...                                              the control plane
    fleetdeck agent ...                                                      the agent

Each branch imports its tower inside the branch: the TUI's start must not pay for loading the
control plane, nor an agent for loading Textual.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from contract import allocator
from fleetdeck import paths
from fleetdeck.settings import Settings, SettingsError, load_settings

if TYPE_CHECKING:
    from control_plane.settings import ServerName
    from fleetdeck.launcher import StackCredentials
    from fleetdeck.running import SharedStack
    from tui.connection import Connection, PendingConnection

CONTROL_PLANE_COMMANDS = frozenset({"serve", "admin"})
# `fleetdeck serve`'s server unless FLEETDECK_SERVER or --server names another: the faster one
# (benchmarks/serving.py; `fleetdeck local` has its own, `fleetdeck.local.LOCAL_SERVER`).
SERVE_SERVER: ServerName = "uvicorn"


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand or the TUI; the process exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    allocator.keep_buffers_mapped()  # every tower moves bulk bytes (see contract.allocator)
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"fleetdeck: {exc}", file=sys.stderr)
        return 2
    if args and args[0] == "local":
        return run_local_command(args[1:], settings)
    if args and args[0] == "logout":
        return run_logout(args[1:], settings)
    if args and args[0] in CONTROL_PLANE_COMMANDS:
        from control_plane.cli import main as control_plane_main

        defaults = settings.for_control_plane(settings.db or paths.default_db_url(), default_server=SERVE_SERVER)
        return _exit_code(control_plane_main(args, defaults, log_level=settings.log_level("WARNING")))
    if args and args[0] == "agent":
        from agent.cli import Defaults
        from agent.cli import main as agent_main

        agent_defaults = Defaults(
            token=settings.agent_token, ssh_port=settings.agent_ssh_port, state_dir=str(paths.agent_state_dir())
        )
        return _exit_code(agent_main(args[1:], agent_defaults))
    return run_tui(_parser(settings).parse_args(args), settings)


def _local_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fleetdeck local", description="the embedded stack (control plane, agent, demo) in the foreground"
    )
    parser.add_argument("--data-dir", type=Path, default=paths.local_stack_dir())
    parser.add_argument("--port", type=int, default=0, help="0 (the default) picks a free port")
    parser.add_argument(
        "--ingress",
        metavar="HOST:PORT",
        default=None,
        help="give the local agent a direct-upload ingress on HOST:PORT (e.g. 127.0.0.1:0); off by default",
    )
    parser.add_argument(
        "--db",
        metavar="URL",
        default=None,
        help="the control plane's database (SQLAlchemy URL, e.g. postgresql+psycopg://...);"
        " default: FLEETDECK_LOCAL_DB, else a SQLite file in the data dir",
    )
    parser.add_argument(
        "--idle-minutes",
        type=float,
        metavar="MINUTES",
        default=None,
        help="exit once no TUI has been attached and no API request has come for MINUTES (how the TUI starts it)",
    )
    parser.add_argument(
        "--stop", action="store_true", help="stop the stack running on --data-dir (the one the TUI left running)"
    )
    return parser


def run_local_command(argv: list[str], settings: Settings) -> int:
    """`fleetdeck local`: the embedded stack in the foreground until SIGINT or SIGTERM; `--stop`
    stops the one running on the data dir."""
    args = _local_parser().parse_args(argv)
    logging.basicConfig(level=settings.log_level("WARNING"), format="%(levelname)s %(name)s: %(message)s")
    if args.stop:
        return stop_local_command(args.data_dir)
    if args.idle_minutes is None and (url := _running_stack(args.data_dir)) is not None:
        print(
            f"fleetdeck: a local stack already runs in {args.data_dir} at {url}"
            " (stop it first: fleetdeck local --stop)",
            file=sys.stderr,
        )
        return 1
    from control_plane.serving import run
    from control_plane.storage.db import DriverMissing
    from fleetdeck.local import LOCAL_SERVER, run_local

    db_url = args.db or settings.local_db
    try:
        run(
            settings.server or LOCAL_SERVER,
            run_local,
            args.data_dir,
            settings,
            args.port,
            args.ingress,
            args.idle_minutes,
            db_url,
        )
    except DriverMissing as exc:
        print(f"fleetdeck: {exc}", file=sys.stderr)
        return 1
    return 0


def _running_stack(data_dir: Path) -> str | None:
    """The base URL of the stack running on `data_dir`, if one answers (a TUI starts its stack
    under the start lock after the same check, so it never makes a second one either)."""
    from fleetdeck.running import find_running

    found = find_running(paths.StackLayout(data_dir.expanduser()), any_version=True)
    return found.base_url if found is not None else None


def stop_local_command(data_dir: Path) -> int:
    from fleetdeck.running import live_run_file, stop_running

    stopped = stop_running(data_dir)
    if stopped is not None:
        print(f"Stopped the local stack at {stopped.base_url} (pid {stopped.pid}).")
        return 0
    unanswering = live_run_file(paths.StackLayout(data_dir.expanduser()).run_file)
    if unanswering is not None:  # a pid taken over by another process, or a stack that hangs
        print(
            f"fleetdeck: process {unanswering.pid} named in {data_dir}'s run file does not answer as its stack"
            f" at {unanswering.base_url}: not stopped.",
            file=sys.stderr,
        )
        return 1
    print(f"No local stack is running in {data_dir}.")
    return 0


def _logout_parser(settings: Settings) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fleetdeck logout",
        description="forget the session saved for a control plane (the next start asks for the password again)",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--url", default=settings.url, help="the control plane's base URL (or FLEETDECK_URL)")
    which.add_argument("--all", action="store_true", help="forget the sessions of every control plane")
    return parser


# The contract has no route that ends a session token (`DELETE /v1/tokens/{id}` is for API
# tokens), so logging out forgets the token here; the server lets it expire.
NOT_REVOKED = "The control plane has no logout route: the token stays valid there until it expires."


def run_logout(argv: list[str], settings: Settings) -> int:
    """`fleetdeck logout`: forget the saved session of `--url`, or of every control plane."""
    from tui.connection import SessionStore, normalise_url

    parser = _logout_parser(settings)
    args = parser.parse_args(argv)
    store = SessionStore(paths.session_store_dir())
    if args.all:
        urls = store.saved_urls()
    elif args.url:
        urls = [normalise_url(args.url)]
    else:
        parser.error("say which control plane: --url URL (or FLEETDECK_URL), or --all")
    forgotten = [url for url in urls if store.forget(url)]
    if not forgotten:
        print("No saved session to forget." if args.all else f"No session is saved for {urls[0]}.")
        return 0
    for url in forgotten:
        print(f"Forgot the session saved for {url}.")
    print(NOT_REVOKED)
    return 0


def _parser(settings: Settings) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fleetdeck",
        description="Run a fleet of servers from the terminal. Without --url, opens the local demo stack.",
        epilog="Other commands: fleetdeck logout|local|serve|admin|agent --help",
    )
    parser.add_argument("--url", default=settings.url, help="control plane base URL (or FLEETDECK_URL)")
    parser.add_argument("--email", help="log in as this user (the password is prompted)")
    parser.add_argument(
        "--data-dir", type=Path, default=paths.local_stack_dir(), help="data directory of the embedded local stack"
    )
    parser.add_argument(
        "--theme",
        default=settings.theme,
        help="fleetdeck-dark, fleetdeck-light, fleetdeck-ansi or fleetdeck-mono (or FLEETDECK_THEME)",
    )
    return parser


def run_tui(args: argparse.Namespace, settings: Settings) -> int:
    _log_to_file(settings)
    if args.url:
        from tui.connection import ConnectError, SessionStore, connect_remote

        try:
            connection = connect_remote(
                args.url, store=SessionStore(paths.session_store_dir()), email=args.email, token=settings.token
            )
        except ConnectError as exc:
            print(f"fleetdeck: {exc}", file=sys.stderr)
            return 1
        return _run_app(connection, args.theme)
    # The app draws its first frame at once, then finds the stack running on the data dir (or
    # starts one, which stays up `local_idle_minutes` after the last TUI leaves) in a thread.
    from fleetdeck.running import SharedStack

    stack = SharedStack(args.data_dir, settings.local_idle_minutes)
    try:
        return _run_app(pending_local_connection(stack), args.theme)
    finally:
        stack.detach()


def pending_local_connection(stack: SharedStack) -> PendingConnection:
    """What the TUI shows, and waits for, while it joins or starts the local stack."""
    from tui.connection import ConnectError, PendingConnection

    def wait() -> Connection:
        from fleetdeck.launcher import StackStartError

        try:
            return local_connection(stack.connect())
        except StackStartError as exc:
            raise ConnectError(str(exc)) from exc

    if stack.seems_running():
        return PendingConnection(f"Connecting to the local control plane in {stack.data_dir}…", wait)
    return PendingConnection(f"Starting the local control plane and agent in {stack.data_dir}…", wait)


def local_connection(credentials: StackCredentials) -> Connection:
    """The TUI's connection to a local stack, as its demo owner."""
    from tui.connection import Connection

    return Connection(credentials.base_url, credentials.token, f"local demo ({credentials.email})", local=True)


def _run_app(connection: Connection | PendingConnection, theme: str | None) -> int:
    from tui.app import FleetdeckApp

    app = FleetdeckApp(connection, theme=theme)
    app.run()
    return app.return_code or 0


def _log_to_file(settings: Settings) -> None:
    """Logs go to a file: anything written to the terminal would tear the TUI apart."""
    log_file = paths.tui_log()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        filename=log_file, level=settings.log_level("INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def _exit_code(result: object) -> int:
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
