"""The control plane's commands: `fleetdeck serve`, `fleetdeck admin ...`.

`main(argv, settings)` takes the arguments from the subcommand on (`["serve", "--db", ...]`) and
the settings the composition root (`fleetdeck.cli`) read: `settings.db_url` is the default of `--db`.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from dataclasses import replace
from functools import partial
from typing import Any, get_args

import anyio
from pydantic import ValidationError

from contract.models import PLANS, Role, ServerCreate, ServerKind
from control_plane.auth import store as accounts
from control_plane.auth.passwords import hash_password
from control_plane.servers import store as server_store
from control_plane.settings import SERVERS, Settings
from control_plane.storage import Database
from control_plane.storage.db import DriverMissing

ROLES = get_args(Role)


def _parser(defaults: Settings) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fleetdeck", description="fleetdeck's control plane commands")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="the control plane alone")
    serve.add_argument(
        "--db", default=defaults.db_url, help="SQLAlchemy URL: a SQLite file (the default) or postgresql+psycopg://..."
    )
    serve.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT")
    serve.add_argument(
        "--server",
        choices=SERVERS,
        default=defaults.server,
        help=f"the HTTP server: uvicorn on asyncio, or hypercorn's trio worker (default: {defaults.server})",
    )

    admin = commands.add_parser("admin", help="manage orgs, users and servers in the database")
    admin_commands = admin.add_subparsers(dest="admin_command", required=True)

    def admin_command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = admin_commands.add_parser(name, help=help_text)
        sub.add_argument("--db", default=defaults.db_url)
        sub.add_argument("--json", action="store_true", help="print the result as JSON")
        return sub

    org = admin_command("create-org", "create an organisation")
    org.add_argument("name")
    org.add_argument("--plan", choices=PLANS, required=True)

    user = admin_command("create-user", "create a user in an organisation")
    user.add_argument("email")
    user.add_argument("--org", required=True)
    user.add_argument("--role", choices=ROLES, required=True)
    user.add_argument("--password", required=True)
    user.add_argument("--super-admin", action="store_true")

    server = admin_command("create-server", "register a server; prints its agent token once")
    server.add_argument("name")
    server.add_argument("--org", required=True)
    server.add_argument("--kind", choices=get_args(ServerKind), default="full")
    server.add_argument("--address", help="an IP address or a host name: where load balancers and servers reach it")

    plan = admin_command("set-plan", "change an organisation's plan")
    plan.add_argument("name")
    plan.add_argument("--plan", choices=PLANS, required=True)
    return parser


class CommandError(Exception):
    """A failure to report in one line, without a traceback."""


def main(argv: list[str], settings: Settings, log_level: str = "WARNING") -> int:
    args = _parser(settings).parse_args(argv)
    logging.basicConfig(level=log_level, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "serve":
            from control_plane.serving import run

            run(args.server, _serve, replace(settings, db_url=args.db, server=args.server), args.listen)
        else:
            _admin(args)
    except (CommandError, DriverMissing) as exc:
        print(f"fleetdeck: {exc}", file=sys.stderr)
        return 1
    return 0


async def _serve(settings: Settings, listen: str) -> None:
    from control_plane.app import build_fleet
    from control_plane.serving import base_url, bind, close_unless_served, serve_fleet

    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise CommandError(f"--listen wants HOST:PORT, not {listen!r}")
    fleet = build_fleet(settings)
    sock = bind(host.strip("[]"), int(port))
    url = base_url(sock)
    stop = anyio.Event()

    async def stop_on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                stop.set()
                return

    try:
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(stop_on_signal)
            await task_group.start(partial(serve_fleet, fleet, sock, shutdown_trigger=stop.wait))
            print(f"fleetdeck control plane at {url}", flush=True)
            await stop.wait()
            task_group.cancel_scope.deadline = anyio.current_time() + 5
    finally:
        close_unless_served(sock)
        fleet.db.dispose()


def _admin(args: argparse.Namespace) -> None:
    db = Database(args.db)
    db.migrate()
    try:
        result = _ADMIN[args.admin_command](db, args)
    finally:
        db.dispose()
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


def _org(db: Database, name: str) -> dict[str, Any]:
    org = db.run_sync(accounts.org_by_name, name)
    if org is None:
        raise CommandError(f"no organisation named {name!r}")
    return org


def _create_org(db: Database, args: argparse.Namespace) -> dict[str, Any]:
    if db.run_sync(accounts.org_by_name, args.name):
        raise CommandError(f"an organisation named {args.name!r} exists already")
    return db.run_sync(accounts.create_org, args.name, args.plan)


def _create_user(db: Database, args: argparse.Namespace) -> dict[str, Any]:
    org = _org(db, args.org)
    if db.run_sync(accounts.user_by_email, args.email):
        raise CommandError(f"a user with email {args.email!r} exists already")
    user = db.run_sync(
        accounts.create_user, args.email, args.email.split("@")[0], hash_password(args.password), args.super_admin
    )
    db.run_sync(accounts.add_membership, user["id"], org["id"], args.role)
    return {
        "id": user["id"],
        "email": user["email"],
        "org_id": org["id"],
        "role": args.role,
        "super_admin": args.super_admin,
    }


def _create_server(db: Database, args: argparse.Namespace) -> dict[str, Any]:
    org = _org(db, args.org)
    try:  # the rules of `POST /v1/servers`
        server = ServerCreate(name=args.name, kind=args.kind, address=args.address)
    except ValidationError as exc:
        error = exc.errors()[0]
        field, problem = str(error["loc"][0]), error["msg"].removeprefix("Value error, ")
        raise CommandError(f"{field if field == 'name' else '--' + field} {error['input']!r}: {problem}") from None
    if db.run_sync(server_store.server_by_name, org["id"], server.name):
        raise CommandError(f"a server named {server.name!r} exists already in {args.org}")
    row, token = db.run_sync(server_store.create_server, org["id"], server.name, server.kind, server.address)
    return {"id": row["id"], "name": row["name"], "kind": row["kind"], "org_id": org["id"], "agent_token": token}


def _set_plan(db: Database, args: argparse.Namespace) -> dict[str, Any]:
    org = _org(db, args.name)
    db.run_sync(accounts.set_org_plan, org["id"], args.plan)
    return {"id": org["id"], "name": org["name"], "plan": args.plan}


_ADMIN = {
    "create-org": _create_org,
    "create-user": _create_user,
    "create-server": _create_server,
    "set-plan": _set_plan,
}
