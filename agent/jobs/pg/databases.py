"""``pg status|list|size|table-list|create|drop|extension-add|vacuum``: the server and its databases."""

from __future__ import annotations

from typing import Any

from agent.jobs.pg.client import PgUnreachable, Postgres
from agent.jobs.pg.importer import OWNER_ROLE_PREFIX
from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.output import EXIT_MISSING, JobError, Output
from agent.jobs.toolkit.proc import require, stream_command
from contract.job_kinds.base import NoArgs
from contract.job_kinds.pg import PgCreate, PgDrop, PgExtensionAdd, PgNameArgs, PgSize, PgVacuum

_STATUS = """
SELECT current_setting('server_version') AS version,
       current_setting('server_version_num')::int AS version_num,
       pg_postmaster_start_time() AS started_at,
       extract(epoch FROM now() - pg_postmaster_start_time())::bigint AS uptime_s,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend') AS connections,
       current_setting('max_connections')::int AS max_connections,
       (SELECT count(*) FROM pg_database WHERE NOT datistemplate) AS databases,
       pg_is_in_recovery() AS in_recovery,
       current_setting('listen_addresses') AS listen_addresses,
       current_setting('port')::int AS port,
       current_setting('data_directory') AS data_directory,
       current_setting('hba_file') AS hba_file
"""

_DATABASES = """
SELECT d.datname AS name, pg_get_userbyid(d.datdba) AS owner, pg_encoding_to_char(d.encoding) AS encoding,
       d.datcollate AS collation, d.datallowconn AS allow_connections, d.datconnlimit AS connection_limit,
       pg_database_size(d.oid) AS bytes
FROM pg_database d WHERE NOT d.datistemplate {where} ORDER BY d.datname
"""

_TABLES = """
SELECT n.nspname AS schema, c.relname AS name, pg_get_userbyid(c.relowner) AS owner,
       CASE c.relkind WHEN 'p' THEN 'partitioned' ELSE 'table' END AS kind,
       greatest(c.reltuples, 0)::bigint AS rows_estimate,
       pg_total_relation_size(c.oid) AS bytes
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\\_toast%'
ORDER BY n.nspname, c.relname
"""

_ONE_DATABASE = "AND d.datname = :'name'"
_DATABASE_EXISTS = "SELECT 1 FROM pg_database WHERE datname = :'name'"

# The Debian package of the extensions PostgreSQL does not ship itself ({major}: 15).
EXTENSION_PACKAGES = {"postgis": "postgresql-{major}-postgis-3", "vector": "postgresql-{major}-pgvector"}


async def _status(args: NoArgs, ctx: JobContext, out: Output) -> int:
    pg = Postgres.of(ctx)
    try:
        (row,) = await pg.rows(_STATUS)
        result: dict[str, Any] = {"running": True, **row}
    except PgUnreachable as exc:  # a status says the server is down; it does not fail
        result = {"running": False, "host": pg.layout.host, "port": pg.layout.port, "error": str(exc)}
    out.result(result, as_json=ctx.as_json)
    return 0


async def _list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    databases = await Postgres.of(ctx).rows(_DATABASES.format(where=""))
    out.result({"databases": databases}, as_json=ctx.as_json)
    return 0


async def _size(args: PgSize, ctx: JobContext, out: Output) -> int:
    pg = Postgres.of(ctx)
    if args.name is None:
        rows = await pg.rows(_DATABASES.format(where=""))
    else:
        rows = await pg.rows(_DATABASES.format(where=_ONE_DATABASE), variables={"name": args.name})
        if not rows:
            raise JobError(f"no database {args.name} on this server")
    sizes = [{"name": row["name"], "bytes": row["bytes"]} for row in rows]
    out.result({"databases": sizes, "total_bytes": sum(row["bytes"] for row in sizes)}, as_json=ctx.as_json)
    return 0


async def _table_list(args: PgNameArgs, ctx: JobContext, out: Output) -> int:
    pg = Postgres.of(ctx)
    await require_database(pg, args.name)
    out.result({"database": args.name, "tables": await pg.rows(_TABLES, database=args.name)}, as_json=ctx.as_json)
    return 0


async def database_exists(pg: Postgres, name: str) -> bool:
    return await pg.exists(_DATABASE_EXISTS, variables={"name": name})


async def require_database(pg: Postgres, name: str) -> None:
    if not await database_exists(pg, name):
        raise JobError(f"no database {name} on this server")


async def _database(pg: Postgres, name: str) -> dict[str, Any]:
    (row,) = await pg.rows(_DATABASES.format(where=_ONE_DATABASE), variables={"name": name})
    return row


async def _create(args: PgCreate, ctx: JobContext, out: Output) -> int:
    pg = Postgres.of(ctx)
    if await database_exists(pg, args.name):
        row = await _database(pg, args.name)
        out.result({"message": f"database {args.name} already exists", "created": False, **row}, as_json=ctx.as_json)
        return 0
    # template0: the encoding may differ from template1's. The locale stays the server's, except
    # for a non-UTF8 encoding, which needs the C locale (any encoding goes with it).
    locale = "" if args.encoding == "UTF8" else " LOCALE 'C'"
    variables = {"name": args.name, "encoding": args.encoding, "owner": args.owner or pg.layout.superuser}
    await pg.run(f'CREATE DATABASE :"name" OWNER :"owner" ENCODING :\'encoding\' TEMPLATE template0{locale};\n',
                 variables=variables)  # fmt: skip
    row = await _database(pg, args.name)
    out.result({"message": f"database {args.name} created", "created": True, **row}, as_json=ctx.as_json)
    return 0


async def _drop(args: PgDrop, ctx: JobContext, out: Output) -> int:
    pg = Postgres.of(ctx)
    if not await database_exists(pg, args.name):
        out.result({"message": f"no database {args.name}: nothing to drop", "name": args.name, "dropped": False},
                   as_json=ctx.as_json)  # fmt: skip
        return 0
    force = " WITH (FORCE)" if args.force else ""  # FORCE: its open connections are terminated first
    owner = (await _database(pg, args.name))["owner"]
    await pg.run(f'DROP DATABASE IF EXISTS :"name"{force};\n', variables={"name": args.name})
    if owner.startswith(OWNER_ROLE_PREFIX):  # the database's own owner role (a restore made it) goes with it
        await pg.run('DROP ROLE IF EXISTS :"owner";\n', variables={"owner": owner})
    out.result({"message": f"database {args.name} dropped", "name": args.name, "dropped": True}, as_json=ctx.as_json)
    return 0


async def _extension_add(args: PgExtensionAdd, ctx: JobContext, out: Output) -> int:
    pg = Postgres.of(ctx)
    await require_database(pg, args.name)
    variables = {"extension": args.extension}
    available = await pg.rows(
        "SELECT installed_version FROM pg_available_extensions WHERE name = :'extension'",
        database=args.name,
        variables=variables,
    )
    if not available:
        (row,) = await pg.rows("SELECT current_setting('server_version_num')::int / 10000 AS major")
        package = EXTENSION_PACKAGES.get(args.extension, "postgresql-contrib").format(major=row["major"])
        raise JobError(
            f"the PostgreSQL extension {args.extension} is not installed on this server (Debian package {package})",
            EXIT_MISSING,
        )
    facts = {"database": args.name, "extension": args.extension}
    if available[0]["installed_version"] is not None:
        message = f"extension {args.extension} is already enabled in {args.name}"
        version = available[0]["installed_version"]
        out.result({"message": message, "added": False, **facts, "version": version}, as_json=ctx.as_json)
        return 0
    # SCHEMA public: the sessions' search_path is empty (see agent.jobs.pg.client), so the schema is named
    await pg.run(
        'CREATE EXTENSION IF NOT EXISTS :"extension" SCHEMA public;\n', database=args.name, variables=variables
    )
    (row,) = await pg.rows(
        "SELECT extversion AS version FROM pg_extension WHERE extname = :'extension'",
        database=args.name,
        variables=variables,
    )
    message = f"extension {args.extension} enabled in {args.name}"
    out.result({"message": message, "added": True, **facts, **row}, as_json=ctx.as_json)
    return 0


async def _vacuum(args: PgVacuum, ctx: JobContext, out: Output) -> int:
    """vacuumdb --verbose: its progress (one INFO line per table) streams as it goes."""
    pg = Postgres.of(ctx)
    vacuumdb = require("vacuumdb", "vacuum PostgreSQL databases")
    if args.name is not None:
        await require_database(pg, args.name)
    argv = [vacuumdb, "--verbose", *(["--analyze"] if args.analyze else []), *(["--full"] if args.full else [])]
    argv += pg.connection(args.name) if args.name is not None else [*pg.connection(None), "--all"]
    code = await stream_command(out, argv, **pg.options())
    if code != 0:
        raise JobError(f"vacuumdb failed (exit {code})")
    out.stdout(f"vacuumed {args.name or 'every database'}" + (" (full)" if args.full else ""))
    return 0


KINDS = [
    handler("pg.status", _status),
    handler("pg.list", _list),
    handler("pg.size", _size),
    handler("pg.table-list", _table_list),
    handler("pg.create", _create),
    handler("pg.drop", _drop),
    handler("pg.extension-add", _extension_add),
    handler("pg.vacuum", _vacuum),
]
