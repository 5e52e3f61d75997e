"""Job kinds of `db`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from contract.job_kinds.argtypes import Bool, DbHost, DbName, DbUser, Secret, SiteDomain, listed_by
from contract.job_kinds.base import Args, FilePath, JobKind, NoArgs, ScopedPath, kind

MariaDbDatabase = Annotated[DbName, listed_by("db.list", None, "name", noun="databases", details=("charset",))]
"""A MariaDB database the server has (a new one's name is a plain `DbName`)."""


_SQL = {"domain": "example.com", "path": "backups/shop.sql.gz"}


class DbNameArgs(Args):
    name: MariaDbDatabase


class DbSize(Args):
    name: MariaDbDatabase | None = None


class DbCreate(Args):
    name: DbName
    charset: Literal["utf8mb4", "utf8mb3", "latin1"] = "utf8mb4"
    collation: Literal["utf8mb4_unicode_ci", "utf8mb4_general_ci", "utf8mb4_0900_ai_ci", "utf8mb4_bin"] | None = None

    @model_validator(mode="after")
    def _collation_of_charset(self) -> DbCreate:
        if self.collation is not None and not self.collation.startswith(f"{self.charset}_"):
            raise ValueError(f"the collation {self.collation} is not one of the character set {self.charset}")
        return self


class DbUserCreate(Args):
    user: DbUser
    password: Secret
    host: DbHost = "localhost"


class DbUserArgs(Args):
    user: DbUser
    host: DbHost = "localhost"


class DbUserPassword(Args):
    user: DbUser
    password: Secret
    host: DbHost = "localhost"


class DbGrant(Args):
    user: DbUser
    name: MariaDbDatabase
    privileges: Literal["all", "read", "readwrite"] = "all"
    host: DbHost = "localhost"


class DbRevoke(Args):
    user: DbUser
    name: MariaDbDatabase
    host: DbHost = "localhost"


SQL_SUFFIXES = (".sql", ".sql.gz")


def _sql_file(value: str) -> str:
    if not value.endswith(SQL_SUFFIXES):
        raise ValueError("an SQL dump is a .sql file, or .sql.gz when gzip-compressed")
    return value


SqlFile = Annotated[FilePath, Field(min_length=1), AfterValidator(_sql_file)]
"""A dump in a site's files: its suffix says whether it is gzip-compressed (.sql.gz) or not (.sql)."""


class DbImport(Args):
    name: MariaDbDatabase
    domain: SiteDomain
    path: SqlFile
    drop_existing: Bool = False  # drop the database's tables first (it is recreated empty)


class DbExport(Args):
    name: MariaDbDatabase
    domain: SiteDomain
    path: SqlFile  # .sql.gz: compressed with gzip as it is written


_DB = {"name": "shop"}

KINDS: list[JobKind] = [
    kind("db.list", NoArgs, "List the MySQL/MariaDB databases", read=True, example={}),
    kind("db.status", NoArgs, "Show the database server status", read=True, example={}),
    kind("db.size", DbSize, "Show database sizes", read=True, example=_DB),
    kind("db.table-list", DbNameArgs, "List the tables of a database", read=True, positional=("name",), example=_DB),
    kind("db.create", DbCreate, "Create a database", positional=("name",),
         example={"name": "shop", "collation": "utf8mb4_unicode_ci"}),
    kind("db.drop", DbNameArgs, "Drop a database", positional=("name",), example=_DB),
    kind("db.user-list", NoArgs, "List the database accounts", read=True, example={}),
    kind("db.user-create", DbUserCreate, "Create a database account", positional=("user",),
         example={"user": "shop_app", "password": "correct-horse-battery"}),
    kind("db.user-delete", DbUserArgs, "Delete a database account", positional=("user",),
         example={"user": "shop_app"}),
    kind("db.user-password", DbUserPassword, "Set a database account's password", positional=("user",),
         example={"user": "shop_app", "password": "another-long-secret", "host": "10.0.0.5"}),
    kind("db.user-grant", DbGrant, "Grant an account privileges on a database", positional=("user", "name"),
         example={"user": "shop_app", "name": "shop", "privileges": "readwrite"}),
    kind("db.user-revoke", DbRevoke, "Revoke an account's privileges on a database", positional=("user", "name"),
         example={"user": "shop_app", "name": "shop"}),
    kind("db.import", DbImport, "Import an SQL dump (.sql or .sql.gz) from a site's files", positional=("name",),
         example={"name": "shop", **_SQL}, paths=(ScopedPath("path", site="domain"),)),
    kind("db.export", DbExport, "Export a database into a site's files", positional=("name",),
         example={"name": "shop", **_SQL}, paths=(ScopedPath("path", site="domain"),)),
]  # fmt: skip
