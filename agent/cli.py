"""``fleetdeck agent``: run the agent until SIGINT or SIGTERM; ``fleetdeck agent run ...``: one job here."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from dataclasses import dataclass

import trio

from agent import __version__
from agent.files.ingress import parse_listen
from agent.files.remote_copy import SshSettings
from agent.jobs.metrics import SAMPLE_EVERY_S
from agent.link.client import link_urls
from agent.load_balancers.acme import LETS_ENCRYPT_DIRECTORY
from agent.load_balancers.settings import LbSettings, parse_port_map
from agent.runner import AgentConfig, run_agent
from contract import allocator
from contract.link import protocol

log = logging.getLogger("fleetdeck.agent")

TOKEN_ENV = "FLEETDECK_AGENT_TOKEN"  # read by `fleetdeck agent`, named here in messages


@dataclass(frozen=True)
class Defaults:
    """What the command line does not say. `fleetdeck agent` gives them (from the environment and
    the user's folders); `python -m agent` has none, so it needs --token and --state-dir."""

    token: str | None = None
    ssh_port: int = 22
    state_dir: str | None = None


def parser(defaults: Defaults = Defaults()) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fleetdeck agent",
        description="Link this server to a fleetdeck control plane.",
        epilog="`fleetdeck agent run <family> <action> ...` runs one job on this server instead (see its --help).",
    )
    p.add_argument(
        "--url",
        action="append",
        required=True,
        help="the control plane's base URL, e.g. https://fleet.example.com; repeat it for each replica of"
        " a cluster: the agent links to one and moves on to the next when it goes away",
    )
    p.add_argument(
        "--token",
        default=defaults.token,
        help=f"the agent token (prefer the {TOKEN_ENV} environment variable: arguments are visible in ps)",
    )
    p.add_argument("--home", default="/home", help="the folder holding the sites (default: /home)")
    p.add_argument(
        "--state-dir",
        default=defaults.state_dir,
        required=defaults.state_dir is None,
        help=f"the agent's state folder (default: {defaults.state_dir})",
    )
    ssh = p.add_argument_group("cross-server copies", "how other servers' agents reach this one over SSH")
    ssh.add_argument("--ssh-port", type=int, default=defaults.ssh_port, help=f"default: {defaults.ssh_port}")
    ssh.add_argument("--ssh-host", default=None, help="the address to connect to (default: the server's address)")
    ssh.add_argument("--ssh-user", default=None, help="the account (default: the one the agent runs as)")
    ssh.add_argument(
        "--ssh-authorized-keys", default=None, help="that account's authorized_keys (default: ~/.ssh/authorized_keys)"
    )
    ssh.add_argument(
        "--ssh-host-key",
        action="append",
        default=[],
        help="a public host key file of this server's sshd (repeatable; default: /etc/ssh/ssh_host_*_key.pub)",
    )
    p.add_argument(
        "--ingress",
        metavar="HOST:PORT",
        default=None,
        help="serve direct uploads (signed by the control plane, up to 2 GiB) over HTTP on HOST:PORT",
    )
    p.add_argument(
        "--ingress-url",
        metavar="URL",
        default=None,
        help="the ingress's public base URL, when it is not http://HOST:PORT (e.g. behind a TLS proxy)",
    )
    p.add_argument(
        "--host-layout",
        metavar="FILE",
        default=None,
        help="a JSON file saying where this server's services (nginx, PHP-FPM, MariaDB...) live when not"
        " where Debian puts them, and how to control them; re-read when it changes",
    )
    p.add_argument(
        "--metrics-interval",
        metavar="SECONDS",
        type=float,
        default=SAMPLE_EVERY_S,
        help=f"record a metrics sample this often, for metrics.history and the alerts (default: {SAMPLE_EVERY_S:g};"
        " 0: only when the metrics are asked for)",
    )
    p.add_argument(
        "--pulse-interval",
        metavar="SECONDS",
        type=float,
        default=protocol.DEFAULT_PULSE_S,
        help=f"send the control plane CPU, memory and disk use this often, for the live sparklines"
        f" (default: {protocol.DEFAULT_PULSE_S:g}; 0: never)",
    )
    lb = p.add_argument_group("load balancers", "how this server serves the load balancers it is the node of")
    lb.add_argument("--lb-bind", metavar="ADDR", default=None, help="the listen address (default: all)")
    lb.add_argument(
        "--lb-port-map",
        metavar="80:PORT,443:PORT",
        default=None,
        help="listen on these ports instead of 80/443, with the agent's own nginx and HAProxy (demo, tests)",
    )
    lb.add_argument(
        "--lb-root", metavar="DIR", default=None, help="configurations, sockets, certificates (default: STATE_DIR/lb)"
    )
    lb.add_argument(
        "--acme-directory",
        metavar="URL",
        default=LETS_ENCRYPT_DIRECTORY,
        help="the ACME CA's directory (default: Let's Encrypt)",
    )
    lb.add_argument(
        "--acme-ca-bundle", metavar="FILE", default=None, help="the CA certificates to trust for the ACME directory"
    )
    lb.add_argument(
        "--lb-test-hook",
        action="store_true",
        help=argparse.SUPPRESS,  # tests: LB_ROOT/test-hook-ENGINE.conf is added verbatim to every render
    )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--version", action="version", version=f"fleetdeck agent {__version__}")
    return p


def main(argv: list[str], defaults: Defaults = Defaults()) -> int:
    """Entry point; `argv` are the arguments after ``agent``."""
    allocator.keep_buffers_mapped()  # transfers: see contract.allocator
    if argv[:1] == ["run"]:
        from agent.jobs.local import main as run_job

        return run_job(argv[1:], defaults.state_dir)
    if argv[:1] == ["receive"]:  # the forced SSH command of a cross-server copy
        from agent.files.remote_copy import receive_main

        return receive_main(argv[1:])
    args = parser(defaults).parse_args(argv)
    if not args.token:
        print(f"fleetdeck agent: no token: pass --token or set {TOKEN_ENV}", file=sys.stderr)
        return 2
    try:
        link_urls(args.url)
    except ValueError as exc:
        print(f"fleetdeck agent: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ssh = SshSettings(
        port=args.ssh_port,
        host=args.ssh_host,
        user=args.ssh_user,
        authorized_keys=args.ssh_authorized_keys,
        host_keys=tuple(args.ssh_host_key),
    )
    if args.ingress is not None:
        try:
            parse_listen(args.ingress)
        except ValueError as exc:
            print(f"fleetdeck agent: --ingress: {exc}", file=sys.stderr)
            return 2
    if args.metrics_interval < 0:
        print("fleetdeck agent: --metrics-interval: a number of seconds, 0 or more", file=sys.stderr)
        return 2
    if not args.pulse_interval >= 0:
        print("fleetdeck agent: --pulse-interval: a number of seconds, 0 or more", file=sys.stderr)
        return 2
    try:
        port_map = parse_port_map(args.lb_port_map) if args.lb_port_map else {}
    except ValueError as exc:
        print(f"fleetdeck agent: --lb-port-map: {exc}", file=sys.stderr)
        return 2
    lb = LbSettings(
        bind=args.lb_bind,
        port_map=port_map,
        root=args.lb_root,
        acme_directory=args.acme_directory,
        acme_ca_bundle=args.acme_ca_bundle,
        broken_render_hook=args.lb_test_hook,
    )
    config = AgentConfig(
        urls=tuple(args.url),
        token=args.token,
        home=args.home,
        state_dir=args.state_dir,
        ssh=ssh,
        ingress=args.ingress,
        ingress_url=args.ingress_url,
        lb=lb,
        host_layout=args.host_layout,
        metrics_every_s=args.metrics_interval,
        pulse_every_s=args.pulse_interval,
    )
    trio.run(serve_until_signal, config)
    return 0


async def serve_until_signal(config: AgentConfig) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(run_agent, config)
            async for signum in signals:
                log.info("stopping on %s", signal.Signals(signum).name)
                break
            nursery.cancel_scope.cancel()
