"""`fleetdeck`: the one command line, dispatching to the TUI, the embedded stack and each tower.

    fleetdeck [--url URL] [--email EMAIL] [--data-dir DIR] [--theme NAME]   the TUI
    fleetdeck local ...                                                      the embedded stack
    fleetdeck serve | admin ...                                              the control plane
    fleetdeck agent ...                                                      the agent

Each branch imports its tower inside the branch: the TUI's start must not pay for loading the
control plane, nor an agent for loading Textual.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

if TYPE_CHECKING:
    from tui.connection import Connection

CONTROL_PLANE_COMMANDS = frozenset({"serve", "admin"})


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand or the TUI; the process exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] == "local":
        return run_local_command(args[1:])
    if args and args[0] in CONTROL_PLANE_COMMANDS:
        from control_plane.cli import main as control_plane_main

        return _exit_code(control_plane_main(args))
    if args and args[0] == "agent":
        from agent.cli import main as agent_main

        return _exit_code(agent_main(args[1:]))
    return run_tui(_parser().parse_args(args))


def _local_parser() -> argparse.ArgumentParser:
    from fleetdeck.embedded import default_data_dir

    parser = argparse.ArgumentParser(
        prog="fleetdeck local", description="the embedded stack (control plane, agent, demo) in the foreground"
    )
    parser.add_argument("--data-dir", type=Path, default=default_data_dir())
    parser.add_argument("--port", type=int, default=0, help="0 (the default) picks a free port")
    parser.add_argument(
        "--ingress",
        metavar="HOST:PORT",
        default=None,
        help="give the local agent a direct-upload ingress on HOST:PORT (e.g. 127.0.0.1:0); off by default",
    )
    return parser


def run_local_command(argv: list[str]) -> int:
    """`fleetdeck local`: the embedded stack in the foreground until SIGINT or SIGTERM."""
    import trio

    from fleetdeck.local import run_local

    args = _local_parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("FLEETDECK_LOG", "WARNING"), format="%(levelname)s %(name)s: %(message)s")
    trio.run(run_local, args.data_dir, args.port, args.ingress)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fleetdeck",
        description="Run a fleet of servers from the terminal. Without --url, opens the local demo stack.",
        epilog="Other commands: fleetdeck local|serve|admin|agent --help",
    )
    parser.add_argument("--url", default=os.environ.get("FLEETDECK_URL"), help="control plane base URL")
    parser.add_argument("--email", help="log in as this user (the password is prompted)")
    parser.add_argument("--data-dir", type=Path, help="data directory of the embedded local stack")
    parser.add_argument("--theme", help="fleetdeck-dark, fleetdeck-light or fleetdeck-ansi (or FLEETDECK_THEME)")
    return parser


def run_tui(args: argparse.Namespace) -> int:
    _log_to_file()
    from fleetdeck.embedded import EmbeddedStack, EmbeddedStartError
    from tui.connection import ConnectError, connect_remote

    if args.url:
        try:
            connection = connect_remote(args.url, email=args.email)
        except ConnectError as exc:
            print(f"fleetdeck: {exc}", file=sys.stderr)
            return 1
        return _run_app(connection, args.theme)

    stack = EmbeddedStack(args.data_dir)
    print(f"Starting the local fleetdeck stack in {stack.data_dir} …", file=sys.stderr, flush=True)
    try:
        stack.start()
    except EmbeddedStartError as exc:
        print(f"fleetdeck: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        stack.stop()
        return 130
    try:
        return _run_app(stack.connection(), args.theme)
    finally:
        stack.stop()


def _run_app(connection: Connection, theme: str | None) -> int:
    from tui.app import FleetdeckApp

    app = FleetdeckApp(connection, theme=theme)
    app.run()
    return app.return_code or 0


def _log_to_file() -> None:
    """Logs go to a file: anything written to the terminal would tear the TUI apart."""
    log_dir = Path(platformdirs.user_log_dir("fleetdeck"))
    log_dir.mkdir(parents=True, exist_ok=True)
    level = os.environ.get("FLEETDECK_LOG", "INFO").upper()
    logging.basicConfig(
        filename=log_dir / "tui.log",
        level=level if level in logging.getLevelNamesMapping() else "INFO",
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _exit_code(result: object) -> int:
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
