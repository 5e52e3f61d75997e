"""``pg user-list|user-create|user-delete|user-password|grant|revoke``: login roles and their
privileges on a database.

A grant covers the database (CONNECT, and TEMPORARY/CREATE as the level asks), every schema of it
that is not the system's, the tables and sequences in them now, and those the database's owner
creates later (default privileges). A revoke takes all of it back. Deleting a role hands what it
owns in each database to another role and drops its privileges there first (``REASSIGN OWNED`` +
``DROP OWNED``, PostgreSQL's own recipe), so the data stays: to the database's owner, never to a
superuser (a SECURITY DEFINER function or a view runs as its owner): where the
owner is a superuser (or the deleted role itself), to the database's own owner role
(`agent.jobs.pg.importer.database_owner_role`).
"""

from __future__ import annotations

from pydantic import SecretStr

from agent.jobs.pg.client import Postgres, scram_verifier
from agent.jobs.pg.databases import require_database
from agent.jobs.pg.importer import database_owner, database_owner_role
from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.output import JobError, Output
from contract.job_kinds.base import NoArgs
from contract.job_kinds.pg import PgGrant, PgRevoke, PgUser, PgUserCreate, PgUserPassword

_ROLES = """
SELECT r.rolname AS name, r.rolcanlogin AS login, r.rolsuper AS superuser, r.rolcreatedb AS createdb,
       r.rolcreaterole AS createrole, r.rolconnlimit AS connection_limit, r.rolvaliduntil AS valid_until,
       CASE WHEN a.rolpassword LIKE 'SCRAM-SHA-256$%' THEN 'scram-sha-256'
            WHEN a.rolpassword LIKE 'md5%' THEN 'md5'
            WHEN a.rolpassword IS NOT NULL THEN 'other' END AS password,
       ARRAY(SELECT b.rolname FROM pg_auth_members m JOIN pg_roles b ON b.oid = m.roleid
             WHERE m.member = r.oid ORDER BY 1) AS member_of
FROM pg_roles r JOIN pg_authid a ON a.oid = r.oid
WHERE r.rolname !~ '^pg_' {where}
ORDER BY r.rolname
"""
_ONE_ROLE = "AND r.rolname = :'user'"
_ROLE_EXISTS = "SELECT 1 FROM pg_roles WHERE rolname = :'user'"

# The schemas of a database a grant covers (its own, not PostgreSQL's).
_SCHEMAS = "FROM pg_namespace n WHERE n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'"
# The database's owner, whose future tables the default privileges cover.
_OWNER = "(SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database())"

# (database, schema, tables, sequences) privileges of each level.
LEVELS = {
    "read": ("CONNECT", "USAGE", "SELECT", "SELECT"),
    "readwrite": ("CONNECT, TEMPORARY", "USAGE", "SELECT, INSERT, UPDATE, DELETE", "USAGE, SELECT, UPDATE"),
    "all": ("ALL PRIVILEGES", "ALL PRIVILEGES", "ALL PRIVILEGES", "ALL PRIVILEGES"),
}


async def _user_list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    out.result({"roles": await Postgres.of(ctx).rows(_ROLES.format(where=""))}, as_json=ctx.as_json)
    return 0


async def role_exists(pg: Postgres, user: str) -> bool:
    return await pg.exists(_ROLE_EXISTS, variables={"user": user})


async def _require_role(pg: Postgres, user: str) -> None:
    if not await role_exists(pg, user):
        raise JobError(f"no role {user} on this server")


async def _user_create(args: PgUserCreate, ctx: JobContext, out: Output) -> int:
    pg = Postgres.of(ctx)
    variables = {"user": args.user}
    if await role_exists(pg, args.user):
        (role,) = await pg.rows(_ROLES.format(where=_ONE_ROLE), variables=variables)
        message = f"role {args.user} already exists (its password is unchanged: pg user-password sets it)"
        out.result({"message": message, "created": False, **role}, as_json=ctx.as_json)
        return 0
    createdb = " CREATEDB" if args.createdb else ""
    await _with_password(pg, f"CREATE ROLE :\"user\" LOGIN{createdb} PASSWORD :'pw';\n", args.user, args.password)
    (role,) = await pg.rows(_ROLES.format(where=_ONE_ROLE), variables=variables)
    out.result({"message": f"role {args.user} created", "created": True, **role}, as_json=ctx.as_json)
    return 0


async def _with_password(pg: Postgres, sql: str, user: str, password: SecretStr) -> None:
    """Run `sql` with ``:'pw'`` set (on stdin) to the SCRAM verifier of `password`."""
    plain = password.get_secret_value()
    await pg.run(sql, variables={"user": user}, secrets={"pw": scram_verifier(plain)}, mask=(plain,))


async def _user_password(args: PgUserPassword, ctx: JobContext, out: Output) -> int:
    pg = Postgres.of(ctx)
    await _require_role(pg, args.user)
    await _with_password(pg, "ALTER ROLE :\"user\" PASSWORD :'pw';\n", args.user, args.password)
    out.stdout(f"password of role {args.user} changed")
    return 0


async def _user_delete(args: PgUser, ctx: JobContext, out: Output) -> int:
    pg = Postgres.of(ctx)
    superuser = pg.layout.superuser
    if args.user == superuser:
        raise JobError(f"role {args.user} is the one the agent acts as: it is not deleted")
    facts = {"name": args.user}
    if not await role_exists(pg, args.user):
        out.result({"message": f"no role {args.user}: nothing to delete", "deleted": False, **facts},
                   as_json=ctx.as_json)  # fmt: skip
        return 0
    databases = await pg.rows("SELECT datname AS name FROM pg_database WHERE datallowconn ORDER BY 1")
    for database in databases:
        heir = await _heir(pg, database["name"], args.user)
        await pg.run(
            'REASSIGN OWNED BY :"user" TO :"heir";\nDROP OWNED BY :"user";\n',
            database=database["name"],
            variables={"user": args.user, "heir": heir},
        )
    await pg.run('DROP ROLE :"user";\n', variables={"user": args.user})
    out.result({"message": f"role {args.user} deleted", "deleted": True, **facts}, as_json=ctx.as_json)
    return 0


async def _heir(pg: Postgres, name: str, leaving: str) -> str:
    """Who gets what `leaving` owns in database `name`: the database's owner, unless that is
    `leaving` itself or a role with powers (a superuser...): then the database's own owner role.
    Never a superuser: what a role made (a SECURITY DEFINER function, a view) runs as its owner."""
    found = await database_owner(pg, name)
    if found["owner"] != leaving and not found["powerful"]:
        heir: str = found["owner"]
        return heir
    heir = await database_owner_role(pg, found["oid"])
    if found["owner"] == leaving:  # its database goes to the heir first: REASSIGN would give it to the first heir
        await pg.run('ALTER DATABASE :"name" OWNER TO :"heir";\n', variables={"name": name, "heir": heir})
    return heir


def grant_sql(privileges: str) -> str:
    """The statements of a grant at `privileges` (run in the database, with :name and :user set)."""
    on_database, on_schema, on_tables, on_sequences = LEVELS[privileges]
    per_schema = [
        f"GRANT {on_schema} ON SCHEMA %1$I TO %2$I",
        f"GRANT {on_tables} ON ALL TABLES IN SCHEMA %1$I TO %2$I",
        f"GRANT {on_sequences} ON ALL SEQUENCES IN SCHEMA %1$I TO %2$I",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE %3$I IN SCHEMA %1$I GRANT {on_tables} ON TABLES TO %2$I",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE %3$I IN SCHEMA %1$I GRANT {on_sequences} ON SEQUENCES TO %2$I",
    ]
    return _in_each_schema(f'GRANT {on_database} ON DATABASE :"name" TO :"user";\n', per_schema)


def revoke_sql() -> str:
    per_schema = [
        "REVOKE ALL PRIVILEGES ON ALL TABLES IN SCHEMA %1$I FROM %2$I",
        "REVOKE ALL PRIVILEGES ON ALL SEQUENCES IN SCHEMA %1$I FROM %2$I",
        "REVOKE ALL PRIVILEGES ON SCHEMA %1$I FROM %2$I",
        "ALTER DEFAULT PRIVILEGES FOR ROLE %3$I IN SCHEMA %1$I REVOKE ALL PRIVILEGES ON TABLES FROM %2$I",
        "ALTER DEFAULT PRIVILEGES FOR ROLE %3$I IN SCHEMA %1$I REVOKE ALL PRIVILEGES ON SEQUENCES FROM %2$I",
    ]
    return _in_each_schema('REVOKE ALL PRIVILEGES ON DATABASE :"name" FROM :"user";\n', per_schema)


def _in_each_schema(on_database: str, per_schema: list[str]) -> str:
    """One transaction: the database statement, then `per_schema` for every schema (``\\gexec``
    runs each statement the server formats; ``%I`` quotes the names)."""
    sql = ["BEGIN;\n", on_database]
    for template in per_schema:
        sql.append(f"SELECT format('{template}', n.nspname, :'user', {_OWNER}) {_SCHEMAS} ORDER BY 1 \\gexec\n")
    sql.append("COMMIT;\n")
    return "".join(sql)


async def _grant(args: PgGrant, ctx: JobContext, out: Output) -> int:
    pg = Postgres.of(ctx)
    await _require_role(pg, args.user)
    await require_database(pg, args.name)
    await pg.run(grant_sql(args.privileges), database=args.name, variables={"name": args.name, "user": args.user})
    out.stdout(f"granted {args.privileges} on database {args.name} to role {args.user}")
    return 0


async def _revoke(args: PgRevoke, ctx: JobContext, out: Output) -> int:
    pg = Postgres.of(ctx)
    await _require_role(pg, args.user)
    await require_database(pg, args.name)
    await pg.run(revoke_sql(), database=args.name, variables={"name": args.name, "user": args.user})
    out.stdout(f"revoked the privileges of role {args.user} on database {args.name}")
    return 0


KINDS = [
    handler("pg.user-list", _user_list),
    handler("pg.user-create", _user_create),
    handler("pg.user-delete", _user_delete),
    handler("pg.user-password", _user_password),
    handler("pg.grant", _grant),
    handler("pg.revoke", _revoke),
]
