"""Talking to PostgreSQL: ``psql`` (and its sibling tools) as the layout's OS user, over the
layout's socket folder or address, as its superuser (peer authentication on Debian).

SQL always goes on stdin, never in the argv. The session's ``search_path`` is empty
(``PGOPTIONS``): the superuser's statements in a database whose owner is a site's (or a restored
dump's) resolve every name in ``pg_catalog``, never in a function planted in ``public`` nor in
a ``search_path`` set with ``ALTER DATABASE ... SET``. Names reach it as psql variables (``-v name=app``,
used as ``:"name"`` for an identifier and ``:'name'`` for a literal: psql quotes them); a secret
is set on stdin (``\\set pw '...'``), so it is in no argv. A password is sent as its SCRAM-SHA-256
verifier, computed here as libpq's ``PQencryptPasswordConn`` does, so the plain text reaches
neither the server's statement log nor ``pg_stat_activity``. Errors are printed tersely (no
``LINE 1: ...`` echo of the statement) and any secret value is masked in what is reported.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import stringprep
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.host import PostgresLayout
from agent.jobs.toolkit.output import JobError
from agent.jobs.toolkit.proc import capture_command, require, tool_env

PSQL_EXIT_CONNECTION = 2  # psql: the connection failed (or went bad)
SCRIPT_HEAD = "\\set ON_ERROR_STOP on\n\\set VERBOSITY terse\n"
SCRAM_ITERATIONS = 4096  # libpq's default
CONNECT_TIMEOUT_S = "10"
# Startup options of every session: no schema of the database's owner is searched (pg_catalog
# always is), whatever the database's own settings say.
SESSION_OPTIONS = "-c search_path="


class PgUnreachable(JobError):
    """The server did not take the connection (down, refused, authentication, no such database)."""


@dataclass(frozen=True)
class Postgres:
    """The server of the host layout, and how the agent reaches it."""

    layout: PostgresLayout
    as_root: bool

    @classmethod
    def of(cls, ctx: JobContext) -> Postgres:
        return cls(ctx.host.postgres, ctx.is_root)

    @property
    def where(self) -> str:
        return f"{self.layout.host}:{self.layout.port}"

    def connection(self, database: str | None = "postgres") -> list[str]:
        """The connection options of psql, pg_dump, pg_restore and vacuumdb (None: no database)."""
        layout = self.layout
        argv = ["--host", layout.host, "--port", str(layout.port), "--username", layout.superuser]
        return argv if database is None else [*argv, "--dbname", database]

    def options(self) -> dict[str, Any]:
        """How the tools run: as the layout's OS user when the agent is root (peer authentication)."""
        env = tool_env(PGCONNECT_TIMEOUT=CONNECT_TIMEOUT_S, PGAPPNAME="fleetdeck-agent", PGOPTIONS=SESSION_OPTIONS)
        options: dict[str, Any] = {"env": env, "cwd": "/"}
        if self.as_root:
            options["user"] = self.layout.os_user
        return options

    async def run(
        self,
        sql: str,
        *,
        database: str = "postgres",
        variables: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
        mask: Sequence[str] = (),
    ) -> str:
        """Run `sql` (one or more statements) with psql; its unaligned, tuples-only output.

        `secrets` are psql variables set on stdin; they and the texts of `mask` never appear in
        an error it reports."""
        psql = require("psql", "talk to PostgreSQL")
        argv = [psql, "--no-psqlrc", "--quiet", "--no-align", "--tuples-only"]
        for name, value in (variables or {}).items():
            argv += ["--set", f"{name}={value}"]
        argv += [*self.connection(database), "--file", "-"]
        script = SCRIPT_HEAD
        script += "".join(f"\\set {name} {psql_quote(value)}\n" for name, value in (secrets or {}).items())
        code, text, err = await capture_command(argv, stdin=(script + sql).encode(), **self.options())
        if code != 0:
            raise self.error(code, err or text, [*(secrets or {}).values(), *mask])
        return text

    async def rows(
        self, query: str, *, database: str = "postgres", variables: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """The rows of one SELECT, as JSON objects (the server builds the JSON)."""
        text = await self.run(
            f"SELECT coalesce(json_agg(q), '[]') FROM ({query}) q;\n", database=database, variables=variables
        )
        rows: list[dict[str, Any]] = orjson.loads(text)
        return rows

    async def exists(self, query: str, *, database: str = "postgres", variables: Mapping[str, str]) -> bool:
        """Whether `query` (a SELECT) returns a row."""
        return bool(await self.rows(query, database=database, variables=variables))

    def error(self, code: int, text: str, secrets: Sequence[str] = ()) -> JobError:
        """The job's one line for a failed psql (or pg_dump...) run, secrets masked."""
        message = psql_message(text)
        for secret in secrets:
            if secret:
                message = message.replace(secret, "***")
        if code == PSQL_EXIT_CONNECTION:
            return PgUnreachable(f"PostgreSQL at {self.where}: {message}")
        return JobError(message or f"psql failed (exit {code})")


def psql_message(text: str) -> str:
    """psql's error lines as one line, without its ``psql:<stdin>:3:`` and ``psql: error:`` prefixes."""
    lines = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("psql:"):
            line = line.split(": ", 1)[-1] if ": " in line else line
            line = line.removeprefix("error: ")
        if line:
            lines.append(" ".join(line.split()))
    return " ".join(lines)


def psql_quote(value: str) -> str:
    """`value` as one single-quoted argument of a psql meta-command (``\\set``): psql reads
    backslash escapes there, so a backslash and a quote are escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# --- SCRAM-SHA-256 -----------------------------------------------------------------------------


def scram_verifier(password: str, *, salt: bytes | None = None, iterations: int = SCRAM_ITERATIONS) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for `password` (RFC 5802, RFC 7677)."""
    salt = salt if salt is not None else os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", saslprep(password), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", "sha256")

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


def saslprep(password: str) -> bytes:
    """The bytes the server derives its keys from, as PostgreSQL's ``pg_saslprep`` gives them:
    an ASCII password as it is; otherwise SASLprep (RFC 4013), and the password's own UTF-8
    bytes when SASLprep refuses it (PostgreSQL does the same, so the login matches)."""
    raw = password.encode()
    if password.isascii():
        return raw
    mapped = "".join(
        " " if stringprep.in_table_c12(char) else char for char in password if not stringprep.in_table_b1(char)
    )
    normal = unicodedata.normalize("NFKC", mapped)
    prohibited = (
        stringprep.in_table_a1,
        stringprep.in_table_c12,
        stringprep.in_table_c21_c22,
        stringprep.in_table_c3,
        stringprep.in_table_c4,
        stringprep.in_table_c5,
        stringprep.in_table_c6,
        stringprep.in_table_c7,
        stringprep.in_table_c8,
        stringprep.in_table_c9,
    )
    if not normal or any(check(char) for char in normal for check in prohibited):
        return raw
    if any(stringprep.in_table_d1(char) for char in normal):  # right-to-left text: RFC 3454 section 6
        if any(stringprep.in_table_d2(char) for char in normal):
            return raw
        if not (stringprep.in_table_d1(normal[0]) and stringprep.in_table_d1(normal[-1])):
            return raw
    return normal.encode()
