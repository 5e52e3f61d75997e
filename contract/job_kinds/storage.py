"""Job kinds of `storage`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import Bool, Int, RelativePath, SiteDomain
from contract.job_kinds.base import Args, JobKind, NoArgs, ScopedPath, kind


class StorageUsage(Args):
    domain: SiteDomain | None = None  # the path is in this site; None: in the home (owners only)
    path: RelativePath = ""
    depth: Int = Field(default=1, ge=1, le=5)


class StorageLargest(Args):
    domain: SiteDomain | None = None  # as in StorageUsage
    path: RelativePath = ""
    limit: Int = Field(default=50, ge=1, le=1000)


class StorageCleanup(Args):
    targets: list[Literal["tmp", "logs", "cache", "trash", "packages", "docker"]] = Field(min_length=1, max_length=6)
    older_than_days: Int = Field(default=7, ge=0, le=3650)
    dry_run: Bool = False


KINDS: list[JobKind] = [
    kind("storage.usage", StorageUsage, "Show disk usage under a folder of a site or of the home", read=True,
         example={"path": "example-com/uploads", "depth": 2}, paths=(ScopedPath("path", site="domain"),)),
    kind("storage.disks", NoArgs, "Show the file systems and their free space", read=True, example={}),
    kind("storage.inodes", NoArgs, "Show inode usage of the file systems", read=True, example={}),
    kind("storage.largest", StorageLargest, "List the largest files under a folder of a site or of the home", read=True,
         example={"path": "example-com", "limit": 20}, paths=(ScopedPath("path", site="domain"),)),
    kind("storage.cleanup", StorageCleanup, "Delete temporary files, old logs, caches and unused packages", json=True,
         example={"targets": ["tmp", "logs"], "older_than_days": 14, "dry_run": True}),
]  # fmt: skip
