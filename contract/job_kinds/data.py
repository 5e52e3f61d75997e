"""Job kinds of data: db (MySQL/MariaDB), pg, mongo, backup, migrate."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from contract.job_kinds.argtypes import (
    AccessKeyId,
    Bool,
    BucketName,
    Cidr,
    CronSchedule,
    DbHost,
    DbName,
    DbUser,
    DomainName,
    Host,
    HttpsUrl,
    Id,
    Int,
    LoginName,
    Port,
    RegionName,
    RelativePath,
    SafeText,
    Secret,
    Slug,
)
from contract.job_kinds.base import Args, JobKind, NoArgs, ScopedPath, kind

# A file in a site, for imports and exports: the site's domain and a path relative to its root.
FilePath = RelativePath
_SQL = {"domain": "example.com", "path": "backups/shop.sql.gz"}

# --- db --------------------------------------------------------------------------------------------


class DbNameArgs(Args):
    name: DbName


class DbSize(Args):
    name: DbName | None = None


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
    name: DbName
    privileges: Literal["all", "read", "readwrite"] = "all"
    host: DbHost = "localhost"


class DbRevoke(Args):
    user: DbUser
    name: DbName
    host: DbHost = "localhost"


SQL_SUFFIXES = (".sql", ".sql.gz")


def _sql_file(value: str) -> str:
    if not value.endswith(SQL_SUFFIXES):
        raise ValueError("an SQL dump is a .sql file, or .sql.gz when gzip-compressed")
    return value


SqlFile = Annotated[FilePath, Field(min_length=1), AfterValidator(_sql_file)]
"""A dump in a site's files: its suffix says whether it is gzip-compressed (.sql.gz) or not (.sql)."""


class DbImport(Args):
    name: DbName
    domain: DomainName
    path: SqlFile
    drop_existing: Bool = False  # drop the database's tables first (it is recreated empty)


class DbExport(Args):
    name: DbName
    domain: DomainName
    path: SqlFile  # .sql.gz: compressed with gzip as it is written


_DB = {"name": "shop"}

DB = [
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

# --- pg --------------------------------------------------------------------------------------------

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
    name: DbName
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
    name: DbName
    privileges: Literal["all", "read", "readwrite"] = "all"


class PgExtensionAdd(Args):
    name: DbName
    extension: PgExtension


class PgDump(Args):
    name: DbName
    domain: DomainName
    path: FilePath = Field(min_length=1)
    format: Literal["plain", "custom"] = "custom"
    gzip: Bool = False  # a plain dump gzipped (a custom one is always compressed)

    @model_validator(mode="after")
    def _gzip_is_for_plain(self) -> PgDump:
        if self.gzip and self.format != "plain":
            raise ValueError("gzip applies to a plain dump: a custom dump is compressed already")
        return self


class PgRestore(Args):
    name: DbName
    domain: DomainName
    path: FilePath = Field(min_length=1)
    clean: Bool = False


class PgSize(Args):
    name: DbName | None = None  # None: every database


class PgNameArgs(Args):
    name: DbName


class PgVacuum(Args):
    name: DbName | None = None  # None: every database
    analyze: Bool = False  # update the planner's statistics too
    full: Bool = False  # rewrite the tables (reclaims space; locks each table while it runs)


class PgRevoke(Args):
    user: DbUser
    name: DbName


class PgAllow(Args):
    """A pg_hba.conf entry: TCP logins from `cidr`, with a SCRAM password."""

    cidr: Cidr
    name: DbName | None = None  # the database; None: all
    user: DbUser | None = None  # the role; None: all


_PG = {"name": "app"}
_DUMP = {"name": "app", "domain": "example.com", "path": "backups/app.dump"}
_ALLOW = {"cidr": "10.0.0.0/24", "name": "app", "user": "app_user"}

PG = [
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

# --- mongo -----------------------------------------------------------------------------------------


class MongoDb(Args):
    name: DbName


class MongoUserCreate(Args):
    name: DbName
    user: DbUser
    password: Secret
    role: Literal["read", "readWrite", "dbAdmin", "dbOwner"] = "readWrite"


class MongoUser(Args):
    name: DbName
    user: DbUser


class MongoDump(Args):
    name: DbName
    domain: DomainName
    path: FilePath = Field(min_length=1)


class MongoRestore(MongoDump):
    drop: Bool = False


_MONGO = {"name": "events"}
_MDUMP = {"name": "events", "domain": "example.com", "path": "backups/events.archive.gz"}

MONGO = [
    kind("mongo.list", NoArgs, "List the MongoDB databases", read=True, example={}),
    kind("mongo.status", NoArgs, "Show the MongoDB server status", read=True, example={}),
    kind("mongo.create", MongoDb, "Create a MongoDB database", positional=("name",), example=_MONGO),
    kind("mongo.drop", MongoDb, "Drop a MongoDB database", positional=("name",), example=_MONGO),
    kind("mongo.user-list", MongoDb, "List the users of a MongoDB database", read=True, positional=("name",),
         example=_MONGO),
    kind("mongo.user-create", MongoUserCreate, "Create a MongoDB user", positional=("name", "user"),
         example={"name": "events", "user": "events_app", "password": "correct-horse-battery"}),
    kind("mongo.user-delete", MongoUser, "Delete a MongoDB user", positional=("name", "user"),
         example={"name": "events", "user": "events_app"}),
    kind("mongo.dump", MongoDump, "Dump a database into a site's files", positional=("name",), example=_MDUMP,
         paths=(ScopedPath("path", site="domain"),)),
    kind("mongo.restore", MongoRestore, "Restore a dump from a site's files", positional=("name",),
         example={**_MDUMP, "drop": True}, paths=(ScopedPath("path", site="domain"),)),
]  # fmt: skip

# --- backup ----------------------------------------------------------------------------------------

BackupInclude = Literal["all", "files", "databases"]


class BackupList(Args):
    domain: DomainName | None = None


class BackupId(Args):
    id: Id


class BackupCreate(Args):
    domain: DomainName | None = None  # None: the whole server
    include: BackupInclude = "all"
    target: Slug = "local"
    note: SafeText | None = None


class BackupRestore(Args):
    id: Id
    include: BackupInclude = "all"
    domain: DomainName | None = None  # restore into another site than the one backed up
    overwrite: Bool = False


class BackupSchedule(Args):
    schedule: CronSchedule
    domain: DomainName | None = None
    include: BackupInclude = "all"
    target: Slug = "local"
    retention: Int = Field(default=7, ge=1, le=365)


class BackupTargetSet(Args):
    name: Slug
    endpoint: HttpsUrl
    bucket: BucketName
    region: RegionName = "auto"
    prefix: RelativePath = ""
    access_key_id: AccessKeyId
    secret_access_key: Secret


class BackupTargetName(Args):
    name: Slug


_B = {"id": "b-20240501-0300"}

BACKUP = [
    kind("backup.list", BackupList, "List the backups", read=True, example={"domain": "example.com"}),
    kind("backup.inspect", BackupId, "Show a backup (contents, size, target)", read=True, positional=("id",),
         example=_B),
    kind("backup.verify", BackupId, "Check that a backup archive is complete and readable", read=True,
         positional=("id",), example=_B),
    kind("backup.create", BackupCreate, "Back up a site or the whole server", json=True,
         example={"domain": "example.com", "include": "all", "note": "before the upgrade"}),
    kind("backup.restore", BackupRestore, "Restore a backup", positional=("id",),
         example={**_B, "include": "files", "overwrite": True}),
    kind("backup.delete", BackupId, "Delete a backup", positional=("id",), example=_B),
    kind("backup.schedule", BackupSchedule, "Schedule recurring backups", json=True,
         example={"schedule": "0 3 * * *", "domain": "example.com", "retention": 14}),
    kind("backup.schedule-list", NoArgs, "List the backup schedules", read=True, example={}),
    kind("backup.unschedule", BackupId, "Remove a backup schedule", positional=("id",), example={"id": "s-1"}),
    kind("backup.target-list", NoArgs, "List the backup targets", read=True, example={}),
    kind("backup.target-set", BackupTargetSet, "Create or change an S3-compatible backup target",
         positional=("name",),
         example={"name": "offsite", "endpoint": "https://s3.eu-central-1.amazonaws.com", "bucket": "acme-backups",
                  "region": "eu-central-1", "access_key_id": "AKIAEXAMPLE12345",
                  "secret_access_key": "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"}),
    kind("backup.target-delete", BackupTargetName, "Delete a backup target", positional=("name",),
         example={"name": "offsite"}),
]  # fmt: skip

# --- migrate ---------------------------------------------------------------------------------------


class MigrateId(Args):
    id: Id


class MigrateCheck(Args):
    host: Host
    port: Port = 22
    user: LoginName = "root"


class MigratePull(Args):
    host: Host
    port: Port = 22
    user: LoginName = "root"
    password: Secret | None = None  # None: log in with this server's migration key (migrate.key-show)
    domain: DomainName
    databases: Bool = False


class MigrateImport(Args):
    archive: RelativePath = Field(min_length=1)  # relative to the server's home (root scope)
    format: Literal["cpanel", "plesk", "directadmin", "fleetdeck"]
    domain: DomainName | None = None  # only this site of the archive


MIGRATE = [
    kind("migrate.list", NoArgs, "List the migrations", read=True, example={}),
    kind("migrate.status", MigrateId, "Show a migration's progress", read=True, positional=("id",),
         example={"id": "m-7"}),
    kind("migrate.key-show", NoArgs, "Show the public key to authorise on a source server", read=True, example={}),
    kind("migrate.check", MigrateCheck, "Check that a source server is reachable with the migration key",
         read=True, positional=("host",), example={"host": "old.example.net", "user": "deploy"}),
    kind("migrate.pull", MigratePull, "Copy a site (files, optionally databases) from another server",
         positional=("host",), json=True,
         example={"host": "203.0.113.7", "user": "root", "password": "correct-horse-battery",
                  "domain": "example.com", "databases": True}),
    kind("migrate.import", MigrateImport, "Import sites from another panel's backup archive",
         positional=("archive",), json=True,
         example={"archive": "uploads/cpmove-acme.tar.gz", "format": "cpanel"}, paths=(ScopedPath("archive"),)),
    kind("migrate.cancel", MigrateId, "Cancel a running migration", positional=("id",), example={"id": "m-7"}),
]  # fmt: skip

KINDS: list[JobKind] = [*DB, *PG, *MONGO, *BACKUP, *MIGRATE]
