"""``db ...``: MariaDB databases, accounts, grants and dumps, through the server's own client.

The agent acts as the layout's account (root, unix_socket authentication) over the server's
socket: ``mariadb --no-defaults --protocol=socket --socket=S --user=root`` with the statements on
stdin, never in argv (a password is a string literal there). Names come validated by the catalog
(`DbName`, `DbUser`, `DbHost`) and are quoted here all the same; a password is escaped as a
string literal and scrubbed from any error the server sends back. Each statement script starts by
setting the session's SQL mode, so the escaping does not depend on the server's configuration.

Reads select one ``JSON_OBJECT`` per row: with ``--batch --raw`` each row is one line of JSON.

Dumps live in a site's files, resolved through the site's jail (a path cannot lead out of it):
``db.export`` streams ``mariadb-dump``'s progress, compresses with gzip when the path ends in
``.gz``, writes a temporary file owned by the site's user and renames it into place once the dump
is complete; ``db.import`` feeds a ``.sql`` or ``.sql.gz`` file of the site to the client, into a
scratch database whose tables replace the database's at once when the whole file went in (MariaDB's
DDL is not transactional: this is how a failed import leaves the database as it was). A data-only
dump (``mariadb-dump --no-create-info``: rows for tables it does not create) goes instead into the
database's own tables, in one transaction that a failure rolls back.

A dump is the site's text, so its statements never run as the agent's account, nor does the
client that reads them run as root (it runs as the site's user, with that account's own groups):
they run as a throwaway account made for the import (`importer`), granted all the privileges on the scratch
database and nothing else (for a data-only dump: reading and writing rows of the database's
tables, nothing else) -- no FILE, no SUPER, nothing of ``mysql.*`` or of another database, so
the server itself refuses what would reach further. The agent's account runs only statements
the agent builds (the swap, the foreign keys, the clean-up). Views, triggers, routines and events
get a DEFINER of the database's own: its owner role (``fleetdeck_owner.<database>``, all the
privileges on that database and none elsewhere, made on first use, dropped with the database);
the DEFINER clauses of the dump are rewritten, as the project has no site account to own them.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import secrets
import tempfile
import zlib
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from subprocess import DEVNULL, PIPE
from typing import Any

import orjson
import trio

from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.common import Account, find_site, site_account
from agent.jobs.toolkit.host import MariaDbLayout
from agent.jobs.toolkit.needs import Tool
from agent.jobs.toolkit.output import STDERR, STDOUT, JobError, Output
from agent.jobs.toolkit.proc import LineSplitter, capture_command, child_identity, require, tool_env
from agent.jobs.toolkit.site_files import SiteOutput, open_site_input
from contract.job_kinds.argtypes import AGENT_DB_ROLE_PREFIX
from contract.job_kinds.base import NoArgs
from contract.job_kinds.db import (
    DbCreate,
    DbExport,
    DbGrant,
    DbImport,
    DbNameArgs,
    DbRevoke,
    DbSize,
    DbUserArgs,
    DbUserCreate,
    DbUserPassword,
)

SYSTEM_DATABASES = ("mysql", "information_schema", "performance_schema", "sys")
# The session's SQL mode (MariaDB's default): backslash escapes strings whatever the server says.
SQL_MODE = "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION"
SESSION = f"SET SESSION sql_mode = '{SQL_MODE}';\n"
PRIVILEGES = {
    "all": "ALL PRIVILEGES",
    "read": "SELECT, SHOW VIEW",
    "readwrite": "SELECT, INSERT, UPDATE, DELETE, CREATE TEMPORARY TABLES, LOCK TABLES, EXECUTE, SHOW VIEW",
}
CHUNK = 256 * 1024
CHILD: dict[str, Any] = {"check": False, "env": tool_env(), "start_new_session": True}
PROGRESS_STEPS = 10  # an import reports its progress every tenth of the file
SCRATCH_PREFIX = "fleetdeck_import_"  # the database an import goes into first
IMPORTER_PREFIX = f"{AGENT_DB_ROLE_PREFIX}importer_"  # the throwaway account a dump's statements run as
OWNER_ROLE = "fleetdeck_owner.{}"  # the role that owns a database's imported views, triggers, routines, events
OLD_PREFIX = "fleetdeck_old_"  # where the tables an import replaces go aside (a database, or a name), then dropped
# What RENAME TABLE cannot move to another database (kind, information_schema table, schema column, name).
BOUND_OBJECTS = (
    ("view", "VIEWS", "TABLE_SCHEMA", "TABLE_NAME"),
    ("trigger", "TRIGGERS", "TRIGGER_SCHEMA", "TRIGGER_NAME"),
    ("routine", "ROUTINES", "ROUTINE_SCHEMA", "ROUTINE_NAME"),
    ("event", "EVENTS", "EVENT_SCHEMA", "EVENT_NAME"),
)
# A line of a dump that would take the import out of its database (``mariadb-dump --databases``
# writes CREATE DATABASE and USE; the client's \u and \r switch too), possibly in a versioned
# comment (``/*!40000 DROP DATABASE ...*/``). mariadb-dump starts every statement on a line of
# its own and escapes the new lines inside values, so a line start is a statement start.
OTHER_DATABASE = re.compile(
    rb"^[ \t]*(?:/\*M?!\d*[ \t]*)?(?:USE\b|CONNECT\b|\\[ur]|(?:CREATE|DROP|ALTER)[ \t]+(?:DATABASE|SCHEMA)\b)",
    re.IGNORECASE | re.MULTILINE,
)
# A table option that puts a table's files in a folder of the dump's choosing (no FILE privilege
# needed: the server would write wherever its own user may). Refused wherever it is, data included.
FILES_ELSEWHERE = re.compile(rb"\b(?:DATA|INDEX)[ \t]+DIRECTORY[ \t]*(?:=[ \t]*)?['\"]", re.IGNORECASE)
# A user or host name quoted as an identifier or as a string ('' or "", as a hand-edited or
# ANSI_QUOTES dump may write it).
_NAME = rb"`(?:[^`\n]|``)*`|'(?:[^'\\\n]|\\.|'')*'|\"(?:[^\"\\\n]|\\.|\"\")*\""
# The DEFINER clause of a view, trigger, routine or event, where mariadb-dump writes it: at the
# start of a CREATE statement (in versioned comments or not), or on a line of its own (a view's).
DEFINER_CLAUSE = re.compile(
    rb"^([ \t]*(?:/\*M?!\d*[ \t]*)?(?:CREATE(?:[ \t]+OR[ \t]+REPLACE)?(?:[ \t]+ALGORITHM[ \t]*=[ \t]*\w+)?"
    rb"[ \t]*(?:\*/[ \t]*/\*M?!\d*[ \t]*)?)?)DEFINER[ \t]*=[ \t]*"
    rb"(?:CURRENT_(?:USER|ROLE)(?:[ \t]*\(\))?|(?:" + _NAME + rb"|[\w.$-]+)"
    rb"(?:[ \t]*@[ \t]*(?:" + _NAME + rb"|[\w.%$-]+))?)",
    re.IGNORECASE | re.MULTILINE,
)
MAX_LINE = 256 * 1024 * 1024  # a longer line is not a dump's (mariadb-dump's are up to max_allowed_packet)
_STATEMENT = rb"^[ \t]*(?:/\*M?!\d*[ \t]*)?"  # a statement's start, possibly in a versioned comment
CREATES_TABLE = re.compile(_STATEMENT + rb"CREATE[ \t]+(?:OR[ \t]+REPLACE[ \t]+)?TABLE\b", re.I | re.M)
# The table a row statement fills (its name quoted or bare: a dotted name is another database's).
FILLS = re.compile(
    _STATEMENT + rb"(?:INSERT|REPLACE)(?:[ \t]+(?:LOW_PRIORITY|DELAYED|HIGH_PRIORITY|IGNORE))*[ \t]+(?:INTO[ \t]+)?"
    rb"(`(?:[^`\n]|``)+`|[\w$]+)",
    re.I | re.M,
)
# What mariadb-dump wraps a table's rows in, only for speed: in one transaction they would commit it.
LOCKS_AND_KEYS = re.compile(
    rb"^(?:LOCK TABLES [^\n]*|UNLOCK TABLES;|/\*!40000 ALTER TABLE [^\n]* (?:DIS|EN)ABLE KEYS \*/;)[ \t]*(?:\r?\n|\Z)",
    re.M,
)
# A statement that commits the transaction it runs in (MariaDB's "implicit commit"), or ends it.
ENDS_TRANSACTION = re.compile(
    _STATEMENT + rb"(?:ALTER|CREATE|DROP|RENAME|TRUNCATE|LOCK|UNLOCK|BEGIN|START[ \t]+TRANSACTION|COMMIT|ROLLBACK"
    rb"|SAVEPOINT|RELEASE|XA|GRANT|REVOKE|FLUSH|ANALYZE|CHECK|OPTIMIZE|REPAIR|INSTALL|UNINSTALL|CACHE|LOAD"
    rb"|SET[ \t]+(?:SESSION[ \t]+|@@(?:SESSION\.)?)?AUTOCOMMIT)\b",
    re.I | re.M,
)


# --- SQL text -------------------------------------------------------------------------------


def ident(name: str) -> str:
    """A quoted identifier."""
    return "`" + name.replace("`", "``") + "`"


def literal(text: str) -> str:
    """A quoted string literal (the session's SQL mode lets backslash escape)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def account(user: str, host: str) -> str:
    return f"{literal(user)}@{literal(host)}"


def grant_pattern(name: str) -> str:
    """The database of a GRANT: ``_`` and ``%`` are wildcards there, escaped to mean themselves."""
    return name.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%")


def unescape_pattern(pattern: str) -> str:
    out, escaped = [], False
    for char in pattern:
        if char == "\\" and not escaped:
            escaped = True
            continue
        out.append(char)
        escaped = False
    return "".join(out)


def json_rows(text: str) -> list[dict[str, Any]]:
    """The rows of a ``SELECT JSON_OBJECT(...)`` read with ``--batch --raw``: one JSON per line."""
    return [orjson.loads(line) for line in text.splitlines() if line.strip()]


def scrub(text: str, hidden: Iterable[str]) -> str:
    """`text` without the secrets (nor their escaped spelling), in one line."""
    for secret in hidden:
        for spelling in {secret, literal(secret)[1:-1]}:
            text = text.replace(spelling, "***")
    return " ".join(text.split())


# --- the client -----------------------------------------------------------------------------


def connection(layout: MariaDbLayout) -> list[str]:
    """The options that connect a client (``mariadb``, ``mariadb-dump``) as the agent's account."""
    options = f"--defaults-file={layout.defaults_file}" if layout.defaults_file else "--no-defaults"
    return [options, "--protocol=socket", f"--socket={layout.socket}", f"--user={layout.user}"]


def client_argv(layout: MariaDbLayout, *extra: str) -> list[str]:
    mariadb = require("mariadb", "run statements on the MariaDB server")
    return [mariadb, *connection(layout), "--default-character-set=utf8mb4", *extra]


async def run_sql(ctx: JobContext, sql: str, *, hidden: Sequence[str] = ()) -> str:
    """Run `sql` (statements, on stdin) as the agent's account; its stdout, or a JobError with the
    server's words (any secret in `hidden` scrubbed from them)."""
    argv = client_argv(ctx.host.mariadb, "--batch", "--raw", "--skip-column-names")
    code, text, err = await capture_command(argv, stdin=(SESSION + sql).encode())
    if code != 0:
        raise JobError(f"mariadb: {scrub(err or text, hidden) or f'exit {code}'}")
    return text


async def rows(ctx: JobContext, select: str) -> list[dict[str, Any]]:
    return json_rows(await run_sql(ctx, select))


async def database_exists(ctx: JobContext, name: str) -> bool:
    found = await run_sql(ctx, f"SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = {literal(name)};")
    return bool(found.strip())


async def account_exists(ctx: JobContext, user: str, host: str) -> bool:
    found = await run_sql(ctx, f"SELECT 1 FROM mysql.user WHERE User = {literal(user)} AND Host = {literal(host)};")
    return bool(found.strip())


async def need_database(ctx: JobContext, name: str) -> None:
    if not await database_exists(ctx, name):
        raise JobError(f"no database {name} on this server")


async def need_account(ctx: JobContext, user: str, host: str) -> None:
    if not await account_exists(ctx, user, host):
        raise JobError(f"no database account {user}@{host} on this server")


@dataclass(frozen=True)
class Login:
    """How a client connects as an `importer` account: its `options` (argv) and, in `child`, the
    identity it runs as (`subprocess.Popen`'s ``user``; empty: the agent's own)."""

    options: list[str]
    child: dict[str, Any]


@asynccontextmanager
async def importer(
    ctx: JobContext, grants: Sequence[str], *, role: str | None = None, client: Account | None = None
) -> AsyncIterator[Login]:
    """A throwaway account for a dump's statements, with only `grants` (each ``PRIVILEGES ON
    object``) and `role`, if any: yields how a client connects as it, run as `client` (the
    site's user: the client parses the site's text, so not as root) when given. Its random
    password goes by an option file of mode 0600, the client's own (never argv); on the way out,
    whatever happened (a failure, a cancelled job), the account is dropped and its sessions
    killed, then the file removed."""
    user = f"{IMPORTER_PREFIX}{secrets.token_hex(6)}"
    password = secrets.token_hex(24)
    who = account(user, "localhost")
    fd, options = tempfile.mkstemp(prefix="fleetdeck-importer-", suffix=".cnf")  # mode 0600
    try:
        if client is not None:
            os.fchown(fd, client.uid, client.gid)  # the client reads it as itself
        with os.fdopen(fd, "w") as file:
            file.write(f"[client]\nuser={user}\npassword={password}\n")
        sql = f"CREATE USER {who} IDENTIFIED BY {literal(password)};\n"
        sql += "".join(f"GRANT {grant} TO {who};\n" for grant in grants)
        if role is not None:
            sql += f"GRANT {literal(role)} TO {who};\n"
        try:
            await run_sql(ctx, sql, hidden=[password])
            layout = ctx.host.mariadb
            child = {} if client is None else {"user": client.uid}
            yield Login([f"--defaults-file={options}", "--protocol=socket", f"--socket={layout.socket}"], child)
        finally:
            with trio.CancelScope(shield=True):  # no new session, then none left running
                await run_sql(ctx, f"DROP USER IF EXISTS {who};\nKILL HARD USER {who};\n")
    finally:
        os.unlink(options)


async def owner_role(ctx: JobContext, name: str) -> str:
    """The role that owns database `name`'s imported views, triggers, routines and events: all
    the privileges on `name` and none elsewhere (made on first use)."""
    role = OWNER_ROLE.format(name)
    sql = f"CREATE ROLE IF NOT EXISTS {literal(role)};\n"
    sql += f"GRANT ALL PRIVILEGES ON {_on_database(name)} TO {literal(role)};\n"
    await run_sql(ctx, sql)
    return role


def _report(ctx: JobContext, out: Output, said: str, obj: dict[str, Any]) -> int:
    """A change's outcome: its sentence for a person, the object with ``--json``."""
    if ctx.as_json:
        out.json(obj)
    else:
        out.stdout(said)
    return 0


# --- databases ------------------------------------------------------------------------------

_NOT_SYSTEM = f"NOT IN ({', '.join(literal(name) for name in SYSTEM_DATABASES)})"


async def _list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    found = await rows(
        ctx,
        "SELECT JSON_OBJECT('name', SCHEMA_NAME, 'charset', DEFAULT_CHARACTER_SET_NAME,"
        " 'collation', DEFAULT_COLLATION_NAME) FROM information_schema.SCHEMATA"
        f" WHERE SCHEMA_NAME {_NOT_SYSTEM} ORDER BY SCHEMA_NAME;",
    )
    out.result(found, as_json=ctx.as_json)
    return 0


async def _size(args: DbSize, ctx: JobContext, out: Output) -> int:
    where = f"= {literal(args.name)}" if args.name else _NOT_SYSTEM
    if args.name:
        await need_database(ctx, args.name)
    found = await rows(
        ctx,
        "SELECT JSON_OBJECT('name', s.SCHEMA_NAME, 'tables', COUNT(t.TABLE_NAME),"
        " 'data_bytes', COALESCE(SUM(t.DATA_LENGTH), 0), 'index_bytes', COALESCE(SUM(t.INDEX_LENGTH), 0),"
        " 'bytes', COALESCE(SUM(t.DATA_LENGTH + t.INDEX_LENGTH), 0))"
        " FROM information_schema.SCHEMATA s LEFT JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = s.SCHEMA_NAME"
        f" WHERE s.SCHEMA_NAME {where} GROUP BY s.SCHEMA_NAME ORDER BY s.SCHEMA_NAME;",
    )
    out.result(found, as_json=ctx.as_json)
    return 0


async def _table_list(args: DbNameArgs, ctx: JobContext, out: Output) -> int:
    await need_database(ctx, args.name)
    found = await rows(
        ctx,
        "SELECT JSON_OBJECT('name', TABLE_NAME, 'type', TABLE_TYPE, 'engine', ENGINE, 'rows', TABLE_ROWS,"
        " 'bytes', COALESCE(DATA_LENGTH + INDEX_LENGTH, 0), 'collation', TABLE_COLLATION)"
        f" FROM information_schema.TABLES WHERE TABLE_SCHEMA = {literal(args.name)} ORDER BY TABLE_NAME;",
    )
    out.result(found, as_json=ctx.as_json)
    return 0


STATUS_VARIABLES = ("Uptime", "Threads_connected", "Threads_running", "Questions", "Slow_queries", "Connections")


def parse_status(text: str) -> dict[str, Any]:
    """``SHOW GLOBAL STATUS`` lines (name TAB value) as a result: lowercase names, numbers as ints."""
    found: dict[str, Any] = {}
    for line in text.splitlines():
        name, tab, value = line.partition("\t")
        if tab:
            found[name.lower()] = int(value) if value.isdigit() else value
    return found


async def _status(args: NoArgs, ctx: JobContext, out: Output) -> int:
    """The server's version and counters; a server that does not answer is a result too (running: false)."""
    layout = ctx.host.mariadb
    client_argv(layout)  # a missing client is exit 69, not a server that is down
    names = ", ".join(literal(name) for name in STATUS_VARIABLES)
    try:
        version = (await run_sql(ctx, "SELECT VERSION();")).strip()
        variables = parse_status(await run_sql(ctx, f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names});"))
    except JobError as exc:
        out.result({"running": False, "socket": layout.socket, "error": str(exc)}, as_json=ctx.as_json)
        return 0
    result = {"running": True, "version": version, "socket": layout.socket, **variables}
    if "uptime" in result:
        result["uptime_s"] = result.pop("uptime")
    out.result(result, as_json=ctx.as_json)
    return 0


async def _create(args: DbCreate, ctx: JobContext, out: Output) -> int:
    name = args.name
    if await database_exists(ctx, name):
        (found,) = await rows(
            ctx,
            "SELECT JSON_OBJECT('charset', DEFAULT_CHARACTER_SET_NAME) FROM information_schema.SCHEMATA"
            f" WHERE SCHEMA_NAME = {literal(name)};",
        )
        return _report(ctx, out, f"database {name} exists", {"name": name, "created": False, **found})
    collate = f" COLLATE {args.collation}" if args.collation else ""
    await run_sql(ctx, f"CREATE DATABASE {ident(name)} CHARACTER SET {args.charset}{collate};")
    said = f"created database {name} ({args.charset}{', ' + args.collation if args.collation else ''})"
    return _report(ctx, out, said, {"name": name, "created": True, "charset": args.charset})


async def _drop(args: DbNameArgs, ctx: JobContext, out: Output) -> int:
    name = args.name
    if not await database_exists(ctx, name):
        return _report(ctx, out, f"no database {name}: nothing to drop", {"name": name, "dropped": False})
    await run_sql(ctx, f"DROP DATABASE {ident(name)};\nDROP ROLE IF EXISTS {literal(OWNER_ROLE.format(name))};")
    return _report(ctx, out, f"dropped database {name}", {"name": name, "dropped": True})


# --- accounts -------------------------------------------------------------------------------


async def _user_list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    accounts = await rows(
        ctx, "SELECT JSON_OBJECT('user', User, 'host', Host) FROM mysql.user WHERE is_role = 'N' ORDER BY User, Host;"
    )
    grants = await rows(ctx, "SELECT JSON_OBJECT('user', User, 'host', Host, 'db', Db) FROM mysql.db ORDER BY Db;")
    for item in accounts:
        item["databases"] = [
            unescape_pattern(g["db"]) for g in grants if (g["user"], g["host"]) == (item["user"], item["host"])
        ]
    out.result(accounts, as_json=ctx.as_json)
    return 0


async def _user_create(args: DbUserCreate, ctx: JobContext, out: Output) -> int:
    user, host = args.user, args.host
    obj = {"user": user, "host": host}
    if await account_exists(ctx, user, host):
        said = f"database account {user}@{host} exists (its password is unchanged: db.user-password sets it)"
        return _report(ctx, out, said, {**obj, "created": False})
    password = args.password.get_secret_value()
    await run_sql(ctx, f"CREATE USER {account(user, host)} IDENTIFIED BY {literal(password)};", hidden=[password])
    return _report(ctx, out, f"created database account {user}@{host}", {**obj, "created": True})


async def _user_delete(args: DbUserArgs, ctx: JobContext, out: Output) -> int:
    user, host = args.user, args.host
    obj = {"user": user, "host": host}
    if not await account_exists(ctx, user, host):
        return _report(ctx, out, f"no database account {user}@{host}: nothing to delete", {**obj, "deleted": False})
    await run_sql(ctx, f"DROP USER {account(user, host)};")
    return _report(ctx, out, f"deleted database account {user}@{host}", {**obj, "deleted": True})


async def _user_password(args: DbUserPassword, ctx: JobContext, out: Output) -> int:
    await need_account(ctx, args.user, args.host)
    password = args.password.get_secret_value()
    sql = f"ALTER USER {account(args.user, args.host)} IDENTIFIED BY {literal(password)};"
    await run_sql(ctx, sql, hidden=[password])
    out.stdout(f"set the password of database account {args.user}@{args.host}")
    return 0


async def _granted_patterns(ctx: JobContext, user: str, host: str, name: str) -> list[str]:
    """The database patterns of `user`@`host`'s grants that name `name` (escaped, or as typed by hand)."""
    found = await run_sql(
        ctx,
        f"SELECT Db FROM mysql.db WHERE User = {literal(user)} AND Host = {literal(host)}"
        f" AND Db IN ({literal(grant_pattern(name))}, {literal(name)});",
    )
    return sorted({line for line in found.splitlines() if line})


def _revoke_all(user: str, host: str, patterns: Iterable[str]) -> str:
    return "".join(f"REVOKE ALL PRIVILEGES ON {ident(p)}.* FROM {account(user, host)};\n" for p in patterns)


async def _user_grant(args: DbGrant, ctx: JobContext, out: Output) -> int:
    """The account's privileges on the database become exactly the level asked (earlier ones go)."""
    await need_account(ctx, args.user, args.host)
    await need_database(ctx, args.name)
    earlier = await _granted_patterns(ctx, args.user, args.host, args.name)
    sql = _revoke_all(args.user, args.host, earlier)
    on = ident(grant_pattern(args.name))
    sql += f"GRANT {PRIVILEGES[args.privileges]} ON {on}.* TO {account(args.user, args.host)};"
    await run_sql(ctx, sql)
    out.stdout(f"granted {args.privileges} on database {args.name} to {args.user}@{args.host}")
    return 0


async def _user_revoke(args: DbRevoke, ctx: JobContext, out: Output) -> int:
    await need_account(ctx, args.user, args.host)
    earlier = await _granted_patterns(ctx, args.user, args.host, args.name)
    if not earlier:
        out.stdout(f"{args.user}@{args.host} has no privileges on database {args.name}: nothing to revoke")
        return 0
    await run_sql(ctx, _revoke_all(args.user, args.host, earlier))
    out.stdout(f"revoked the privileges of {args.user}@{args.host} on database {args.name}")
    return 0


# --- files of a site ------------------------------------------------------------------------


Route = Callable[[str], tuple[str, list[str]]]


def _progress_line(line: str) -> tuple[str, list[str]]:
    """Where a line of ``mariadb-dump --verbose`` goes: its ``-- `` progress lines are the job's
    output, anything else (warnings, errors) its stderr."""
    return (STDOUT if line.startswith("-- ") else STDERR), [line]


def _to(stream: str) -> Route:
    return lambda line: (stream, [line])


async def _pump_lines(receive: trio.abc.ReceiveStream, out: Output, route: Route) -> None:
    """The lines of `receive`, each to the stream `route` says."""
    splitter = LineSplitter()

    def send(lines: list[str]) -> None:
        for line in lines:
            out.lines(*route(line))

    while data := await receive.receive_some(CHUNK):
        send(splitter.feed(data))
        await out.drain()
    send(splitter.close())


async def _export(args: DbExport, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    await need_database(ctx, args.name)
    dump = require("mariadb-dump", "dump a MariaDB database")
    argv = [dump, *connection(ctx.host.mariadb), "--default-character-set=utf8mb4", "--single-transaction"]
    argv += ["--routines", "--triggers", "--hex-blob", "--verbose", "--", args.name]
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31) if args.path.endswith(".gz") else None  # 31: gzip
    target = await trio.to_thread.run_sync(SiteOutput, ctx, site, args.path)
    try:
        code, dumped = await _dump_into(argv, target, compressor, out)
        if code != 0:
            raise JobError(f"mariadb-dump exited {code}: {args.path} was not written")
        if compressor is not None:
            await trio.to_thread.run_sync(target.write, compressor.flush())
        size = await trio.to_thread.run_sync(target.commit)
    finally:
        target.close()
    sizes = f"{size} bytes" + (f", {dumped} uncompressed" if compressor is not None else "")
    out.stdout(f"wrote {args.path} in {site.domain} ({sizes})")
    return 0


async def _dump_into(
    argv: list[str], target: SiteOutput, compressor: zlib._Compress | None, out: Output
) -> tuple[int, int]:
    """Run the dump, its stdout (gzipped by `compressor`, if any) into `target`, its progress to
    `out`; (its exit code, the bytes it wrote)."""
    dumped = 0
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            partial(trio.run_process, argv, stdin=DEVNULL, stdout=PIPE, stderr=PIPE, **CHILD)
        )
        assert process.stdout is not None and process.stderr is not None
        nursery.start_soon(_pump_lines, process.stderr, out, _progress_line)
        while data := await process.stdout.receive_some(CHUNK):
            dumped += len(data)
            await trio.to_thread.run_sync(target.write, compressor.compress(data) if compressor is not None else data)
    assert process.returncode is not None
    return process.returncode, dumped


def line_at(text: bytes, start: int) -> str:
    """The line of `text` at `start`, to quote in an error."""
    return text[start:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()[:120]


class DumpReader:
    """A dump of a site (`open_site_input`'s descriptor, which it closes), decompressed when it
    is gzip, read in whole lines."""

    def __init__(self, fd: int, path: str) -> None:
        self.size = os.fstat(fd).st_size
        self.raw = os.fdopen(fd, "rb")
        self.stream: io.BufferedIOBase = self.raw
        if path.endswith(".gz"):
            self.stream = gzip.GzipFile(fileobj=self.raw, mode="rb")
        self.pending = b""  # the start of a line not read to its end yet
        self.in_place = False  # a data-only dump's: the lines that would commit its transaction dropped

    def rewind(self) -> None:
        """Back to the start of the file (after `survey`)."""
        self.raw.seek(0)
        if self.stream is not self.raw:
            self.stream = gzip.GzipFile(fileobj=self.raw, mode="rb")
        self.pending = b""

    def read(self) -> bytes:
        """The next whole lines of SQL (b"" at the end), each checked before the client gets it:
        a statement that leaves the import's database is refused (JobError)."""
        while True:
            data = self._read()
            if not data:
                lines, self.pending = self.pending, b""
                break
            data = self.pending + data
            cut = data.rfind(b"\n") + 1
            lines, self.pending = data[:cut], data[cut:]
            if len(self.pending) > MAX_LINE:
                raise JobError(f"the dump has a line longer than {MAX_LINE // 2**20} MiB: it is not SQL from a dump")
            if lines:
                break
        found = OTHER_DATABASE.search(lines)
        if found is not None:
            raise JobError(
                f"the dump leaves the database it is imported into ({line_at(lines, found.start())!r}): a dump of"
                " one database is needed (mariadb-dump without --databases); nothing of it was imported"
            )
        found = FILES_ELSEWHERE.search(lines)
        if found is not None:
            raise JobError(
                f"the dump puts a table's files in a folder of its own ({line_at(lines, found.start())!r}): a table"
                " stays in the server's data folder (remove DATA/INDEX DIRECTORY); nothing of it was imported"
            )
        lines = DEFINER_CLAUSE.sub(rb"\1DEFINER=CURRENT_USER", lines)  # the importer's (no other is allowed)
        return LOCKS_AND_KEYS.sub(b"", lines) if self.in_place else lines

    def _read(self) -> bytes:
        try:
            return self.stream.read(CHUNK)
        except (OSError, EOFError, zlib.error) as exc:
            if self.stream is self.raw:
                raise
            raise JobError(f"the dump is not a complete gzip file: {exc}") from None

    @property
    def position(self) -> int:
        return self.raw.tell()

    def close(self) -> None:
        self.stream.close()
        self.raw.close()


@dataclass
class DumpSurvey:
    """What a dump does, read before any of it runs."""

    creates_tables: bool = False
    filled: set[str] = field(default_factory=set)  # the tables it has rows for
    ends_transaction: str | None = None  # its first statement that would commit a transaction


def unquote(name: bytes) -> str:
    text = name.decode("utf-8", "replace")
    return text[1:-1].replace("``", "`") if text.startswith("`") else text


def survey(source: DumpReader) -> DumpSurvey:
    """One pass over the dump (checked as the import will be), then back to its start."""
    found = DumpSurvey()
    while lines := source.read():
        found.creates_tables = found.creates_tables or CREATES_TABLE.search(lines) is not None
        found.filled.update(unquote(name) for name in FILLS.findall(lines))
        ends = ENDS_TRANSACTION.search(LOCKS_AND_KEYS.sub(b"", lines)) if found.ends_transaction is None else None
        if ends is not None:
            found.ends_transaction = line_at(ends.string, ends.start())
    source.rewind()
    return found


async def _import(args: DbImport, ctx: JobContext, out: Output) -> int:
    """All or nothing. A dump that makes its tables goes into a scratch database, whose tables then
    replace the database's in one atomic ``RENAME TABLE``; a data-only dump goes into the
    database's tables in one transaction. Either way a dump that fails leaves the database as it was.

    Confined: the dump's statements run as a throwaway account (`importer`) with rights on the
    scratch database alone (a data-only dump: on the rows of the database's tables), dropped
    afterwards whatever happens; a statement reaching another database, ``mysql.*`` or the
    server's files (``SELECT ... INTO OUTFILE``, ``LOAD DATA INFILE``, ``LOAD_FILE``) is refused
    by the server and the import fails. The dump's DEFINER clauses become the importer's, and
    the views, triggers, routines and events made in the database are defined by its owner role
    (`owner_role`): none runs with more rights than the database's own."""
    site = await find_site(ctx, args.domain)
    await need_database(ctx, args.name)

    def open_file() -> DumpReader:
        fd = open_site_input(ctx, site, args.path)
        try:
            return DumpReader(fd, args.path)
        except BaseException:
            os.close(fd)
            raise

    client = site_account(ctx, site) if ctx.is_root else None  # who runs the client that parses the dump
    source = await trio.to_thread.run_sync(open_file)
    try:
        dump = await trio.to_thread.run_sync(survey, source)
        if dump.filled and not dump.creates_tables:
            said = await _import_rows(ctx, args, source, dump, out, client)
        else:
            said = await _import_through_scratch(ctx, args, source, out, client)
    finally:
        await trio.to_thread.run_sync(source.close)
    out.stdout(f"imported {args.path} into database {args.name} ({said})")
    return 0


def _not_imported(args: DbImport, code: int) -> JobError:
    return JobError(
        f"mariadb exited {code} while importing {args.path}: nothing of it was imported,"
        f" database {args.name} is as it was"
    )


def _import_argv(login: Login, database: str) -> list[str]:
    """The client that runs a dump's statements, connected as `login` (an `importer`'s).
    --sandbox: the file is the site's; a client command in it (\\! shell, source, tee...) would
    run as the client's user. --local-infile=0: no LOAD DATA LOCAL of that user's files."""
    mariadb = require("mariadb", "run statements on the MariaDB server")
    options = ["--default-character-set=utf8mb4", "--batch", "--sandbox", "--local-infile=0"]
    return [mariadb, *login.options, *options, f"--database={database}"]


def _on_database(name: str) -> str:
    """A grant's object: every table of database `name` (and nothing of another)."""
    return f"{ident(grant_pattern(name))}.*"


async def _import_through_scratch(
    ctx: JobContext, args: DbImport, source: DumpReader, out: Output, client: Account | None
) -> str:
    scratch = f"{SCRATCH_PREFIX}{secrets.token_hex(6)}"
    found = await rows(
        ctx,
        "SELECT JSON_OBJECT('charset', DEFAULT_CHARACTER_SET_NAME, 'collation', DEFAULT_COLLATION_NAME)"
        f" FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = {literal(args.name)};",
    )
    charset, collation = found[0]["charset"], found[0]["collation"]
    await run_sql(ctx, f"CREATE DATABASE {ident(scratch)} CHARACTER SET {charset} COLLATE {collation};")
    try:
        # the importer lives until the swap: it defines the scratch's views, which mariadb-dump reads
        async with importer(ctx, [f"ALL PRIVILEGES ON {_on_database(scratch)}"], client=client) as login:
            code = await _feed(_import_argv(login, scratch), source, out, args.path, child=login.child)
            if code != 0:
                raise _not_imported(args, code)
            return await _move_into(ctx, scratch, args.name, drop_existing=args.drop_existing, client=client)
    finally:
        with trio.CancelScope(shield=True):
            await run_sql(ctx, f"DROP DATABASE IF EXISTS {ident(scratch)};")


async def _import_rows(
    ctx: JobContext, args: DbImport, source: DumpReader, dump: DumpSurvey, out: Output, client: Account | None
) -> str:
    """A data-only dump into the database's own tables, in one transaction (the client leaving
    without its COMMIT, on an error, rolls it back): so the tables it fills must exist, and be of
    an engine that can roll back. With `drop_existing` every table is emptied first, in the same
    transaction. mariadb-dump's LOCK TABLES and DISABLE KEYS lines are left out (each would commit)."""
    if dump.ends_transaction is not None:
        raise JobError(
            f"the dump has rows for tables it does not make (a data-only dump, imported in one transaction) but"
            f" also a statement that would commit that transaction half-way ({dump.ends_transaction!r}): make it"
            " with mariadb-dump --no-create-info --skip-triggers, or with its tables; nothing of it was imported"
        )
    tables = {
        item["name"]: item
        for item in await rows(
            ctx,
            "SELECT JSON_OBJECT('name', t.TABLE_NAME, 'engine', t.ENGINE, 'transactions', e.TRANSACTIONS)"
            " FROM information_schema.TABLES t LEFT JOIN information_schema.ENGINES e ON e.ENGINE = t.ENGINE"
            f" WHERE t.TABLE_SCHEMA = {literal(args.name)} AND t.TABLE_TYPE = 'BASE TABLE';",
        )
    }
    missing = sorted(dump.filled - set(tables))
    if missing:
        raise JobError(
            f"the dump has only rows (no CREATE TABLE), for tables database {args.name} does not have:"
            f" {', '.join(missing)}; nothing of it was imported"
        )
    touched = sorted(tables) if args.drop_existing else sorted(dump.filled)
    cannot_undo = [f"{name} ({tables[name]['engine']})" for name in touched if tables[name]["transactions"] != "YES"]
    if cannot_undo:
        raise JobError(
            f"a data-only dump is imported in one transaction, but these tables cannot roll one back:"
            f" {', '.join(cannot_undo)} (convert them to InnoDB, or import a dump with its tables);"
            " nothing was imported"
        )
    out.stdout(f"{args.path} has rows only: they go into the tables of database {args.name}, in one transaction")
    head = "SET SESSION autocommit = 0;\n"
    if args.drop_existing:
        head += "SET SESSION foreign_key_checks = 0;\n"
        head += "".join(f"DELETE FROM {ident(name)};\n" for name in touched)
        head += "SET SESSION foreign_key_checks = 1;\n"
    source.in_place = True
    grants = [f"SELECT, INSERT, UPDATE, DELETE ON {ident(args.name)}.{ident(table)}" for table in sorted(tables)]
    async with importer(ctx, grants, client=client) as login:
        argv = _import_argv(login, args.name)
        code = await _feed(argv, source, out, args.path, head=head.encode(), tail=b"\nCOMMIT;\n", child=login.child)
    if code != 0:
        raise _not_imported(args, code)
    emptied = f", after emptying all {len(touched)} tables" if args.drop_existing else ""
    return f"rows for {len(dump.filled)} tables in one transaction{emptied}"


async def _move_into(ctx: JobContext, scratch: str, name: str, *, drop_existing: bool, client: Account | None) -> str:
    """The scratch database's tables into `name` in one ``RENAME TABLE`` (the tables and views
    they replace, and with `drop_existing` all the others, renamed aside in the same statement,
    then dropped); what was done, in words. Views, triggers, routines and events are bound to
    their database (MariaDB moves none of them): mariadb-dump writes them out of the scratch
    (naming no database) and they are made again in `name` once its tables are in place.

    A replaced table goes aside into a database of its own: a foreign key's name is unique in
    its database, and the dump's table brings the same names. Views and tables with triggers
    cannot leave `name`: they go aside there, renamed. A foreign key follows the table it
    points at, so the keys that then point aside (or into the scratch) are pointed back at the
    tables of `name` by those names, as a plain import would have them."""
    bound = await rows(
        ctx,
        " UNION ALL ".join(
            f"SELECT JSON_OBJECT('kind', '{kind}', 'name', {column}) FROM information_schema.{table}"
            f" WHERE {schema} = {literal(scratch)}"
            for kind, table, schema, column in BOUND_OBJECTS
        )
        + ";",
    )
    made_views = {item["name"] for item in bound if item["kind"] == "view"}
    remake = await _bound_sql(ctx, scratch, sorted(made_views)) if bound else None
    triggers = [item["name"] for item in bound if item["kind"] == "trigger"]
    if triggers:  # a table with triggers may not leave its database
        await run_sql(ctx, "".join(f"DROP TRIGGER {ident(scratch)}.{ident(t)};\n" for t in triggers))
    new = [item["name"] for item in await rows(ctx, _tables_of(scratch))]
    existing = {item["name"]: item["type"] for item in await rows(ctx, _tables_of(name, views=True))}
    doomed = [table for table in existing if drop_existing or table in new or table in made_views]
    with_triggers = {
        item["table"]
        for item in await rows(
            ctx,
            "SELECT JSON_OBJECT('table', EVENT_OBJECT_TABLE) FROM information_schema.TRIGGERS"
            f" WHERE EVENT_OBJECT_SCHEMA = {literal(name)};",
        )
    }
    old = f"{OLD_PREFIX}{secrets.token_hex(6)}"
    aside = {  # where each doomed table goes: (database, name)
        table: (name, f"{OLD_PREFIX}{secrets.token_hex(4)}_{n}")
        if existing[table] == "VIEW" or table in with_triggers
        else (old, table)
        for n, table in enumerate(doomed)
    }
    renames = [f"{ident(name)}.{ident(table)} TO {ident(aside[table][0])}.{ident(aside[table][1])}" for table in doomed]
    renames += [f"{ident(scratch)}.{ident(table)} TO {ident(name)}.{ident(table)}" for table in new]
    await run_sql(ctx, f"CREATE DATABASE {ident(old)};")
    try:
        if renames:
            await run_sql(ctx, f"RENAME TABLE {', '.join(renames)};")
        sql = "SET SESSION foreign_key_checks = 0;\n"  # a kept table may point at a replaced one
        sql += await _keys_pointed_back(ctx, name, {scratch, old}, {v: k for k, v in aside.items()})
        left = [table for table in doomed if aside[table][0] == name]  # the others go with `old`
        views = [aside[table][1] for table in left if existing[table] == "VIEW"]
        tables = [aside[table][1] for table in left if existing[table] != "VIEW"]
        if views:
            sql += f"DROP VIEW {', '.join(f'{ident(name)}.{ident(v)}' for v in views)};\n"
        if tables:
            sql += f"DROP TABLE {', '.join(f'{ident(name)}.{ident(t)}' for t in tables)};\n"
        if drop_existing:
            sql += await _drop_bound(ctx, name)
        try:
            await run_sql(ctx, sql)
        except JobError as exc:
            raise JobError(
                f"the tables of the dump are already in database {name} (swapped in), but its foreign keys could"
                f" not all be pointed back at its tables, nor the tables it replaced dropped: {exc}"
            ) from None
    finally:
        with trio.CancelScope(shield=True):
            await run_sql(ctx, f"SET SESSION foreign_key_checks = 0; DROP DATABASE IF EXISTS {ident(old)};")
    if remake is not None:
        code, text, err = await _remake(ctx, name, remake, client)
        if code != 0:
            raise JobError(
                f"the tables of the dump are in database {name}, but its views, triggers, routines and events"
                f" could not be made there: {' '.join((err or text).split())[-500:]}"
            )
    kept = len(existing) - len(doomed)
    others = f", {len(bound)} views, triggers, routines or events" if bound else ""
    return f"{len(new)} tables{others}, {len(doomed)} replaced or dropped, {kept} kept"


async def _remake(ctx: JobContext, name: str, remake: bytes, client: Account | None) -> tuple[int, str, str]:
    """Run `remake` (the scratch's views, triggers, routines and events, as mariadb-dump wrote
    them) in `name`, as a throwaway account with rights on `name` alone (the client run as
    `client`): each object is defined by the database's owner role (its DEFINER clause
    rewritten), so whatever runs as its definer has the rights of the database's own, never more."""
    role = await owner_role(ctx, name)
    sql = f"SET ROLE {literal(role)};\n".encode() + DEFINER_CLAUSE.sub(rb"\1DEFINER=CURRENT_ROLE", remake)
    async with importer(ctx, [f"ALL PRIVILEGES ON {_on_database(name)}"], role=role, client=client) as login:
        return await capture_command(_import_argv(login, name), stdin=sql, **login.child)


async def _keys_pointed_back(
    ctx: JobContext, name: str, elsewhere: set[str], renamed: dict[tuple[str, str], str]
) -> str:
    """The statements that point the foreign keys of `name`'s tables that now point into one
    of the `elsewhere` databases, or at a table renamed aside (`renamed`: (database, new name)
    -> its name), back at the table of `name` of that name (each key dropped and made again:
    MariaDB has no statement to move one)."""
    columns = await rows(
        ctx,
        "SELECT JSON_OBJECT('table', k.TABLE_NAME, 'key', k.CONSTRAINT_NAME, 'column', k.COLUMN_NAME,"
        " 'to_schema', k.REFERENCED_TABLE_SCHEMA, 'to_table', k.REFERENCED_TABLE_NAME, 'to_column',"
        " k.REFERENCED_COLUMN_NAME, 'on_delete', r.DELETE_RULE, 'on_update', r.UPDATE_RULE)"
        " FROM information_schema.KEY_COLUMN_USAGE k JOIN information_schema.REFERENTIAL_CONSTRAINTS r"
        " ON r.CONSTRAINT_SCHEMA = k.CONSTRAINT_SCHEMA AND r.TABLE_NAME = k.TABLE_NAME"
        " AND r.CONSTRAINT_NAME = k.CONSTRAINT_NAME"
        f" WHERE k.TABLE_SCHEMA = {literal(name)} AND k.REFERENCED_TABLE_NAME IS NOT NULL"
        " ORDER BY k.TABLE_NAME, k.CONSTRAINT_NAME, k.ORDINAL_POSITION;",
    )
    keys: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for column in columns:
        keys.setdefault((column["table"], column["key"]), []).append(column)
    gone = {to for database, to in renamed if database == name}
    sql = ""
    for (table, key), parts in keys.items():
        first = parts[0]
        target = (first["to_schema"], first["to_table"])
        if table in gone or (target[0] not in elsewhere and target not in renamed):
            continue
        to_table = renamed.get(target, first["to_table"])
        rules = "".join(
            f" ON {action} {first[rule]}"
            for action, rule in (("DELETE", "on_delete"), ("UPDATE", "on_update"))
            if first[rule] != "RESTRICT"
        )
        own = ", ".join(ident(part["column"]) for part in parts)
        theirs = ", ".join(ident(part["to_column"]) for part in parts)
        sql += f"ALTER TABLE {ident(name)}.{ident(table)} DROP FOREIGN KEY {ident(key)};\n"
        sql += (
            f"ALTER TABLE {ident(name)}.{ident(table)} ADD CONSTRAINT {ident(key)} FOREIGN KEY ({own})"
            f" REFERENCES {ident(name)}.{ident(to_table)} ({theirs}){rules};\n"
        )
    return sql


async def _bound_sql(ctx: JobContext, scratch: str, views: list[str]) -> bytes:
    """The views, triggers, routines and events of `scratch` as mariadb-dump writes them: they
    name no database (a view's placeholder first, so views made of views come in any order)."""
    dump = require("mariadb-dump", "import a dump that makes views, triggers, routines or events")
    base = [dump, *connection(ctx.host.mariadb), "--default-character-set=utf8mb4", "--skip-comments", "--no-data"]
    runs = [[*base, "--skip-triggers", "--", scratch, *views]] if views else []
    runs.append(
        [*base, "--no-create-info", "--routines", "--events", "--triggers", "--add-drop-trigger", "--", scratch]
    )
    sql = b""
    for argv in runs:
        code, text, err = await capture_command(argv)
        if code != 0:
            raise JobError(
                f"mariadb-dump could not write out the dump's views, triggers, routines and events (exit {code}):"
                f" {' '.join((err or text).split())[-500:]}"
            )
        sql += text.encode()
    return sql


def _tables_of(database: str, *, views: bool = False) -> str:
    kinds = "'BASE TABLE', 'SEQUENCE'" + (", 'VIEW'" if views else "")
    return (
        "SELECT JSON_OBJECT('name', TABLE_NAME, 'type', TABLE_TYPE) FROM information_schema.TABLES"
        f" WHERE TABLE_SCHEMA = {literal(database)} AND TABLE_TYPE IN ({kinds});"
    )


async def _drop_bound(ctx: JobContext, name: str) -> str:
    """The statements that drop the routines and events of `name` (a `drop_existing` import
    empties the database of them too)."""
    found = await rows(
        ctx,
        "SELECT JSON_OBJECT('kind', ROUTINE_TYPE, 'name', ROUTINE_NAME) FROM information_schema.ROUTINES"
        f" WHERE ROUTINE_SCHEMA = {literal(name)} UNION ALL"
        " SELECT JSON_OBJECT('kind', 'EVENT', 'name', EVENT_NAME) FROM information_schema.EVENTS"
        f" WHERE EVENT_SCHEMA = {literal(name)};",
    )
    return "".join(
        f"DROP {item['kind']} {ident(name)}.{ident(item['name'])};\n"
        for item in found
        if item["kind"] in ("PROCEDURE", "FUNCTION", "EVENT")
    )


async def _feed(
    argv: list[str],
    source: DumpReader,
    out: Output,
    path: str,
    *,
    head: bytes = b"",
    tail: bytes = b"",
    child: dict[str, Any] | None = None,
) -> int:
    """Run the client (as `child` says, `Login.child`) with the dump on its stdin (after `head`,
    before `tail`), a progress line every tenth of the file; its exit code."""
    identity = child_identity(child or {})
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            partial(trio.run_process, argv, stdin=PIPE, stdout=PIPE, stderr=PIPE, **CHILD, **identity)
        )
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        nursery.start_soon(_pump_lines, process.stdout, out, _to(STDOUT))
        nursery.start_soon(_pump_lines, process.stderr, out, _to(STDERR))
        reported = 0
        try:
            if head:
                await process.stdin.send_all(head)
            while data := await trio.to_thread.run_sync(source.read):
                await process.stdin.send_all(data)
                step = source.position * PROGRESS_STEPS // max(source.size, 1)
                if step > reported and step < PROGRESS_STEPS:
                    reported = step
                    done = f"{step * 100 // PROGRESS_STEPS}% read ({source.position} of {source.size} bytes)"
                    out.stdout(f"{path}: {done}")
            await process.stdin.send_all(tail)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client stopped reading: its exit code and stderr say why
        finally:
            await process.stdin.aclose()
    assert process.returncode is not None
    return process.returncode


NEEDS = (Tool("mariadb"),)  # the client every kind talks to the server with

KINDS = [
    handler("db.list", _list),
    handler("db.status", _status),
    handler("db.size", _size),
    handler("db.table-list", _table_list),
    handler("db.create", _create),
    handler("db.drop", _drop),
    handler("db.user-list", _user_list),
    handler("db.user-create", _user_create),
    handler("db.user-delete", _user_delete),
    handler("db.user-password", _user_password),
    handler("db.user-grant", _user_grant),
    handler("db.user-revoke", _user_revoke),
    handler("db.export", _export, needs=(Tool("mariadb-dump"),)),
    handler("db.import", _import),
]
