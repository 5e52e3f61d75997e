"""Job kinds of `pg`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import Bool, Cidr, DbName, DbUser, Secret, SiteDomain, listed_by
from contract.job_kinds.base import Args, FilePath, JobKind, NoArgs, ScopedPath, kind

PgDatabase = Annotated[DbName, listed_by("pg.list", "databases", "name", noun="databases")]
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
    name: PgDatabase
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
    name: PgDatabase
    privileges: Literal["all", "read", "readwrite"] = "all"


class PgExtensionAdd(Args):
    name: PgDatabase
    extension: PgExtension


class PgDump(Args):
    name: PgDatabase
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
    name: PgDatabase
    domain: SiteDomain
    path: FilePath = Field(min_length=1)
    clean: Bool = False


class PgSize(Args):
    name: PgDatabase | None = None  # None: every database


class PgNameArgs(Args):
    name: PgDatabase


class PgVacuum(Args):
    name: PgDatabase | None = None  # None: every database
    analyze: Bool = False  # update the planner's statistics too
    full: Bool = False  # rewrite the tables (reclaims space; locks each table while it runs)


class PgRevoke(Args):
    user: DbUser
    name: PgDatabase


class PgAllow(Args):
    """A pg_hba.conf entry: TCP logins from `cidr`, with a SCRAM password."""

    cidr: Cidr
    name: PgDatabase | None = None  # the database; None: all
    user: DbUser | None = None  # the role; None: all


_PG = {"name": "app"}
_DUMP = {"name": "app", "domain": "example.com", "path": "backups/app.dump"}
_ALLOW = {"cidr": "10.0.0.0/24", "name": "app", "user": "app_user"}

KINDS: list[JobKind] = [
    kind("pg.list", NoArgs, "List the PostgreSQL databases", read=True, example={}),
    kind("pg.status", NoArgs, "Show the PostgreSQL server status", read=True, example={}),
    kind("pg.create", PgCreate, "Create a PostgreSQL database", positional=("name",),
         example={"name": "app", "owner": "app_user"}),
    kind("pg.drop", PgDrop, "Drop a PostgreSQL database", positional=("name",), example={"name": "app", "force": True}),
    kind("pg.user-list", NoArgs, "List the PostgreSQL roles", read=True, example={}),
    kind("pg.user-create", PgUserCreate, "Create a PostgreSQL login role", positional=("user",),
         example={"user": "app_user", "password": "correct-horse-battery"}),
    kind("pg.user-delete", PgUser, "Delete a PostgreSQL role", positional=("user",), example={"user": "app_user"}),
    kind("pg.user-password", PgUserPassword, "Set a PostgreSQL role's password", positional=("user",),
         example={"user": "app_user", "password": "another-long-secret"}),
    kind("pg.grant", PgGrant, "Grant a role privileges on a database", positional=("user", "name"),
         example={"user": "app_user", "name": "app", "privileges": "read"}),
    kind("pg.extension-add", PgExtensionAdd, "Enable a trusted extension in a database",
         positional=("name", "extension"), example={"name": "app", "extension": "pg_trgm"}),
    kind("pg.dump", PgDump, "Dump a database into a site's files", positional=("name",), example=_DUMP,
         paths=(ScopedPath("path", site="domain"),)),
    kind("pg.restore", PgRestore, "Restore a dump from a site's files", positional=("name",),
         example={**_DUMP, "clean": True}, paths=(ScopedPath("path", site="domain"),)),
    kind("pg.size", PgSize, "Show PostgreSQL database sizes", read=True, example=_PG),
    kind("pg.table-list", PgNameArgs, "List the tables of a PostgreSQL database", read=True, positional=("name",),
         example=_PG),
    kind("pg.vacuum", PgVacuum, "Vacuum a PostgreSQL database (optionally analyze, full)",
         example={"name": "app", "analyze": True}),
    kind("pg.revoke", PgRevoke, "Revoke a role's privileges on a database", positional=("user", "name"),
         example={"user": "app_user", "name": "app"}),
    kind("pg.allow-list", NoArgs, "List the remote logins allowed in pg_hba.conf", read=True, example={}),
    kind("pg.allow-add", PgAllow, "Allow remote logins to PostgreSQL from a network", positional=("cidr",),
         example=_ALLOW),
    kind("pg.allow-remove", PgAllow, "Remove a remote login entry from pg_hba.conf", positional=("cidr",),
         example=_ALLOW),
]  # fmt: skip
