"""Job kinds of `storage`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import Bool, Int, RelativePath, SiteDomain
from contract.job_kinds.base import SYSADMIN, Args, DiskSpace, JobKind, NoArgs, Result, ScopedPath, kind


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


class UsageEntry(Result):
    path: str = Field(description="the entry, relative to the scope (the site or the home)")
    type: Literal["file", "dir", "symlink", "other"] = Field(description="what the entry is")
    depth: int = Field(description="its level below the path asked about (1: directly in it)")
    bytes: int = Field(description="apparent size, bytes (a folder: all it holds)")
    disk_bytes: int = Field(description="allocated blocks, bytes (a hard-linked file counted once)")
    files: int = Field(description="the files it is or holds")
    dirs: int = Field(description="the folders it is or holds")


class StorageUsageResult(Result):
    path: str = Field(description="the folder measured, relative to the scope ('': the scope itself)")
    depth: int = Field(description="how many levels of entries are listed")
    bytes: int = Field(description="apparent size of everything beneath, bytes")
    disk_bytes: int = Field(description="allocated blocks of everything beneath, bytes")
    files: int = Field(description="the files beneath")
    dirs: int = Field(description="the folders beneath (the folder itself included)")
    errors: int = Field(description="entries that could not be read (counted as far as they could be)")
    entries: list[UsageEntry] = Field(description="the entries down to `depth`, biggest first")
    truncated: bool = Field(description="more entries than listed (the list stops at 5000)")
    domain: str | None = Field(default=None, description="the site (None: the home)")


class LargeFile(Result):
    path: str = Field(description="the file, relative to the scope")
    bytes: int = Field(description="apparent size, bytes")
    disk_bytes: int = Field(description="allocated blocks, bytes (the order of the list)")
    modified: str = Field(description="when it last changed (RFC 3339, UTC)")


class StorageLargestResult(Result):
    path: str = Field(description="the folder searched, relative to the scope")
    scanned: int = Field(description="how many regular files were looked at")
    errors: int = Field(description="entries that could not be read")
    files: list[LargeFile] = Field(description="the biggest files, biggest first, at most `limit`")
    domain: str | None = Field(default=None, description="the site (None: the home)")


class FileSystem(DiskSpace):
    source: str = Field(description="the device or source mounted (/dev/sda1...)")
    fstype: str = Field(description="the file system's type (ext4, xfs...)")


class FileSystemList(Result):
    filesystems: list[FileSystem] = Field(description="the real file systems (no proc, tmpfs, cgroup...)")


class InodeUse(Result):
    source: str = Field(description="the device or source mounted")
    path: str = Field(description="where it is mounted")
    fstype: str = Field(description="the file system's type")
    inodes_total: int = Field(description="its inodes")
    inodes_used: int = Field(description="inodes in use")
    inodes_free: int = Field(description="inodes free")
    used_percent: float = Field(description="inodes in use, percent (0 where the file system has no fixed count)")


class InodeList(Result):
    filesystems: list[InodeUse] = Field(description="the real file systems")


class CleanedFile(Result):
    path: str = Field(description="the file, on the server")
    bytes: int = Field(description="its size, bytes")


class CacheCleanup(Result):
    folder: str = Field(description="apt's package cache")
    files: list[CleanedFile] = Field(description="the downloaded packages removed (or that would be)")
    bytes: int = Field(description="what they took, bytes")


class LogsCleanup(Result):
    files: list[CleanedFile] = Field(description="the rotated logs removed (or that would be)")
    bytes: int = Field(description="what they took, bytes")
    errors: int = Field(description="files that could not be removed")


class CleanupTargets(Result):
    cache: CacheCleanup | None = Field(default=None, description="the package cache (None: not asked for)")
    logs: LogsCleanup | None = Field(default=None, description="the rotated logs (None: not asked for)")


class StorageCleanupResult(Result):
    dry_run: bool = Field(description="nothing was removed: what would be is listed")
    targets: CleanupTargets = Field(description="what each target freed")
    bytes: int = Field(description="freed in all, bytes (or that would be)")


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = SYSADMIN

KINDS: list[JobKind] = [
    kind("storage.usage", StorageUsage, "Show disk usage under a folder of a site or of the home", read=True,
         example={"path": "example-com/uploads", "depth": 2}, paths=(ScopedPath("path", site="domain"),),
         result=StorageUsageResult),
    kind("storage.disks", NoArgs, "Show the file systems and their free space", read=True, example={},
         result=FileSystemList),
    kind("storage.inodes", NoArgs, "Show inode usage of the file systems", read=True, example={}, result=InodeList),
    kind("storage.largest", StorageLargest, "List the largest files under a folder of a site or of the home", read=True,
         example={"path": "example-com", "limit": 20}, paths=(ScopedPath("path", site="domain"),),
         result=StorageLargestResult),
    kind("storage.cleanup", StorageCleanup, "Delete temporary files, old logs, caches and unused packages", json=True,
         example={"targets": ["tmp", "logs"], "older_than_days": 14, "dry_run": True}, result=StorageCleanupResult),
]  # fmt: skip
