"""``fleetdeck agent run <family> <action> [args]``: one job, here, without a control plane.

The same handler and the same argv as a job the control plane sends (``fleetdeck agent run site
list --json`` is the ``site.list`` job); stdout lines go to stdout, stderr lines to stderr, and
the exit code is the job's. ``--home`` and ``--state-dir`` come before the family.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TextIO

import trio

from agent import __version__
from agent.jobs.kinds import all_kinds
from agent.jobs.toolkit.base import JobContext, run_kind
from agent.jobs.toolkit.host import LayoutFile
from agent.jobs.toolkit.output import STDOUT, Output
from agent.sites import SiteRegistry


class TerminalOutput(Output):
    """Lines straight to this process's stdout and stderr; JSON pretty printed."""

    pretty = True

    def __init__(self, stdout: TextIO | None = None, stderr: TextIO | None = None) -> None:
        self._out = stdout or sys.stdout
        self._err = stderr or sys.stderr

    def lines(self, stream: str, texts: list[str]) -> None:
        target = self._out if stream == STDOUT else self._err
        target.write("\n".join(texts) + "\n")
        if target is self._err:
            target.flush()


def _kinds_help() -> str:
    families: dict[str, list[str]] = {}
    for kind in all_kinds().values():
        families.setdefault(kind.family, []).append(kind.action)
    return "jobs:\n" + "\n".join(f"  {family:<9} {' | '.join(actions)}" for family, actions in families.items())


def parser(default_state_dir: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fleetdeck agent run",
        description="Run one job on this server, as the control plane would, and print its output.",
        epilog=_kinds_help() + "\n\n`fleetdeck agent run <family> <action> --help` shows a job's arguments.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--home", default="/home", help="the folder holding the sites (default: /home)")
    p.add_argument(
        "--state-dir",
        default=default_state_dir,
        required=default_state_dir is None,
        help=f"the agent's state folder (default: {default_state_dir})",
    )
    p.add_argument(
        "--host-layout", metavar="FILE", default=None, help="where the services live (see `fleetdeck agent --help`)"
    )
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("family", help="the job's family: site, cron, service, ...")
    p.add_argument("argv", nargs=argparse.REMAINDER, help="the action and its arguments")
    return p


def main(argv: list[str], default_state_dir: str | None = None) -> int:
    """Entry point; `argv` are the arguments after ``agent run``; `fleetdeck agent run` gives the
    default state folder, `python -m agent run` needs --state-dir."""
    p = parser(default_state_dir)
    args = p.parse_args(argv)
    kinds = all_kinds()
    actions = [k.action for k in kinds.values() if k.family == args.family]
    if not args.argv or args.argv[0] in ("-h", "--help"):
        if not actions:
            p.error(f"no job family {args.family!r}")
        print(f"usage: fleetdeck agent run {args.family} {{{','.join(actions)}}} ...", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level, format="%(levelname)s %(name)s: %(message)s")
    state_dir = args.state_dir
    ctx = JobContext(
        home=args.home,
        state_dir=state_dir,
        sites=SiteRegistry(state_dir),
        version=__version__,
        layout=LayoutFile(args.host_layout),
    )
    job_argv = [args.family, *args.argv]
    kind = f"{args.family}.{args.argv[0]}"
    out = TerminalOutput()
    try:
        code = trio.run(lambda: run_kind(kinds, kind, job_argv, ctx, out, traceback_level=logging.DEBUG))
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stdout.flush()
    return code
