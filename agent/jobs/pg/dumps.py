"""``pg dump|restore``: a database into a file of a site, and back.

``pg_dump --verbose`` runs as the layout's OS user and writes to a temporary file the agent made
inside the site's jail (`agent.jobs.site_files`), renamed into place once pg_dump succeeded: the
site's user owns the dump (mode 0600), and a failed dump leaves the previous file as it was. Its
progress (a line per table) streams as it goes. A plain dump is written with ``--clean
--if-exists`` (restoring it replaces the objects it holds), gzipped by pg_dump itself with
``--compress``; a custom dump is compressed by its format.

A restore reads the file the same way (a descriptor the agent opened inside the jail) and tells the
format by its first bytes: a custom archive goes to ``pg_restore --single-transaction``; plain SQL,
gzipped or not, is fed to ``psql`` between ``BEGIN`` and ``COMMIT`` by the agent, which sends the
COMMIT only once the whole file was read (a truncated gzip rolls back). Either way a restore that
fails restores nothing. A database that does not exist is created first (and dropped again if the
restore fails).
"""

from __future__ import annotations

import os
import zlib

import trio

from agent.jobs.base import JobContext, JobError, Output, handler
from agent.jobs.common import find_site
from agent.jobs.pg.client import SCRIPT_HEAD, Postgres
from agent.jobs.pg.databases import database_exists, require_database
from agent.jobs.proc import require, stream_command
from agent.jobs.site_files import SiteOutput, open_site_input
from api_client.job_kinds.data import PgDump, PgRestore

GZIP_LEVEL = 6
READ_CHUNK = 1024 * 1024
PROGRESS_EVERY = 64 * READ_CHUNK  # a plain restore says how far it has read every 64 MiB
CUSTOM_MAGIC = b"PGDMP"
GZIP_MAGIC = b"\x1f\x8b"


async def _dump(args: PgDump, ctx: JobContext, out: Output) -> int:
    pg = Postgres.of(ctx)
    pg_dump = require("pg_dump", "dump PostgreSQL databases")
    site = await find_site(ctx, args.domain)
    await require_database(pg, args.name)
    argv = [pg_dump, "--verbose", f"--format={args.format}"]
    if args.format == "plain":
        argv += ["--clean", "--if-exists", *([f"--compress={GZIP_LEVEL}"] if args.gzip else [])]
    argv += pg.connection(args.name)
    output = await trio.to_thread.run_sync(SiteOutput, ctx, site, args.path)
    try:
        code = await stream_command(out, argv, stdout=output.fd, **pg.options())
        if code != 0:
            raise JobError(f"pg_dump failed (exit {code}): {args.path} was left as it was")
        size = await trio.to_thread.run_sync(output.commit)
    finally:
        output.close()
    out.stdout(f"dumped database {args.name} into {args.path} of {site.domain} ({size} bytes)")
    return 0


def dump_format(head: bytes) -> str:
    """``custom``, ``gzip`` (plain SQL, gzipped) or ``plain``, from a file's first bytes."""
    if head.startswith(CUSTOM_MAGIC):
        return "custom"
    return "gzip" if head.startswith(GZIP_MAGIC) else "plain"


async def _restore(args: PgRestore, ctx: JobContext, out: Output) -> int:
    pg = Postgres.of(ctx)
    site = await find_site(ctx, args.domain)
    fd = await trio.to_thread.run_sync(open_site_input, ctx, site, args.path)
    try:
        found = dump_format(os.pread(fd, len(CUSTOM_MAGIC), 0))
        argv = _restore_argv(pg, args, found)
        created = not await database_exists(pg, args.name)
        if created:
            await pg.run('CREATE DATABASE :"name" TEMPLATE template0;\n', variables={"name": args.name})
            out.stdout(f"database {args.name} created")
        try:
            if found == "custom":
                code = await stream_command(out, argv, stdin=fd, **pg.options())
            else:
                code = await _feed_psql(out, argv, fd, pg, gzipped=found == "gzip")
        except BaseException:
            if created:
                with trio.CancelScope(shield=True):
                    await _drop_quietly(pg, args.name)
            raise
        if code != 0:
            if created:
                await _drop_quietly(pg, args.name)
            raise JobError(f"the restore of {args.path} failed (exit {code}): nothing of it was restored")
    finally:
        os.close(fd)
    out.stdout(f"restored {args.path} of {site.domain} ({found}) into database {args.name}")
    return 0


def _restore_argv(pg: Postgres, args: PgRestore, found: str) -> list[str]:
    if found == "custom":
        pg_restore = require("pg_restore", "restore a PostgreSQL dump")
        clean = ["--clean", "--if-exists"] if args.clean else []
        return [pg_restore, "--verbose", "--single-transaction", "--exit-on-error", *clean, *pg.connection(args.name)]
    psql = require("psql", "restore a PostgreSQL dump")
    # Query results (a dump SELECTs set_config) go nowhere; errors still reach stderr.
    return [psql, "--no-psqlrc", "--quiet", "--output", os.devnull, *pg.connection(args.name), "--file", "-"]


async def _drop_quietly(pg: Postgres, name: str) -> None:
    try:
        await pg.run('DROP DATABASE IF EXISTS :"name";\n', variables={"name": name})
    except JobError:
        pass


async def _feed_psql(out: Output, argv: list[str], fd: int, pg: Postgres, *, gzipped: bool) -> int:
    """psql reading the SQL of `fd` (gunzipped here) from a pipe; its exit code."""
    read_end, write_end = os.pipe()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_feed, out, fd, trio.lowlevel.FdStream(write_end), gzipped)
        try:
            code = await stream_command(out, argv, stdin=read_end, **pg.options())
        finally:
            os.close(read_end)  # a feeder still writing meets a broken pipe and stops
    return code


async def _feed(out: Output, fd: int, pipe: trio.lowlevel.FdStream, gzipped: bool) -> None:
    """``BEGIN``, the file's SQL, then ``COMMIT`` only once all of it was read: a file that ends
    early (a truncated gzip) ends psql's input without COMMIT, so its transaction rolls back."""
    total = os.fstat(fd).st_size
    inflate = zlib.decompressobj(wbits=31) if gzipped else None
    done = reported = 0
    async with pipe:
        try:
            await pipe.send_all((SCRIPT_HEAD + "BEGIN;\n").encode())
            while chunk := await trio.to_thread.run_sync(os.read, fd, READ_CHUNK):
                done += len(chunk)
                await pipe.send_all(inflate.decompress(chunk) if inflate is not None else chunk)
                if done - reported >= PROGRESS_EVERY:
                    reported = done
                    out.stdout(f"read {done // 2**20} MiB of {total // 2**20} MiB")
            if inflate is not None:
                await pipe.send_all(inflate.flush())
                if not inflate.eof or inflate.unused_data:
                    raise JobError("the gzip file is truncated or holds more than one stream: nothing was restored")
            await pipe.send_all(b"\nCOMMIT;\n")
        except zlib.error as exc:
            raise JobError(f"the gzip file is damaged ({exc}): nothing was restored") from None
        except trio.BrokenResourceError:
            return  # psql stopped reading (an error it reports itself): its exit code tells


KINDS = [
    handler("pg.dump", _dump),
    handler("pg.restore", _restore),
]
