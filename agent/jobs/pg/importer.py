"""The role a restore's SQL runs as: made for one restore, owning the target database alone.

A dump is a site's text, so its statements never run as the superuser. `importer` makes a
throwaway login role (``fleetdeck_importer_<random>``: NOSUPERUSER NOCREATEDB NOCREATEROLE
NOREPLICATION NOBYPASSRLS, member of no role, one connection at most, a random password set as
its SCRAM verifier) and hands it the target database: the database itself and every object in it
that its owner owns (schemas, tables, views, sequences, functions, types, ..., large objects;
not an extension's members), so a ``--clean`` restore may drop and make them again, and nothing
else. The server itself then refuses what would reach further: ``COPY ... TO/FROM PROGRAM`` or
a server file, ``pg_read_file``, ``lo_import``, ``CREATE ROLE``, ``ALTER ROLE ... SUPERUSER``,
``ALTER SYSTEM``, an untrusted language, another database.

Once the restore is over, whatever happened, the database and everything the role owns go to the
database's owner (``REASSIGN OWNED``), its privileges go (``DROP OWNED``), its sessions are
ended and the role is dropped (as is the role of an earlier restore the agent could not end, a
crash's, found owning the database). The owner must be a role a site's SQL may run as: a superuser, or
a role that may create roles, replicate, bypass row security, read or write the server's files or
run its programs (or a member of one) would lend that power to the dump's functions and views
(they run as their owner). A database owned by a superuser (``pg.create`` without an owner, or
one the restore creates) is therefore given an owner role of its own first,
``fleetdeck_owner_<database oid>`` (NOLOGIN, nothing but that database; dropped by ``pg.drop``);
a database owned by any other such role is refused.

The role logs in over TCP with its password (libpq reads it from a memory file handed to the
client as ``PGPASSFILE=/dev/fd/N``: never in argv, the environment or a file on disk), at the
layout's address, or at 127.0.0.1 when the layout names a socket folder (peer authentication
there maps OS users to roles of the same name; Debian's pg_hba.conf accepts password logins from
127.0.0.1).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from agent.jobs.pg.client import CONNECT_TIMEOUT_S, Postgres, scram_verifier
from agent.jobs.toolkit.output import JobError, Output
from agent.jobs.toolkit.proc import tool_env
from contract.job_kinds.argtypes import AGENT_DB_ROLE_PREFIX

IMPORTER_PREFIX = f"{AGENT_DB_ROLE_PREFIX}importer_"
OWNER_ROLE_PREFIX = f"{AGENT_DB_ROLE_PREFIX}owner_"
OWNER_ROLE = OWNER_ROLE_PREFIX + "{oid}"  # a database's own owner role, named after its oid
LOCAL_ADDRESS = "127.0.0.1"  # where the role logs in when the layout names a socket folder
TERMINATE_WAIT_MS = 5000

# What a role may do through its own attributes or a role it is a member of (SET ROLE), that a
# site's SQL must never be lent: its functions and views run as their owner.
_POWERS = """
EXISTS (SELECT 1 FROM pg_catalog.pg_roles p WHERE pg_catalog.pg_has_role(r.oid, p.oid, 'MEMBER')
        AND (p.rolsuper OR p.rolcreaterole OR p.rolreplication OR p.rolbypassrls
             OR p.rolname IN ('pg_execute_server_program', 'pg_read_server_files', 'pg_write_server_files')))
"""
_OWNER = f"""
SELECT d.oid AS oid, r.rolname AS owner, r.rolsuper AS superuser, {_POWERS} AS powerful
FROM pg_catalog.pg_database d JOIN pg_catalog.pg_roles r ON r.oid = d.datdba WHERE d.datname = :'name'
"""
_ROLE = f"SELECT {_POWERS} AS powerful FROM pg_catalog.pg_roles r WHERE r.rolname = :'role'"

# Every object of the database (outside the system's schemas) that :'owner' owns, as the
# statement that hands it to :"importer". What follows another object is left out: an owned
# sequence or an index goes with its table, an array or row type with its type or table, an
# extension's members with the extension (which has no ALTER ... OWNER).
_HAND_OVER = """
SELECT pg_catalog.format('ALTER %s %s OWNER TO %I',
                         CASE o.type WHEN 'statistics object' THEN 'STATISTICS' ELSE pg_catalog.upper(o.type) END,
                         o.identity, :'importer')
FROM (
    SELECT 'pg_catalog.pg_namespace'::pg_catalog.regclass AS classid, n.oid AS objid, n.nspowner AS owner
      FROM pg_catalog.pg_namespace n WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
    UNION ALL SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, c.oid, c.relowner FROM pg_catalog.pg_class c
      WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
         OR (c.relkind = 'S' AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
             WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid = c.oid
               AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.deptype IN ('a', 'i')))
    UNION ALL SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, oid, proowner FROM pg_catalog.pg_proc
    UNION ALL SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, oid, typowner FROM pg_catalog.pg_type
      WHERE typtype IN ('b', 'c', 'd', 'e', 'r')
    UNION ALL SELECT 'pg_catalog.pg_collation'::pg_catalog.regclass, oid, collowner FROM pg_catalog.pg_collation
    UNION ALL SELECT 'pg_catalog.pg_conversion'::pg_catalog.regclass, oid, conowner FROM pg_catalog.pg_conversion
    UNION ALL SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass, oid, oprowner FROM pg_catalog.pg_operator
    UNION ALL SELECT 'pg_catalog.pg_opclass'::pg_catalog.regclass, oid, opcowner FROM pg_catalog.pg_opclass
    UNION ALL SELECT 'pg_catalog.pg_opfamily'::pg_catalog.regclass, oid, opfowner FROM pg_catalog.pg_opfamily
    UNION ALL SELECT 'pg_catalog.pg_ts_dict'::pg_catalog.regclass, oid, dictowner FROM pg_catalog.pg_ts_dict
    UNION ALL SELECT 'pg_catalog.pg_ts_config'::pg_catalog.regclass, oid, cfgowner FROM pg_catalog.pg_ts_config
    UNION ALL SELECT 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass, oid, stxowner
      FROM pg_catalog.pg_statistic_ext
    UNION ALL SELECT 'pg_catalog.pg_largeobject'::pg_catalog.regclass, oid, lomowner
      FROM pg_catalog.pg_largeobject_metadata
) x CROSS JOIN LATERAL pg_catalog.pg_identify_object(x.classid, x.objid, 0) o
WHERE x.owner = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = :'owner')
  AND coalesce(o.schema, '') !~ '^pg_' AND coalesce(o.schema, '') <> 'information_schema'
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid = x.classid AND d.objid = x.objid
                  AND d.deptype IN ('i', 'e') AND (d.refclassid, d.refobjid) <> (x.classid, x.objid))
ORDER BY 1 \\gexec
"""


@dataclass
class Importer:
    """The throwaway role of one restore, and how a client logs in as it."""

    pg: Postgres
    database: str
    role: str = field(default_factory=lambda: IMPORTER_PREFIX + secrets.token_hex(6))
    password: str = field(default_factory=lambda: secrets.token_hex(24), repr=False)
    owner: str = ""  # the role the database and what the restore made go to (never a superuser)
    previous_owner: str = ""  # the database's owner before the restore ("": the restore made it)
    extensions: frozenset[str] = frozenset()  # the database's extensions before the restore (not its)

    @property
    def address(self) -> str:
        host = self.pg.layout.host
        return LOCAL_ADDRESS if host.startswith("/") else host

    @property
    def where(self) -> str:
        return f"{self.address}:{self.pg.layout.port}"

    def connection(self) -> list[str]:
        """The options that connect psql (or pg_restore) as the role, to the target database."""
        return ["--host", self.address, "--port", str(self.pg.layout.port), "--username", self.role,
                "--dbname", self.database, "--no-password"]  # fmt: skip

    def password_file(self, owner: tuple[int, int] | None) -> int:
        """A memory file holding the role's ``.pgpass`` line (mode 0600, owned by `owner`, the
        client's uid and gid), to hand to the client as ``/dev/fd/N``; the caller closes it."""
        fd = os.memfd_create("pgpass", 0)  # not close-on-exec: the client inherits it (pass_fds)
        try:
            os.write(fd, f"*:*:*:{self.role}:{self.password}\n".encode())
            os.fchmod(fd, 0o600)  # libpq ignores a password file others may read
            if owner is not None:
                os.fchown(fd, *owner)  # the client opens it again through /dev/fd: it must be its own
        except BaseException:
            os.close(fd)
            raise
        return fd

    def options(self, password_fd: int, identity: dict[str, Any]) -> dict[str, Any]:
        """How a client of the restore runs: as `identity` (Popen's ``user``...), with a small
        environment, the password file inherited."""
        env = tool_env(
            PGPASSFILE=f"/dev/fd/{password_fd}",
            PGCONNECT_TIMEOUT=CONNECT_TIMEOUT_S,
            PGAPPNAME="fleetdeck-restore",
        )  # the server's search_path: the dump's SQL is written for it (and runs with the role's rights only)
        return {"env": env, "cwd": "/", "pass_fds": (password_fd,), **identity}

    def login_failed(self, said: str) -> JobError:
        return JobError(
            f"the restore's role could not log in to PostgreSQL at {self.where} ({said}): a restore logs in with a"
            f" password over TCP there (pg_hba.conf must accept scram-sha-256 from {self.address}, as Debian's does)"
        )


async def database_owner(pg: Postgres, name: str) -> dict[str, Any]:
    """The database's oid and owner: ``{oid, owner, superuser, powerful}``."""
    (row,) = await pg.rows(_OWNER, variables={"name": name})
    return row


async def database_owner_role(pg: Postgres, oid: int) -> str:
    """The own owner role of the database `oid` (made when missing): NOLOGIN, no power, what a
    site's objects in it belong to when its owner may not own them.

    Raises:
        JobError: a role of that name exists with powers (made by hand): it is not used.
    """
    role = OWNER_ROLE.format(oid=oid)
    found = await pg.rows(_ROLE, variables={"role": role})
    if found and found[0]["powerful"]:
        raise JobError(f"role {role} exists with powers a database's owner role must not have: nothing was restored")
    if not found:
        await pg.run(
            'CREATE ROLE :"role" NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;\n',
            variables={"role": role},
        )
    return role


def _refuse_owner(name: str, owner: str) -> JobError:
    return JobError(
        f"database {name} belongs to role {owner}, which may create roles, replicate, bypass row security, or read,"
        " write or run the server's files (itself or through a role it is a member of): a restore's functions and"
        " views would run with those rights, so nothing was restored (give the database an owner without them)"
    )


@asynccontextmanager
async def importer(pg: Postgres, name: str, out: Output, *, create: bool) -> AsyncIterator[Importer]:
    """The throwaway role of a restore into database `name`, which owns it while the block runs
    (with `create`, the database is made for it, and dropped again when the block fails).

    Raises:
        JobError: the database's owner may not own a restore's objects (nothing was changed).
    """
    role = Importer(pg, name)
    if not create:
        found = await database_owner(pg, name)
        if found["powerful"] and not found["superuser"]:
            raise _refuse_owner(name, found["owner"])
        role.previous_owner = found["owner"]
        left_over = role.previous_owner.startswith(IMPORTER_PREFIX)  # the role of a restore the agent never ended
        if found["superuser"] or left_over:
            role.owner = await database_owner_role(pg, found["oid"])
        else:
            role.owner = found["owner"]
    variables = {"importer": role.role, "name": name}
    await pg.run(
        'CREATE ROLE :"importer" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS'
        " CONNECTION LIMIT 1 PASSWORD :'pw';\n",
        variables=variables,
        secrets={"pw": scram_verifier(role.password)},
        mask=(role.password,),
    )
    made = restored = False
    try:
        if create:
            await pg.run('CREATE DATABASE :"name" OWNER :"importer" TEMPLATE template0;\n', variables=variables)
            made = True
            out.stdout(f"database {name} created")
            role.owner = await database_owner_role(pg, (await database_owner(pg, name))["oid"])
        else:
            await pg.run(
                f'BEGIN;\nALTER DATABASE :"name" OWNER TO :"importer";\n{_HAND_OVER}COMMIT;\n',
                database=name,
                variables={**variables, "owner": role.previous_owner},
            )
        extensions = "SELECT extname AS name FROM pg_catalog.pg_extension WHERE extname <> 'plpgsql'"
        role.extensions = frozenset(row["name"] for row in await pg.rows(extensions, database=name))
        yield role
        restored = True
    finally:
        with trio.CancelScope(shield=True):
            await _end(pg, role, out, drop_database=made and not restored)


async def _end(pg: Postgres, role: Importer, out: Output, *, drop_database: bool) -> None:
    """The role's sessions ended, what it owns handed to the database's owner role (or the
    database dropped, with the owner role made for it), then the role dropped. A step that fails
    is said on stderr: the rest still runs."""
    variables = {"importer": role.role, "name": role.database, "owner": role.owner, "left_over": role.previous_owner}
    end = 'ALTER ROLE :"importer" NOLOGIN;\n'
    end += f"SELECT pg_catalog.pg_terminate_backend(pid, {TERMINATE_WAIT_MS}) FROM pg_catalog.pg_stat_activity"
    end += " WHERE usename = :'importer';\n"
    steps = [(end, "postgres")]
    if drop_database:
        steps.append(('DROP DATABASE IF EXISTS :"name" WITH (FORCE);\n', "postgres"))
        if role.owner:
            steps.append(('DROP ROLE IF EXISTS :"owner";\n', "postgres"))
    elif role.owner:
        hand = 'ALTER DATABASE :"name" OWNER TO :"owner";\nREASSIGN OWNED BY :"importer" TO :"owner";\n'
        steps.append((hand + 'DROP OWNED BY :"importer";\n', role.database))
    steps.append(('DROP ROLE IF EXISTS :"importer";\n', "postgres"))
    if role.previous_owner.startswith(IMPORTER_PREFIX):  # it owns nothing here any more
        steps.append(('DROP ROLE IF EXISTS :"left_over";\n', "postgres"))
    for sql, database in steps:
        try:
            await pg.run(sql, database=database, variables=variables)
        except JobError as exc:
            out.stderr(f"warning: cleaning up after the restore's role {role.role}: {exc}")
