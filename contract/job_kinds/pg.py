"""Job kinds of `pg`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import Bool, Cidr, DbName, DbUser, Secret, SiteDomain, listed_by
from contract.job_kinds.base import INFRA, Args, FilePath, JobKind, NoArgs, Result, ScopedPath, kind

PgDatabaseName = Annotated[DbName, listed_by("pg.list", "databases", "name", noun="databases")]
"""A PostgreSQL database the server has (a new one's name is a plain `DbName`)."""


PgExtension = Literal[
    "pg_trgm", "uuid-ossp", "pgcrypto", "hstore", "citext", "unaccent", "postgis", "vector",
    "pg_stat_statements", "btree_gin", "btree_gist", "fuzzystrmatch", "intarray", "ltree", "tablefunc",
]  # fmt: skip
"""Trusted extensions only: no untrusted languages, no file or network access."""


class PgCreate(Args):
    name: DbName
    owner: DbUser | None = None
    encoding: Literal["UTF8", "LATIN1", "SQL_ASCII"] = "UTF8"


class PgDrop(Args):
    name: PgDatabaseName
    force: Bool = False  # terminate open connections first


class PgUserCreate(Args):
    user: DbUser
    password: Secret
    createdb: Bool = False


class PgUser(Args):
    user: DbUser


class PgUserPassword(Args):
    user: DbUser
    password: Secret


class PgGrant(Args):
    user: DbUser
    name: PgDatabaseName
    privileges: Literal["all", "read", "readwrite"] = "all"


class PgExtensionAdd(Args):
    name: PgDatabaseName
    extension: PgExtension


class PgDump(Args):
    name: PgDatabaseName
    domain: SiteDomain
    path: FilePath = Field(min_length=1)
    format: Literal["plain", "custom"] = "custom"
    gzip: Bool = False  # a plain dump gzipped (a custom one is always compressed)

    @model_validator(mode="after")
    def _gzip_is_for_plain(self) -> PgDump:
        if self.gzip and self.format != "plain":
            raise ValueError("gzip applies to a plain dump: a custom dump is compressed already")
        return self


class PgRestore(Args):
    name: PgDatabaseName
    domain: SiteDomain
    path: FilePath = Field(min_length=1)
    clean: Bool = False


class PgSize(Args):
    name: PgDatabaseName | None = None  # None: every database


class PgNameArgs(Args):
    name: PgDatabaseName


class PgVacuum(Args):
    name: PgDatabaseName | None = None  # None: every database
    analyze: Bool = False  # update the planner's statistics too
    full: Bool = False  # rewrite the tables (reclaims space; locks each table while it runs)


class PgRevoke(Args):
    user: DbUser
    name: PgDatabaseName


class PgAllow(Args):
    """A pg_hba.conf entry: TCP logins from `cidr`, with a SCRAM password."""

    cidr: Cidr
    name: PgDatabaseName | None = None  # the database; None: all
    user: DbUser | None = None  # the role; None: all


# --- results -------------------------------------------------------------------------------------


class PgStatus(Result):
    running: bool = Field(description="the server answered")
    version: str | None = Field(default=None, description="the server's version (null: not running)")
    version_num: int | None = Field(default=None, description="the version as a number (150004 for 15.4)")
    started_at: str | None = Field(default=None, description="when the server started (ISO 8601)")
    uptime_s: int | None = Field(default=None, description="seconds since the server started")
    connections: int | None = Field(default=None, description="client connections open now")
    max_connections: int | None = Field(default=None, description="the server's max_connections")
    databases: int | None = Field(default=None, description="databases, templates left out")
    in_recovery: bool | None = Field(default=None, description="a standby replaying the primary's WAL")
    listen_addresses: str | None = Field(default=None, description="the server's listen_addresses")
    host: str | None = Field(default=None, description="where the agent looked for it (only when not running)")
    port: int | None = Field(default=None, description="the server's TCP port")
    data_directory: str | None = Field(default=None, description="the server's data directory")
    hba_file: str | None = Field(default=None, description="the path of its pg_hba.conf")
    error: str | None = Field(default=None, description="why it did not answer (null: running)")


class PgDatabase(Result):
    name: str = Field(description="the database's name")
    owner: str = Field(description="the role owning it")
    encoding: str = Field(description="its character encoding (UTF8, LATIN1, SQL_ASCII)")
    collation: str = Field(description="its LC_COLLATE")
    allow_connections: bool = Field(description="it accepts connections")
    connection_limit: int = Field(description="connections at most (-1: no limit)")
    bytes: int = Field(description="its size on disk, in bytes")


class PgDatabases(Result):
    databases: list[PgDatabase] = Field(description="the databases, templates left out, by name")


class PgDatabaseCreated(PgDatabase):
    message: str = Field(description="what happened, for a person")
    created: bool = Field(description="the database was created (false: it existed)")


class PgDatabaseDropped(Result):
    message: str = Field(description="what happened, for a person")
    name: str = Field(description="the database's name")
    dropped: bool = Field(description="the database was dropped (false: there was none)")


class PgSizeRow(Result):
    name: str = Field(description="the database's name")
    bytes: int = Field(description="its size on disk, in bytes")


class PgSizes(Result):
    databases: list[PgSizeRow] = Field(description="the databases measured, by name")
    total_bytes: int = Field(description="their sum, in bytes")


class PgTable(Result):
    schema_: str = Field(alias="schema", description="the table's schema")
    name: str = Field(description="the table's name")
    owner: str = Field(description="the role owning it")
    kind: str = Field(description="table or partitioned")
    rows_estimate: int = Field(description="the planner's estimate of its rows")
    bytes: int = Field(description="its size with indexes and TOAST, in bytes")


class PgTables(Result):
    database: str = Field(description="the database's name")
    tables: list[PgTable] = Field(description="its tables, by schema and name")


class PgRole(Result):
    name: str = Field(description="the role's name")
    login: bool = Field(description="it may log in")
    superuser: bool = Field(description="it is a superuser")
    createdb: bool = Field(description="it may create databases")
    createrole: bool = Field(description="it may create roles")
    connection_limit: int = Field(description="connections at most (-1: no limit)")
    valid_until: str | None = Field(description="when its password expires (null: never)")
    password: str | None = Field(description="scram-sha-256, md5 or other (null: no password)")
    member_of: list[str] = Field(description="the roles it is a member of")


class PgRoles(Result):
    roles: list[PgRole] = Field(description="the roles, PostgreSQL's own left out, by name")


class PgRoleCreated(PgRole):
    message: str = Field(description="what happened, for a person")
    created: bool = Field(description="the role was created (false: it existed, its password unchanged)")


class PgRoleDeleted(Result):
    message: str = Field(description="what happened, for a person")
    deleted: bool = Field(description="the role was deleted (false: there was none)")
    name: str = Field(description="the role's name")


class PgExtensionAdded(Result):
    message: str = Field(description="what happened, for a person")
    added: bool = Field(description="the extension was enabled (false: it was already)")
    database: str = Field(description="the database's name")
    extension: str = Field(description="the extension's name")
    version: str = Field(description="the extension's version in the database")


class PgHbaEntry(Result):
    cidr: str = Field(description="the network logins may come from")
    database: str = Field(description="the database they may reach (all: every one)")
    user: str = Field(description="the role they may log in as (all: every one)")
    method: str = Field(description="the authentication method (scram-sha-256)")


class PgAllowList(Result):
    hba_file: str = Field(description="the path of pg_hba.conf")
    entries: list[PgHbaEntry] = Field(description="the entries the agent manages, in the file's order")


class PgAllowAdded(Result):
    message: str = Field(description="what happened, for a person")
    added: bool = Field(description="the entry was added (false: it was there)")
    entry: PgHbaEntry = Field(description="the entry")


class PgAllowRemoved(Result):
    message: str = Field(description="what happened, for a person")
    removed: bool = Field(description="the entry was removed (false: it was not there)")
    entry: PgHbaEntry = Field(description="the entry")


_PG = {"name": "app"}
_DUMP = {"name": "app", "domain": "example.com", "path": "backups/app.dump"}
_ALLOW = {"cidr": "10.0.0.0/24", "name": "app", "user": "app_user"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("pg.list", NoArgs, "List the PostgreSQL databases", read=True, example={}, result=PgDatabases),
    kind("pg.status", NoArgs, "Show the PostgreSQL server status", read=True, example={}, result=PgStatus),
    kind("pg.create", PgCreate, "Create a PostgreSQL database", positional=("name",),
         example={"name": "app", "owner": "app_user"}, result=PgDatabaseCreated),
    kind("pg.drop", PgDrop, "Drop a PostgreSQL database", positional=("name",), example={"name": "app", "force": True},
         result=PgDatabaseDropped, confirm="name"),
    kind("pg.user-list", NoArgs, "List the PostgreSQL roles", read=True, example={}, result=PgRoles),
    kind("pg.user-create", PgUserCreate, "Create a PostgreSQL login role", positional=("user",),
         example={"user": "app_user", "password": "correct-horse-battery"}, result=PgRoleCreated),
    kind("pg.user-delete", PgUser, "Delete a PostgreSQL role", positional=("user",), example={"user": "app_user"},
         result=PgRoleDeleted, confirm="user"),
    kind("pg.user-password", PgUserPassword, "Set a PostgreSQL role's password", positional=("user",),
         example={"user": "app_user", "password": "another-long-secret"}),
    kind("pg.grant", PgGrant, "Grant a role privileges on a database", positional=("user", "name"),
         example={"user": "app_user", "name": "app", "privileges": "read"}),
    kind("pg.extension-add", PgExtensionAdd, "Enable a trusted extension in a database",
         positional=("name", "extension"), example={"name": "app", "extension": "pg_trgm"}, result=PgExtensionAdded),
    kind("pg.dump", PgDump, "Dump a database into a site's files", positional=("name",), example=_DUMP,
         paths=(ScopedPath("path", site="domain"),)),
    kind("pg.restore", PgRestore, "Restore a dump from a site's files", positional=("name",),
         example={**_DUMP, "clean": True}, paths=(ScopedPath("path", site="domain"),)),
    kind("pg.size", PgSize, "Show PostgreSQL database sizes", read=True, example=_PG, result=PgSizes),
    kind("pg.table-list", PgNameArgs, "List the tables of a PostgreSQL database", read=True, positional=("name",),
         example=_PG, result=PgTables),
    kind("pg.vacuum", PgVacuum, "Vacuum a PostgreSQL database (optionally analyze, full)",
         example={"name": "app", "analyze": True}),
    kind("pg.revoke", PgRevoke, "Revoke a role's privileges on a database", positional=("user", "name"),
         example={"user": "app_user", "name": "app"}),
    kind("pg.allow-list", NoArgs, "List the remote logins allowed in pg_hba.conf", read=True, example={},
         result=PgAllowList),
    kind("pg.allow-add", PgAllow, "Allow remote logins to PostgreSQL from a network", positional=("cidr",),
         example=_ALLOW, result=PgAllowAdded),
    kind("pg.allow-remove", PgAllow, "Remove a remote login entry from pg_hba.conf", positional=("cidr",),
         example=_ALLOW, result=PgAllowRemoved),
]  # fmt: skip
