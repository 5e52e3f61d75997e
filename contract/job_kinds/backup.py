"""Job kinds of `backup`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import (
    AccessKeyId,
    Bool,
    BucketName,
    CronSchedule,
    HttpsUrl,
    Id,
    Int,
    RegionName,
    RelativePath,
    SafeText,
    Secret,
    SiteDomain,
    Slug,
)
from contract.job_kinds.base import Args, DomainPolicy, JobKind, NoArgs, kind

BackupInclude = Literal["all", "files", "databases"]


class BackupList(Args):
    domain: SiteDomain | None = None


class BackupId(Args):
    id: Id


class BackupCreate(Args):
    domain: SiteDomain | None = None  # None: the whole server
    include: BackupInclude = "all"
    target: Slug = "local"
    note: SafeText | None = None


class BackupRestore(Args):
    id: Id
    include: BackupInclude = "all"
    domain: SiteDomain | None = None  # restore into another site than the one backed up
    overwrite: Bool = False


class BackupSchedule(Args):
    schedule: CronSchedule
    domain: SiteDomain | None = None
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

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = DomainPolicy("sysadmin", "free", route="/v1/servers/{server_id}/backups")

KINDS: list[JobKind] = [
    kind("backup.list", BackupList, "List the backups", read=True, example={"domain": "example.com"}),
    kind("backup.inspect", BackupId, "Show a backup (contents, size, target)", read=True, positional=("id",),
         example=_B),
    kind("backup.verify", BackupId, "Check that a backup archive is complete and readable", read=True,
         positional=("id",), example=_B),
    kind("backup.create", BackupCreate, "Back up a site or the whole server", json=True,
         example={"domain": "example.com", "include": "all", "note": "before the upgrade"}),
    kind("backup.restore", BackupRestore, "Restore a backup", positional=("id",),
         example={**_B, "include": "files", "overwrite": True}),
    kind("backup.delete", BackupId, "Delete a backup", positional=("id",), example=_B, confirm="id"),
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
