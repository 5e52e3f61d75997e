"""Job kinds of `migrate`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import Bool, DomainName, Host, Id, LoginName, Port, RelativePath, Secret
from contract.job_kinds.base import SYSADMIN, Args, JobKind, NoArgs, ScopedPath, kind


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


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = SYSADMIN

KINDS: list[JobKind] = [
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
