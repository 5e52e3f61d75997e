"""Job kinds of `db`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from contract.job_kinds.argtypes import Bool, DbHost, DbName, DbUser, Secret, SiteDomain, listed_by
from contract.job_kinds.base import INFRA, Args, FilePath, JobKind, NoArgs, Result, ScopedPath, kind

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


# --- results -------------------------------------------------------------------------------------


class DbDatabase(Result):
    name: str = Field(description="the database's name")
    charset: str = Field(description="its default character set")
    collation: str = Field(description="its default collation")


class DbStatus(Result):
    running: bool = Field(description="the server answered")
    version: str | None = Field(default=None, description="the server's version (null: not running)")
    socket: str = Field(description="the socket the agent connects to")
    threads_connected: int | None = Field(default=None, description="connections open now")
    threads_running: int | None = Field(default=None, description="connections running a statement now")
    questions: int | None = Field(default=None, description="statements the clients sent since the start")
    slow_queries: int | None = Field(default=None, description="statements slower than long_query_time")
    connections: int | None = Field(default=None, description="connection attempts since the start")
    uptime_s: int | None = Field(default=None, description="seconds since the server started")
    error: str | None = Field(default=None, description="why it did not answer (null: running)")


class DbSizeRow(Result):
    name: str = Field(description="the database's name")
    tables: int = Field(description="its tables and views")
    data_bytes: int = Field(description="the size of its data, in bytes")
    index_bytes: int = Field(description="the size of its indexes, in bytes")
    bytes: int = Field(description="data and indexes, in bytes")


class DbTable(Result):
    name: str = Field(description="the table's name")
    type: str = Field(description="BASE TABLE, VIEW, SYSTEM VERSIONED...")
    engine: str | None = Field(description="its storage engine (null: a view)")
    rows: int | None = Field(description="its rows, the engine's estimate (null: a view)")
    bytes: int = Field(description="data and indexes, in bytes")
    collation: str | None = Field(description="its collation (null: a view)")


class DbCreated(Result):
    name: str = Field(description="the database's name")
    created: bool = Field(description="the database was created (false: it existed, unchanged)")
    charset: str = Field(description="its default character set")


class DbDropped(Result):
    name: str = Field(description="the database's name")
    dropped: bool = Field(description="the database was dropped (false: there was none)")


class DbAccount(Result):
    user: str = Field(description="the account's user name")
    host: str = Field(description="the host it may connect from (localhost, an address, %)")
    databases: list[str] = Field(description="the databases it holds privileges on")


class DbAccountCreated(Result):
    user: str = Field(description="the account's user name")
    host: str = Field(description="the host it may connect from")
    created: bool = Field(description="the account was created (false: it existed, its password unchanged)")


class DbAccountDeleted(Result):
    user: str = Field(description="the account's user name")
    host: str = Field(description="the host it may connect from")
    deleted: bool = Field(description="the account was deleted (false: there was none)")


_DB = {"name": "shop"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("db.list", NoArgs, "List the MySQL/MariaDB databases", read=True, example={}, result=list[DbDatabase]),
    kind("db.status", NoArgs, "Show the database server status", read=True, example={}, result=DbStatus),
    kind("db.size", DbSize, "Show database sizes", read=True, example=_DB, result=list[DbSizeRow]),
    kind("db.table-list", DbNameArgs, "List the tables of a database", read=True, positional=("name",), example=_DB,
         result=list[DbTable]),
    kind("db.create", DbCreate, "Create a database", positional=("name",),
         example={"name": "shop", "collation": "utf8mb4_unicode_ci"}, result=DbCreated),
    kind("db.drop", DbNameArgs, "Drop a database", positional=("name",), example=_DB, result=DbDropped, confirm="name"),
    kind("db.user-list", NoArgs, "List the database accounts", read=True, example={}, result=list[DbAccount]),
    kind("db.user-create", DbUserCreate, "Create a database account", positional=("user",),
         example={"user": "shop_app", "password": "correct-horse-battery"}, result=DbAccountCreated),
    kind("db.user-delete", DbUserArgs, "Delete a database account", positional=("user",),
         example={"user": "shop_app"}, result=DbAccountDeleted, confirm="user"),
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
