"""``pg dump|restore``: a database into a file of a site, and back.

``pg_dump --verbose`` runs as the layout's OS user and writes to a temporary file the agent made
inside the site's jail (`agent.jobs.toolkit.site_files`), renamed into place once pg_dump succeeded: the
site's user owns the dump (mode 0600), and a failed dump leaves the previous file as it was. Its
progress (a line per table) streams as it goes. A plain dump is written with ``--clean
--if-exists`` (restoring it replaces the objects it holds), gzipped by pg_dump itself with
``--compress``; a custom dump is compressed by its format.

A restore reads the file the same way (a descriptor the agent opened inside the jail) and tells
the format by its first bytes. The file is the site's text, so nothing of it runs with more than
the target database's rights, nor reaches the tools as anything but their input:

* its SQL runs as a throwaway role that owns the target database alone (`agent.jobs.pg.importer`),
  so the server refuses what would reach further (``COPY ... PROGRAM``, server files, roles...);
* ``psql`` (and, for a custom archive, ``pg_restore``) run as the site's user with that account's
  groups and a small environment, never as root nor as the ``postgres`` account (whose peer
  login is the superuser's); they read the file on their stdin, never by its path;
* psql runs in its restricted mode (``\\restrict`` with a key of the agent's, sent first):
  every meta-command of the file (``\\!``, ``\\o``, ``\\i``, ``\\copy``, ``\\connect``...) is
  refused and the restore fails; the one it would take, ``\\unrestrict``, is refused by the agent
  before psql sees it (`RestoreScript`).

Plain SQL (gzipped or not) goes through the agent to psql; a custom archive is first written out
as SQL by ``pg_restore --no-owner --file -`` (``clean``: ``--clean --if-exists``), which goes the
same way. The agent sends psql ``BEGIN``, the SQL, and the ``COMMIT`` only once all of it was read
(and pg_restore ended well): a truncated file rolls back, so a restore that fails restores
nothing. A database that does not exist is created first (and dropped again if the restore fails).
"""

from __future__ import annotations

import os
import re
import secrets
import zlib
from dataclasses import dataclass, field
from typing import Any

import trio

from agent.jobs.pg.client import PSQL_EXIT_CONNECTION, SCRIPT_HEAD, Postgres, psql_message
from agent.jobs.pg.databases import database_exists, require_database
from agent.jobs.pg.importer import Importer, importer
from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.common import Account, find_site, site_account
from agent.jobs.toolkit.needs import Tool
from agent.jobs.toolkit.output import STDERR, JobError, Output
from agent.jobs.toolkit.proc import capture_command, require, stream_command
from agent.jobs.toolkit.site_files import SiteOutput, open_site_input
from contract.job_kinds.pg import PgDump, PgRestore

GZIP_LEVEL = 6
READ_CHUNK = 1024 * 1024
PROGRESS_EVERY = 64 * READ_CHUNK  # a plain restore says how far it has read every 64 MiB
CUSTOM_MAGIC = b"PGDMP"
GZIP_MAGIC = b"\x1f\x8b"
MAX_LINE = 256 * 1024 * 1024  # a longer line is not a dump's
# The first release of each major version whose psql has the restricted mode (CVE-2025-8714).
RESTRICT_SINCE = {13: 22, 14: 19, 15: 14, 16: 10, 17: 6}
ERROR_LINE = re.compile(r"\b(?:ERROR|FATAL|error):")
# psql's \unrestrict: an odd run of backslashes (an even one is escaped backslashes, as in COPY data).
UNRESTRICT = re.compile(rb"(?<!\\)(?:\\\\)*\\unrestrict")
_UNRESTRICT_LINE = re.compile(rb"\\unrestrict ([A-Za-z0-9]+)[ \t]*\r?")
_RESTRICT_LINE = re.compile(rb"\\restrict ([A-Za-z0-9]+)")
# The lines of a dump the restore looks at, each alone on its line as pg_dump and pg_restore write
# them: the start and end of COPY data, and the statements it leaves out (see `RestoreScript`).
NOTED_LINE = re.compile(
    rb"^(?:(?P<copy>COPY [^\n]* FROM stdin;)"
    rb"|(?P<copy_end>\\\.)"
    rb"|(?P<owner>ALTER [A-Z]+(?: [A-Z]+)* [^\n]* OWNER TO [^\n]+;)"
    rb"|(?P<defaults>ALTER DEFAULT PRIVILEGES [^\n]+;)"
    rb"|(?P<extension>(?:DROP EXTENSION(?: IF EXISTS)?|COMMENT ON EXTENSION)"
    rb" (?P<ext>\"(?:[^\"\n]|\"\")+\"|[A-Za-z_][A-Za-z0-9_$]*)(?: [^\n]*)?;))"
    rb"[ \t]*\r?$",
    re.M,
)


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
    psql = require("psql", "restore a PostgreSQL dump")
    await _require_restricted_mode(psql)
    account = site_account(ctx, site) if ctx.is_root else None
    fd = await trio.to_thread.run_sync(open_site_input, ctx, site, args.path)
    try:
        found = dump_format(os.pread(fd, len(CUSTOM_MAGIC), 0))
        convert = _convert_argv(args) if found == "custom" else None
        created = not await database_exists(pg, args.name)
        async with importer(pg, args.name, out, create=created) as role:
            restore = Restore(args.path, role, account, out)
            await restore.run(psql, fd, convert, gzipped=found == "gzip")
    finally:
        os.close(fd)
    out.stdout(f"restored {args.path} of {site.domain} ({found}) into database {args.name}")
    return 0


async def _require_restricted_mode(psql: str) -> None:
    """psql must have its restricted mode (``\\restrict``): it is what keeps a file's
    meta-commands from running."""
    code, text, _ = await capture_command([psql, "--version"])
    found = re.search(r"(\d+)(?:\.(\d+))?", text)
    version = (int(found[1]), int(found[2] or 0)) if code == 0 and found else (0, 0)
    if not restricts(version):
        raise JobError(
            f"{text.strip() or psql} has no restricted mode (\\restrict: PostgreSQL 13.22, 14.19, 15.14, 16.10, 17.6"
            " and later), which keeps a file's psql meta-commands from running: update postgresql-client"
        )


def restricts(version: tuple[int, int]) -> bool:
    """Whether psql `version` (major, minor) has the restricted mode (``\\restrict``)."""
    major, minor = version
    return major >= 18 or minor >= RESTRICT_SINCE.get(major, 10**6)


def _convert_argv(args: PgRestore) -> list[str]:
    """pg_restore writing a custom archive out as the SQL script it holds (no connection)."""
    pg_restore = require("pg_restore", "restore a PostgreSQL dump")
    clean = ["--clean", "--if-exists"] if args.clean else []
    return [pg_restore, "--verbose", "--no-owner", *clean, "--file", "-"]


class _Noted(Output):
    """Passes a tool's lines on, keeping the first error line it printed (for the job's last line)."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.error = ""

    def lines(self, stream: str, texts: list[str]) -> None:
        if not self.error and stream == STDERR:
            self.error = next((text for text in texts if ERROR_LINE.search(text)), "")
        self.out.lines(stream, texts)

    async def drain(self) -> None:
        await self.out.drain()


@dataclass
class Restore:
    """One restore's pipeline: the file (or, for a custom archive, the SQL pg_restore writes out
    of it) read by the agent through `RestoreScript`, into psql in restricted mode, logged in as
    the restore's role, between a ``BEGIN`` and a ``COMMIT`` sent only once all of it was read.
    pg_restore and psql run as `account` (the site's user; None: the agent's own)."""

    path: str
    role: Importer
    account: Account | None
    out: Output
    key: str = field(default_factory=lambda: secrets.token_hex(16))  # of psql's restricted mode

    def identity(self) -> dict[str, Any]:
        return {} if self.account is None else {"user": self.account.uid}

    async def run(self, psql: str, fd: int, convert: list[str] | None, *, gzipped: bool) -> None:
        """Restore `fd` (plain SQL, gunzipped when `gzipped`; a custom archive when `convert`,
        pg_restore's argv, is given).

        Raises:
            JobError: the restore failed (its transaction rolled back), saying why.
        """
        owner = None if self.account is None else (self.account.uid, self.account.gid)
        password = self.role.password_file(owner)
        try:
            psql_out = _Noted(self.out)
            script = RestoreScript(self.role.extensions)
            converted: list[int] = []  # pg_restore's exit code, once it ended
            to_psql, feed_end = os.pipe()
            async with trio.open_nursery() as nursery:
                if convert is None:
                    source: Source = FileSource(fd, gzipped, self.out)
                else:
                    read_end, write_end = os.pipe()
                    source = PipeSource(trio.lowlevel.FdStream(read_end))
                    nursery.start_soon(self._convert, convert, fd, write_end, converted)
                nursery.start_soon(
                    self._feed, source, script, trio.lowlevel.FdStream(feed_end), convert is None, converted
                )
                argv = [psql, "--no-psqlrc", "--quiet", "--output", os.devnull, *self.role.connection(), "--file", "-"]
                options = self.role.options(password, self.identity())
                try:
                    code = await stream_command(psql_out, argv, stdin=to_psql, **options)
                finally:
                    os.close(to_psql)  # a feeder still writing meets a broken pipe and stops
        finally:
            os.close(password)
        if code != 0:  # first: pg_restore also fails when psql stopped reading what it wrote
            raise self.failed(code, psql_out.error)
        if converted and converted[0] != 0:
            raise JobError(f"pg_restore could not read {self.path} (exit {converted[0]}): nothing of it was restored")
        if script.left_out:
            self.out.stderr(
                f"note: {script.left_out} ALTER DEFAULT PRIVILEGES statement(s) of the dump were left out (they name"
                " the dump's roles); pg.grant sets the default privileges of a database again"
            )

    async def _convert(self, argv: list[str], fd: int, write_end: int, converted: list[int]) -> None:
        """pg_restore writing the archive `fd` out as SQL into the pipe `write_end` (closed once it
        ended: then the feeder meets the end of its output); its exit code into `converted`."""
        try:
            code = await stream_command(self.out, argv, stdin=fd, stdout=write_end, cwd="/", **self.identity())
            converted.append(code)
        finally:
            os.close(write_end)

    async def _feed(
        self, source: Source, script: RestoreScript, pipe: trio.lowlevel.FdStream, plain: bool, converted: list[int]
    ) -> None:
        """``BEGIN``, the script, then ``COMMIT`` only once all of it was read (and pg_restore, if
        it wrote it, ended well): a file that ends early ends psql's input without COMMIT, so its
        transaction rolls back."""
        head = f"{SCRIPT_HEAD}\\restrict {self.key}\nBEGIN;\n".encode()
        async with source, pipe:
            try:
                await pipe.send_all(head)
                while chunk := await source.read():
                    await pipe.send_all(script.feed(chunk))
                await pipe.send_all(script.close())
                if plain or converted == [0]:
                    await pipe.send_all(b"\nCOMMIT;\n")
            except trio.BrokenResourceError:
                return  # psql stopped reading (an error it reports itself): its exit code tells
            except ScriptRefused as exc:
                raise JobError(f"{self.path} {exc}: nothing of it was restored") from None

    def failed(self, code: int, error: str) -> JobError:
        said = psql_message(error)
        if code == PSQL_EXIT_CONNECTION and "connection to server" in said:
            return self.role.login_failed(said)
        if "backslash commands are restricted" in said:
            return JobError(
                f"{self.path} holds a psql meta-command (a backslash command: \\! \\o \\i \\copy \\connect ...),"
                f" which a restore does not run ({said}): nothing of it was restored"
            )
        return JobError(
            f"the restore of {self.path} failed (exit {code}): {said or 'psql failed'}: nothing of it was restored"
        )


class Source:
    """Where the SQL of a restore comes from, a chunk at a time (b"" at its end)."""

    async def read(self) -> bytes:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None

    async def __aenter__(self) -> Source:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class FileSource(Source):
    """A plain SQL file (`fd`, gunzipped when `gzipped`), a progress line every `PROGRESS_EVERY`."""

    def __init__(self, fd: int, gzipped: bool, out: Output) -> None:
        self.fd = fd
        self.inflate = zlib.decompressobj(wbits=31) if gzipped else None
        self.out = out
        self.total = os.fstat(fd).st_size
        self.done = self.reported = 0
        self.ended = False

    async def read(self) -> bytes:
        while not self.ended:
            chunk = await trio.to_thread.run_sync(os.read, self.fd, READ_CHUNK)
            self.done += len(chunk)
            if self.done - self.reported >= PROGRESS_EVERY:
                self.reported = self.done
                self.out.stdout(f"read {self.done // 2**20} MiB of {self.total // 2**20} MiB")
            if not chunk:
                self.ended = True
            data = self.inflated(chunk)
            if data:
                return data
        return b""

    def inflated(self, chunk: bytes) -> bytes:
        if self.inflate is None:
            return chunk
        try:
            if chunk:
                return self.inflate.decompress(chunk)
            data = self.inflate.flush()
        except zlib.error as exc:
            raise JobError(f"the gzip file is damaged ({exc}): nothing was restored") from None
        if not self.inflate.eof or self.inflate.unused_data:
            raise JobError("the gzip file is truncated or holds more than one stream: nothing was restored")
        return data


class PipeSource(Source):
    """What pg_restore writes out of a custom archive."""

    def __init__(self, stream: trio.lowlevel.FdStream) -> None:
        self.stream = stream

    async def read(self) -> bytes:
        return await self.stream.receive_some(READ_CHUNK)

    async def aclose(self) -> None:
        await self.stream.aclose()


class ScriptRefused(Exception):
    """A restore's SQL holds what psql must never be given; the message says what."""


class RestoreScript:
    """The SQL of a restore on its way to psql, in whole lines (blocking work: pure Python).

    Security, whatever the lines are: psql runs in restricted mode, in which the only
    meta-command it takes is ``\\unrestrict`` (and psql 15.18 expands its argument's backquotes,
    running a shell command: CVE-2026-18408). So ``\\unrestrict`` is refused wherever it is, but
    for the pair pg_dump and pg_restore write themselves, which are left out: a ``\\restrict KEY``
    line at the head of the file (the restore has its own key) and its ``\\unrestrict KEY``.

    Ownership (the role owns what it makes, `agent.jobs.pg.importer`), on pg_dump's one-line
    statements outside COPY data: ``ALTER ... OWNER TO`` is left out (as ``pg_restore
    --no-owner`` does), as are ``ALTER DEFAULT PRIVILEGES`` (they name the dump's roles;
    counted in `left_out`), and ``DROP EXTENSION`` and ``COMMENT ON EXTENSION`` for an extension
    the database had before (`extensions`: the superuser's, it stays as it is)."""

    def __init__(self, extensions: frozenset[str]) -> None:
        self.extensions = extensions
        self.pending = b""
        self.head = True  # before the first statement: where a dump's \restrict line is
        self.key: bytes | None = None
        self.in_copy = False
        self.left_out = 0

    def feed(self, data: bytes) -> bytes:
        """The complete lines of what came so far, as psql gets them."""
        data = self.pending + data
        cut = data.rfind(b"\n") + 1
        self.pending = data[cut:]
        if len(self.pending) > MAX_LINE:
            raise ScriptRefused(f"has a line longer than {MAX_LINE // 2**20} MiB: it is not SQL from a dump")
        return self._lines(data[:cut])

    def close(self) -> bytes:
        """The last line, when the file does not end with a new line."""
        rest, self.pending = self.pending, b""
        return self._lines(rest + b"\n") if rest else b""

    def _lines(self, block: bytes) -> bytes:
        if not block:
            return b""
        if self.head:
            block = self._head(block)
        blanks: list[tuple[int, int]] = []
        for found in UNRESTRICT.finditer(block):
            start, end = _line_at(block, found.start())
            own = _UNRESTRICT_LINE.fullmatch(block, start, end) if start == found.start() else None
            if own is None or own[1] != self.key:
                said = block[start:end].decode("utf-8", "replace")[:80]
                raise ScriptRefused(f"holds a psql \\unrestrict meta-command ({said!r})")
            blanks.append((start, end))
        for found in NOTED_LINE.finditer(block):
            kind = found.lastgroup
            if self.in_copy:
                self.in_copy = kind != "copy_end"
            elif kind == "copy":
                self.in_copy = True
            elif kind in ("owner", "defaults") or (kind == "extension" and _unquote(found["ext"]) in self.extensions):
                self.left_out += kind == "defaults"
                blanks.append(found.span())
        return _blanked(block, blanks)

    def _head(self, block: bytes) -> bytes:
        """The head of the file: blank lines and comments, then maybe the dump's ``\\restrict``."""
        position = 0
        while position < len(block):
            end = block.index(b"\n", position)
            line = block[position:end].rstrip(b"\r \t")
            if line and not line.startswith(b"--"):
                restrict = _RESTRICT_LINE.fullmatch(line)
                self.head = False
                if restrict is None:
                    return block
                self.key = restrict[1]
                return block[:position] + block[end:]
            position = end + 1
        return block


def _line_at(block: bytes, position: int) -> tuple[int, int]:
    """The span of the line of `block` holding `position` (without its new line)."""
    return block.rfind(b"\n", 0, position) + 1, block.index(b"\n", position)


def _blanked(block: bytes, spans: list[tuple[int, int]]) -> bytes:
    """`block` with the lines of `spans` emptied (their new lines kept: psql's line numbers stay right)."""
    if not spans:
        return block
    parts, position = [], 0
    for start, end in sorted(spans):
        parts.append(block[position:start])
        position = end
    parts.append(block[position:])
    return b"".join(parts)


def _unquote(name: bytes) -> str:
    text = name.decode("utf-8", "replace")
    return text[1:-1].replace('""', '"') if text.startswith('"') else text


KINDS = [
    handler("pg.dump", _dump, needs=(Tool("pg_dump"),)),
    handler("pg.restore", _restore, needs=(Tool("pg_restore"),)),
]
