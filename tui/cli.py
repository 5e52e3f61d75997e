"""`fleetdeck`: the TUI, and the dispatcher of the other components' subcommands.

    fleetdeck [--url URL] [--email EMAIL] [--data-dir DIR] [--theme NAME]   the TUI
    fleetdeck local | serve | admin ...                                      control plane commands
    fleetdeck agent ...                                                      the agent

Subcommands are imported by module name only when used, so the TUI never imports the control
plane (nor the control plane the TUI).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

if TYPE_CHECKING:
    from .connection import Connection

CONTROL_PLANE_COMMANDS = frozenset({"local", "serve", "admin"})


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand or the TUI; the process exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in CONTROL_PLANE_COMMANDS:
        return _exit_code(importlib.import_module("control_plane.cli").main(args))
    if args and args[0] == "agent":
        return _exit_code(importlib.import_module("agent.cli").main(args[1:]))
    return run_tui(_parser().parse_args(args))


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
    from .connection import ConnectError, connect_remote
    from .embedded import EmbeddedStack, EmbeddedStartError

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
    from .app import FleetdeckApp

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
