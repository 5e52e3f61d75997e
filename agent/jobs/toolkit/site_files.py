"""Files a job writes into a site's folder or reads from it: the dumps of ``db.export`` and
``pg.dump``, the files ``db.import``, ``pg.restore``, ``ssl.install`` and ``cron.history`` read
(the one way jobs do it).

The path is relative to the site's folder and resolves inside its jail (`agent.files.jail`), as
the file workspace resolves it: ``..``, an absolute path or a symlink leading out is refused. A
file is never written in place: the bytes go to a temporary file beside the destination (created
exclusively, mode 0600, owned by the site's user), which `SiteOutput.commit` renames over it; a
job that fails or is cancelled leaves no half file behind.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from agent.files.fdops import chown_fd, create_temp, fsync_dir, release, unlink_quietly
from agent.files.jail import Jail, split_path, storage_refusal
from agent.files.read import open_regular
from agent.files.write import ensure_dirs, file_target
from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.boundary import scope_jail
from agent.jobs.toolkit.common import site_account
from agent.jobs.toolkit.output import JobError
from agent.sites import Site
from contract.link.protocol import RpcError

OUTPUT_MODE = 0o600  # a dump holds the data: the site's user alone reads it


def _site_jail(ctx: JobContext, site: Site) -> tuple[Jail, tuple[int, int] | None]:
    """The site's jail, with what it creates owned by the site's user (as root)."""
    owner = None
    if ctx.is_root:
        account = site_account(ctx, site)
        owner = (account.uid, account.gid)
    jail = scope_jail(ctx.home, site.slug)
    jail.owner = owner
    return jail, owner


@contextmanager
def _refusals(site: Site, path: str) -> Iterator[None]:
    """The jail's refusals (not found, outside the scope, ...) as a job's one line, naming the path."""
    try:
        yield
    except RpcError as exc:
        raise JobError(f"{path} in site {site.domain}: {exc.message}") from None
    except IsADirectoryError:
        raise JobError(f"{path} in site {site.domain}: is a folder") from None
    except NotADirectoryError:
        raise JobError(f"{path} in site {site.domain}: a folder on the way is a file") from None


class SiteOutput:
    """A file being written at `path` inside a site (blocking: open it in a worker thread).

    `fd` is the temporary file's descriptor (hand it to a tool as its stdout); `commit` puts the
    file in place and returns its size; `close` releases everything, removing the temporary file
    unless it was committed. Missing folders on the way are made, owned by the site's user."""

    def __init__(self, ctx: JobContext, site: Site, path: str) -> None:
        parts = split_path(path)
        if not parts:
            raise JobError("the path names the site's folder itself, not a file in it")
        self.path = "/".join(parts)
        self.fd = -1
        self.temp = ""
        self.done = False
        with _refusals(site, path):
            jail, owner = _site_jail(ctx, site)
            with jail:
                os.close(ensure_dirs(jail, parts[:-1]))
                self.target = file_target(jail, path, may_exist=True)
        try:
            self.fd, self.temp = create_temp(self.target.dir_fd, self.target.name, OUTPUT_MODE)
            chown_fd(self.fd, owner)
        except BaseException:
            self.close()
            raise

    def write(self, data: bytes | bytearray) -> None:
        """Append `data` (for bytes the agent produces itself, such as a gzip stream)."""
        view = memoryview(data)
        with self._naming_a_full_disk():
            while view:
                view = view[os.write(self.fd, view) :]

    def commit(self) -> int:
        """Flush the file and rename it over the destination; its size in bytes."""
        with self._naming_a_full_disk():
            os.fsync(self.fd)
        size = os.fstat(self.fd).st_size
        os.rename(self.temp, self.target.name, src_dir_fd=self.target.dir_fd, dst_dir_fd=self.target.dir_fd)
        self.done = True
        fsync_dir(self.target.dir_fd)
        return size

    @contextmanager
    def _naming_a_full_disk(self) -> Iterator[None]:
        """A full disk or quota as ``insufficient_storage`` naming this file (the job's one line)."""
        try:
            yield
        except OSError as exc:
            full = storage_refusal(exc, self.path)
            if full is None:
                raise
            raise full from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if not self.done and self.temp and self.target.dir_fd >= 0:
            unlink_quietly(self.target.dir_fd, self.temp)
        if self.temp:
            release(self.temp)
        self.target.close()


def open_site_input(ctx: JobContext, site: Site, path: str) -> int:
    """A readable descriptor of the regular file `path` inside a site (blocking; the caller
    closes it). A FIFO (opened O_NONBLOCK, it never waits for a writer) or a hard link to another
    user's file is refused, as the workspace refuses it."""
    with _refusals(site, path):
        return _open_input(ctx, site, path)


def open_site_input_if_there(ctx: JobContext, site: Site, path: str) -> int | None:
    """`open_site_input`, or None when nothing is at `path`."""
    with _refusals(site, path):
        try:
            return _open_input(ctx, site, path)
        except RpcError as exc:
            if exc.code == "not_found":
                return None
            raise


def _open_input(ctx: JobContext, site: Site, path: str) -> int:
    jail, _ = _site_jail(ctx, site)
    with jail:
        fd, _st = open_regular(jail, path)
    return fd
