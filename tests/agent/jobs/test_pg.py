"""The pg.* job kinds through the API, against the root agent and a real PostgreSQL of the
session's own (`tests.helpers.postgres_server`); and the parsers and builders behind them."""

from __future__ import annotations

import base64
import gzip
import hashlib
import hmac
import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.jobs.pg.client import psql_message, psql_quote, saslprep, scram_verifier
from agent.jobs.pg.dumps import RestoreScript, ScriptRefused, dump_format, restricts
from agent.jobs.pg.hba import BEGIN, END, HbaEntry, HbaFile
from agent.jobs.toolkit.output import JobError
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting, JobRun
from tests.helpers.postgres_server import REMOTE_ADDRESS, PostgresServer, bin_dir, has_ipv6_loopback, start_postgres

needs_postgres = pytest.mark.skipif(bin_dir() is None, reason="needs PostgreSQL (Debian package postgresql)")
PASSWORD = "Corr3ct-horse-battery"


@pytest.fixture(scope="session")
def postgres(hosting: Hosting) -> Iterator[PostgresServer]:
    """The session's PostgreSQL, in the agent's host layout."""
    server = start_postgres(hosting.folder / "postgres")
    hosting.configure("postgres", server.layout())
    yield server
    server.stop()


@pytest.fixture(scope="module")
def site(hosting: Hosting, postgres: PostgresServer) -> Iterator[str]:
    """A static site for the dumps (deleted at the end, with its system user)."""
    domain = "pg-dumps.example"
    hosting.run("site.create", domain=domain, profile="static").ok()
    yield domain
    hosting.run("site.delete", domain=domain).ok()


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def names(rows: list[dict[str, object]]) -> set[object]:
    return {row["name"] for row in rows}


def output(run: JobRun) -> dict[str, object]:
    """What a mutation reported: the job's stored `result` (its kind declares one), which is what
    it printed on stdout."""
    document: dict[str, object] = run.result
    assert document == json.loads("\n".join(run.stdout))
    return document


def database_exists(postgres: PostgresServer, name: str) -> bool:
    return postgres.psql(f"SELECT count(*) FROM pg_database WHERE datname = '{name}'") == "1"


# --- the server and its databases ------------------------------------------------------------


@needs_postgres
def test_status_reports_the_running_server(hosting: Hosting, postgres: PostgresServer) -> None:
    result = hosting.run("pg.status").ok().result
    assert result["running"] is True
    assert result["port"] == postgres.port
    assert result["version_num"] >= 150000
    assert result["hba_file"] == str(postgres.hba_file)


@needs_postgres
def test_a_server_that_does_not_answer_is_a_status_and_a_clear_failure(
    hosting: Hosting, postgres: PostgresServer
) -> None:
    gone = str(postgres.folder / "no-socket-here")
    hosting.configure("postgres", {**postgres.layout(), "host": gone})
    try:
        status = hosting.run("pg.status").ok().result
        assert status["running"] is False and gone in status["error"]
        refused = hosting.run("pg.list")
        assert refused.exit_code == 1 and f"PostgreSQL at {gone}:{postgres.port}" in refused.text
    finally:
        hosting.configure("postgres", postgres.layout())
    assert hosting.run("pg.status").ok().result["running"] is True


@needs_postgres
def test_create_list_size_and_drop_a_database(hosting: Hosting, postgres: PostgresServer) -> None:
    name = unique("shop")
    made = output(hosting.run("pg.create", name=name).ok())
    assert made["created"] is True and made["encoding"] == "UTF8"
    assert database_exists(postgres, name)

    again = hosting.run("pg.create", name=name).ok()  # what exists is said so, and not an error
    assert output(again)["created"] is False and "already exists" in again.text

    assert name in names(hosting.run("pg.list").ok().result["databases"])
    sizes = hosting.run("pg.size", name=name).ok().result
    assert [row["name"] for row in sizes["databases"]] == [name]
    assert sizes["databases"][0]["bytes"] > 0
    assert name in names(hosting.run("pg.size").ok().result["databases"])

    assert output(hosting.run("pg.drop", name=name).ok())["dropped"] is True
    assert not database_exists(postgres, name)
    assert output(hosting.run("pg.drop", name=name).ok())["dropped"] is False


@needs_postgres
def test_a_database_is_created_with_its_owner_and_encoding(hosting: Hosting, postgres: PostgresServer) -> None:
    owner, name = unique("owner"), unique("latin")
    hosting.run("pg.user-create", user=owner, password=PASSWORD).ok()
    made = output(hosting.run("pg.create", name=name, owner=owner, encoding="LATIN1").ok())
    assert made["owner"] == owner and made["encoding"] == "LATIN1"
    assert postgres.psql(f"SELECT pg_encoding_to_char(encoding) FROM pg_database WHERE datname = '{name}'") == "LATIN1"


@needs_postgres
def test_drop_force_ends_open_sessions(hosting: Hosting, postgres: PostgresServer) -> None:
    name = unique("busy")
    hosting.run("pg.create", name=name).ok()
    holder = postgres.session(name)
    try:
        refused = hosting.run("pg.drop", name=name)
        assert refused.exit_code == 1 and "other users" in refused.text
        hosting.run("pg.drop", name=name, force=True).ok()
    finally:
        holder.kill()
        holder.wait()
    assert not database_exists(postgres, name)


@needs_postgres
def test_table_list_lists_the_tables_of_a_database(hosting: Hosting, postgres: PostgresServer) -> None:
    name = unique("tables")
    hosting.run("pg.create", name=name).ok()
    postgres.psql("CREATE SCHEMA billing; CREATE TABLE billing.invoices (id int); CREATE TABLE notes (t text);", name)
    tables = hosting.run("pg.table-list", name=name).ok().result["tables"]
    assert {(t["schema"], t["name"]) for t in tables} == {("billing", "invoices"), ("public", "notes")}
    missing = hosting.run("pg.table-list", name=unique("none"))
    assert missing.exit_code == 1 and "no database" in missing.text


@needs_postgres
def test_extension_add_enables_a_trusted_extension(hosting: Hosting, postgres: PostgresServer) -> None:
    name = unique("ext")
    hosting.run("pg.create", name=name).ok()
    added = output(hosting.run("pg.extension-add", name=name, extension="pg_trgm").ok())
    assert added["added"] is True
    assert postgres.psql("SELECT extname FROM pg_extension WHERE extname = 'pg_trgm'", name) == "pg_trgm"
    assert postgres.psql("SELECT similarity('word', 'words') > 0", name) == "t"
    assert output(hosting.run("pg.extension-add", name=name, extension="pg_trgm").ok())["added"] is False


@needs_postgres
def test_an_extension_not_installed_names_its_debian_package(hosting: Hosting, postgres: PostgresServer) -> None:
    if postgres.psql("SELECT count(*) FROM pg_available_extensions WHERE name = 'postgis'") != "0":
        pytest.skip("postgis is installed here")
    name = unique("gis")
    hosting.run("pg.create", name=name).ok()
    run = hosting.run("pg.extension-add", name=name, extension="postgis")
    assert run.exit_code == 69
    assert "postgresql-15-postgis-3" in run.text


@needs_postgres
def test_vacuum_streams_its_progress_and_analyzes(hosting: Hosting, postgres: PostgresServer) -> None:
    name = unique("vac")
    hosting.run("pg.create", name=name).ok()
    postgres.psql("CREATE TABLE items AS SELECT g AS id FROM generate_series(1, 1000) g; DELETE FROM items;", name)
    run = hosting.run("pg.vacuum", name=name, analyze=True).ok()
    assert any('vacuuming "' in line and "items" in line for line in run.stderr), run.text
    done = postgres.psql("SELECT last_vacuum IS NOT NULL AND last_analyze IS NOT NULL FROM pg_stat_user_tables", name)
    assert done == "t"
    full = hosting.run("pg.vacuum", name=name, full=True).ok()
    assert "(full)" in full.text
    every = hosting.run("pg.vacuum").ok()  # every database
    assert f'vacuuming database "{name}"' in every.text and 'vacuuming database "postgres"' in every.text


# --- roles and privileges --------------------------------------------------------------------


@needs_postgres
def test_a_user_logs_in_with_its_password_which_nothing_reveals(hosting: Hosting, postgres: PostgresServer) -> None:
    user = unique("app")
    made = hosting.run("pg.user-create", user=user, password=PASSWORD, createdb=True).ok()
    assert output(made)["created"] is True and output(made)["password"] == "scram-sha-256"
    assert postgres.login(user, PASSWORD, "postgres").returncode == 0
    assert postgres.login(user, "wrong-password", "postgres").returncode != 0

    again = hosting.run("pg.user-create", user=user, password="another-password").ok()
    assert output(again)["created"] is False
    assert postgres.login(user, PASSWORD, "postgres").returncode == 0  # unchanged

    roles = {role["name"]: role for role in hosting.run("pg.user-list").ok().result["roles"]}
    assert roles[user]["login"] is True and roles[user]["createdb"] is True
    assert roles[user]["password"] == "scram-sha-256"

    for run in (made, again):
        assert PASSWORD not in run.text and PASSWORD not in json.dumps(run.job)
    assert PASSWORD not in postgres.log_file.read_text()  # the server saw the SCRAM verifier only


@needs_postgres
def test_user_password_changes_the_password_also_to_a_non_ascii_one(hosting: Hosting, postgres: PostgresServer) -> None:
    user = unique("pw")
    hosting.run("pg.user-create", user=user, password=PASSWORD).ok()
    for password in ("New-pässwörd-ﬁne", "it's a \\ quote"):
        run = hosting.run("pg.user-password", user=user, password=password).ok()
        assert password not in run.text
        assert postgres.login(user, password, "postgres").returncode == 0, password
    assert postgres.login(user, PASSWORD, "postgres").returncode != 0
    missing = hosting.run("pg.user-password", user=unique("nobody"), password=PASSWORD)
    assert missing.exit_code == 1 and "no role" in missing.text


@needs_postgres
def test_user_delete_keeps_what_the_role_owned_and_hands_it_to_no_superuser(
    hosting: Hosting, postgres: PostgresServer
) -> None:
    """What the role made (a SECURITY DEFINER function among it) would run as a superuser if one
    got it: its own database, and what it made in the superuser's, go to the databases' owner roles."""
    user, name, shared = unique("gone"), unique("kept"), unique("shared")
    hosting.run("pg.user-create", user=user, password=PASSWORD).ok()
    hosting.run("pg.create", name=name, owner=user).ok()
    hosting.run("pg.create", name=shared).ok()  # the superuser's
    hosting.run("pg.grant", user=user, name=name).ok()
    hosting.run("pg.grant", user=user, name=shared).ok()
    made = "CREATE FUNCTION mine_too() RETURNS name LANGUAGE sql SECURITY DEFINER AS 'SELECT current_user';"
    postgres.psql(f"SET ROLE {user}; CREATE TABLE mine (id int); INSERT INTO mine VALUES (7); {made}", name)
    postgres.psql(f"SET ROLE {user}; {made}", shared)

    deleted = output(hosting.run("pg.user-delete", user=user).ok())
    assert deleted["deleted"] is True
    assert postgres.psql(f"SELECT count(*) FROM pg_roles WHERE rolname = '{user}'") == "0"
    assert postgres.login(user, PASSWORD, "postgres").returncode != 0
    assert postgres.psql("SELECT id FROM mine", name) == "7"  # handed over, not dropped
    heir = owner_of(postgres, name)
    assert heir.startswith("fleetdeck_owner_") and heir not in superusers(postgres)
    assert postgres.psql("SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = 'mine'", name) == heir
    assert postgres.psql("SELECT mine_too()", name) == heir
    assert owner_of(postgres, shared) == "postgres"
    assert postgres.psql("SELECT mine_too()", shared) not in superusers(postgres)
    assert output(hosting.run("pg.user-delete", user=user).ok())["deleted"] is False
    refused = hosting.post("pg.user-delete", user=heir)  # its objects would have nobody to go to
    assert refused.status_code == 422 and "kept for the agent's own accounts" in refused.text, refused.text
    assert postgres.psql("SELECT id FROM mine", name) == "7"


@needs_postgres
def test_grant_levels_and_revoke(hosting: Hosting, postgres: PostgresServer) -> None:
    user, name = unique("reader"), unique("grants")
    hosting.run("pg.user-create", user=user, password=PASSWORD).ok()
    hosting.run("pg.create", name=name).ok()
    postgres.psql("CREATE TABLE items (id serial, t text); INSERT INTO items (t) VALUES ('one');", name)
    postgres.psql(f"REVOKE CONNECT ON DATABASE {name} FROM PUBLIC")

    def as_user(sql: str) -> int:
        return postgres.login(user, PASSWORD, name, sql).returncode

    assert as_user("SELECT 1") != 0  # no CONNECT yet
    hosting.run("pg.grant", user=user, name=name, privileges="read").ok()
    assert as_user("SELECT t FROM items") == 0
    assert as_user("INSERT INTO items (t) VALUES ('two')") != 0

    hosting.run("pg.grant", user=user, name=name, privileges="readwrite").ok()
    assert as_user("INSERT INTO items (t) VALUES ('two')") == 0  # the sequence too
    assert as_user("CREATE TABLE own (id int)") != 0

    postgres.psql("CREATE TABLE later (id int); INSERT INTO later VALUES (1);", name)  # default privileges
    assert as_user("SELECT id FROM later") == 0

    hosting.run("pg.grant", user=user, name=name, privileges="all").ok()
    assert as_user("CREATE TABLE own (id int)") == 0

    revoked = hosting.run("pg.revoke", user=user, name=name).ok()
    assert "revoked" in revoked.text
    assert as_user("SELECT 1") != 0


# --- dumps -----------------------------------------------------------------------------------


def _fill(postgres: PostgresServer, name: str) -> None:
    postgres.psql(
        "CREATE TABLE items (id int PRIMARY KEY, t text);"
        "INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 500) g;",
        name,
    )


def _rows(postgres: PostgresServer, name: str) -> str:
    return postgres.psql("SELECT count(*), sum(id), max(t) FROM items", name)


@needs_postgres
@pytest.mark.parametrize(("options", "magic"), [({}, b"PGDMP"), ({"format": "plain", "gzip": True}, b"\x1f\x8b")])
def test_a_dump_restores_into_a_new_database(
    hosting: Hosting, postgres: PostgresServer, site: str, options: dict[str, object], magic: bytes
) -> None:
    source, target = unique("src"), unique("copy")
    hosting.run("pg.create", name=source).ok()
    _fill(postgres, source)
    path = f"backups/{source}.dump"
    dumped = hosting.run("pg.dump", name=source, domain=site, path=path, **options).ok()
    assert any("items" in line for line in dumped.stderr), dumped.text  # pg_dump's progress, streamed

    file = hosting.home / site.replace(".", "-") / path
    st = file.stat()
    owner = pwd.getpwuid(st.st_uid).pw_name
    assert owner == pwd.getpwuid((hosting.home / site.replace(".", "-")).stat().st_uid).pw_name != "root"
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert file.read_bytes().startswith(magic)
    assert [p.name for p in file.parent.iterdir()] == [file.name]  # no temporary file left

    restored = hosting.run("pg.restore", name=target, domain=site, path=path).ok()
    assert f"database {target} created" in restored.text
    assert _rows(postgres, target) == _rows(postgres, source) == "500|125250|item 99"
    file.unlink()


@needs_postgres
def test_restoring_over_an_existing_database_replaces_its_objects(
    hosting: Hosting, postgres: PostgresServer, site: str
) -> None:
    name = unique("again")
    hosting.run("pg.create", name=name).ok()
    _fill(postgres, name)
    path = f"{name}.dump"
    hosting.run("pg.dump", name=name, domain=site, path=path).ok()
    postgres.psql("DELETE FROM items WHERE id > 10", name)
    refused = hosting.run("pg.restore", name=name, domain=site, path=path)  # the table exists
    assert refused.exit_code == 1 and "nothing of it was restored" in refused.text
    assert postgres.psql("SELECT count(*) FROM items", name) == "10"
    hosting.run("pg.restore", name=name, domain=site, path=path, clean=True).ok()
    assert postgres.psql("SELECT count(*) FROM items", name) == "500"


@needs_postgres
def test_a_truncated_dump_restores_nothing(hosting: Hosting, postgres: PostgresServer, site: str) -> None:
    source, target = unique("whole"), unique("half")
    hosting.run("pg.create", name=source).ok()
    _fill(postgres, source)
    path = f"{source}.sql.gz"
    hosting.run("pg.dump", name=source, domain=site, path=path, format="plain", gzip=True).ok()
    file = hosting.home / site.replace(".", "-") / path
    data = file.read_bytes()
    file.write_bytes(data[: len(data) - 40])
    run = hosting.run("pg.restore", name=target, domain=site, path=path)
    assert run.exit_code == 1 and "nothing was restored" in run.text
    assert not database_exists(postgres, target)  # the database made for it went too
    file.write_bytes(gzip.compress(b"CREATE TABLE partial (id int);\nSELECT nonsense_function();\n"))
    run = hosting.run("pg.restore", name=target, domain=site, path=path)
    assert run.exit_code == 1 and "nonsense_function" in run.text
    assert not database_exists(postgres, target)
    file.unlink()


@needs_postgres
def test_a_dump_stays_inside_the_site(hosting: Hosting, postgres: PostgresServer, site: str) -> None:
    name = unique("jail")
    hosting.run("pg.create", name=name).ok()
    folder = hosting.home / site.replace(".", "-")
    outside = Path(hosting.folder) / unique("outside")
    outside.mkdir()
    (folder / "escape").symlink_to(outside)
    try:
        run = hosting.run("pg.dump", name=name, domain=site, path="escape/x.dump")
        assert run.exit_code == 1 and "outside" in run.text
        assert list(outside.iterdir()) == []  # nothing written through the link
        (outside / "y.dump").write_text("CREATE TABLE stolen (n int);\n")
        read = hosting.run("pg.restore", name=name, domain=site, path="escape/y.dump")
        assert read.exit_code == 1 and "outside" in read.text
        assert postgres.psql("SELECT count(*) FROM pg_tables WHERE tablename = 'stolen'", name) == "0"
        refused = hosting.post("pg.dump", name=name, domain=site, path="../x.dump")
        assert refused.status_code == 422
    finally:
        (folder / "escape").unlink()
        shutil.rmtree(outside)
    missing = hosting.run("pg.restore", name=name, domain=site, path="no/such.dump")
    assert missing.exit_code == 1 and "no such file" in missing.text


# --- a restore runs with the rights of the target database, nothing more ---------------------


def site_file(hosting: Hosting, site: str, path: str, data: bytes) -> Path:
    """A file of the site, owned by its user (as its own upload would be)."""
    file = hosting.home / site.replace(".", "-") / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_bytes(data)
    owner = pwd.getpwnam(site.replace(".", "-"))
    os.chown(file, owner.pw_uid, owner.pw_gid)
    return file


def roles(postgres: PostgresServer) -> set[str]:
    """The roles of the server (but PostgreSQL's own and the databases' owner roles)."""
    found = postgres.psql("SELECT rolname FROM pg_roles WHERE rolname !~ '^(pg_|fleetdeck_owner_)'")
    return set(found.split())


def superusers(postgres: PostgresServer) -> set[str]:
    return set(postgres.psql("SELECT rolname FROM pg_roles WHERE rolsuper").split())


def owner_of(postgres: PostgresServer, name: str) -> str:
    return postgres.psql(f"SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = '{name}'")


def processes(word: str) -> list[int]:
    """The live processes whose command line holds `word` as one of its arguments."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if word.encode() in argv:
                found.append(int(entry.name))
    return found


def identity(pid: int) -> tuple[int, int, set[int]]:
    """The real uid, gid and supplementary groups of process `pid`."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["Uid"].split()[0]), int(fields["Gid"].split()[0]), {int(g) for g in fields["Groups"].split()}


@pytest.fixture
def marker_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder everyone may write in (so a command that ran would leave its file there)."""
    folder = tmp_path_factory.mktemp("hostile")
    folder.chmod(0o1777)
    yield folder


HOSTILE = {
    "shell escape": "\\! touch {marker}",
    "shell escape after a statement": "SELECT 1 \\! touch {marker}",
    "unrestrict with a backquoted command": "\\unrestrict `touch {marker}`",
    "a variable from a command": "\\set x `touch {marker}`",
    "output to a file": "\\o {marker}\nSELECT 1;",
    "client-side copy": "\\copy (SELECT 1) TO '{marker}'",
    "include a file": "\\i /etc/passwd",
    "another database": "\\connect postgres",
    "copy to a program": "COPY (SELECT 1) TO PROGRAM 'touch {marker}';",
    "copy from a server file": "CREATE TABLE leak (line text);\nCOPY leak FROM '/etc/passwd';",
    "a superuser role": "CREATE ROLE evil_{tag} SUPERUSER LOGIN PASSWORD 'evil';",
    "its own role a superuser": "ALTER ROLE current_user SUPERUSER;",
    "read a server file": "SELECT pg_read_file('/etc/shadow');",
    "import a server file": "SELECT lo_import('/etc/shadow');",
    "the server's settings": "COMMIT;\nALTER SYSTEM SET log_statement = 'none';",
    "an untrusted language": "CREATE FUNCTION run() RETURNS void LANGUAGE c AS '/bin/sh', 'main';",
}


@needs_postgres
@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_a_hostile_file_runs_nothing_and_changes_nothing(
    hosting: Hosting, postgres: PostgresServer, site: str, marker_folder: Path, attack: str
) -> None:
    name, tag = unique("target"), uuid.uuid4().hex[:8]
    marker = marker_folder / f"ran-{tag}"
    hosting.run("pg.create", name=name).ok()
    before = (roles(postgres), superusers(postgres), (postgres.data / "postgresql.auto.conf").read_text())
    sql = "CREATE TABLE before_the_attack (id int);\n" + HOSTILE[attack].format(marker=marker, tag=tag) + "\n"
    site_file(hosting, site, "hostile.sql", sql.encode())

    run = hosting.run("pg.restore", name=name, domain=site, path="hostile.sql")
    assert run.exit_code == 1, run.text
    last = run.stderr[-1]
    assert "hostile.sql" in last and "nothing of it was restored" in last
    if HOSTILE[attack].startswith("\\") or " \\" in HOSTILE[attack]:
        assert "meta-command" in last
    else:
        assert "permission denied" in last or "must be superuser" in last or "not allowed" in last, last
    assert not marker.exists()
    if "COMMIT" not in sql:  # a file that commits itself keeps what it made before: in its database alone
        assert (
            postgres.psql("SELECT count(*) FROM pg_tables WHERE tablename IN ('before_the_attack', 'leak')", name)
            == "0"
        )
    assert (roles(postgres), superusers(postgres), (postgres.data / "postgresql.auto.conf").read_text()) == before
    assert postgres.psql("SELECT count(*) FROM pg_largeobject_metadata", name) == "0"


@needs_postgres
def test_the_restore_runs_as_the_site_user_and_a_role_that_owns_the_database_alone(
    hosting: Hosting, postgres: PostgresServer, site: str
) -> None:
    """Caught while it waits for an advisory lock the test holds: psql is the site's user with its
    own group only and a small environment, logged in as a throwaway role that owns the target
    database and nothing else; once it ends, the role is gone and the database's owner is back."""
    app, name = unique("app"), unique("held")
    hosting.run("pg.user-create", user=app, password=PASSWORD).ok()
    hosting.run("pg.create", name=name, owner=app).ok()
    postgres.psql(f"SET ROLE {app}; CREATE TABLE kept (id int); INSERT INTO kept VALUES (1);", name)
    lock = 4200 + secrets.randbelow(1000)
    sql = f"SELECT pg_advisory_lock({lock});\nCREATE TABLE added AS SELECT id + 1 AS id FROM kept;\n"
    site_file(hosting, site, "held.sql", sql.encode())
    holder = postgres.session(name, f"SELECT pg_advisory_lock({lock})")
    job = hosting.post("pg.restore", name=name, domain=site, path="held.sql")
    assert job.status_code == 201, job.text
    try:
        waiting = f"SELECT usename FROM pg_stat_activity WHERE datname = '{name}' AND wait_event_type = 'Lock'"
        wait_until(lambda: postgres.psql(waiting).startswith("fleetdeck_importer_"))
        importer = postgres.psql(waiting)
        (pid,) = processes(importer)
        account = pwd.getpwnam(site.replace(".", "-"))
        assert identity(pid) == (account.pw_uid, account.pw_gid, {account.pw_gid})
        environ = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_text().split("\0") if item)
        allowed = {"PATH", "LC_ALL", "LANG", "PGPASSFILE", "PGCONNECT_TIMEOUT", "PGAPPNAME"}
        assert set(environ) - {"PGSYSCONFDIR"} <= allowed  # Debian's psql wrapper adds PGSYSCONFDIR
        attributes = postgres.psql(
            "SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls, rolconnlimit,"
            f" (SELECT count(*) FROM pg_auth_members WHERE member = r.oid) FROM pg_roles r WHERE rolname = '{importer}'"
        )
        assert attributes == "f|f|f|f|f|1|0"
        assert owner_of(postgres, name) == importer
        owned = f"SELECT count(*) FROM pg_database WHERE datdba = '{importer}'::regrole"
        assert postgres.psql(owned) == "1"  # the target alone
        assert postgres.psql("SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = 'kept'", name) == importer
    finally:
        postgres.release(holder, name)
        restored = hosting.wait(job.json()["id"])
    restored.ok()
    assert owner_of(postgres, name) == app
    assert postgres.psql("SELECT string_agg(pg_get_userbyid(relowner), ',' ORDER BY relname) FROM pg_class"
                         " WHERE relname IN ('added', 'kept')", name) == f"{app},{app}"  # fmt: skip
    assert postgres.psql("SELECT count(*) FROM pg_roles WHERE rolname LIKE 'fleetdeck_importer_%'") == "0"


@needs_postgres
def test_pg_dump_runs_with_the_postgres_accounts_own_groups(
    hosting: Hosting, postgres: PostgresServer, site: str
) -> None:
    """Caught while it waits for a lock the test holds: not root's group nor its groups."""
    name = unique("groups")
    hosting.run("pg.create", name=name).ok()
    _fill(postgres, name)
    holder = postgres.session(name, "BEGIN", "LOCK TABLE items IN ACCESS EXCLUSIVE MODE")
    job = hosting.post("pg.dump", name=name, domain=site, path=f"{name}.dump")
    assert job.status_code == 201, job.text
    try:
        waiting = f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{name}' AND wait_event_type = 'Lock'"
        wait_until(lambda: postgres.psql(waiting) == "1")  # pg_dump, waiting for the table
        (pid,) = [p for p in processes(name) if Path(f"/proc/{p}/exe").resolve().name == "pg_dump"]
        account = pwd.getpwnam("postgres")
        groups = set(os.getgrouplist("postgres", account.pw_gid))
        assert identity(pid) == (account.pw_uid, account.pw_gid, groups) and 0 not in groups
    finally:
        postgres.release(holder, name)
        dumped = hosting.wait(job.json()["id"])
    dumped.ok()


@needs_postgres
def test_a_plain_pg_dump_of_its_own_restores_with_its_data_and_grants(
    hosting: Hosting, postgres: PostgresServer, site: str
) -> None:
    """Made by pg_dump itself: its ``\\restrict`` key, owners, COPY data (a value holding
    ``\\unrestrict`` among them), an extension, grants and default privileges of pg.grant."""
    reader, source, target = unique("reader"), unique("origin"), unique("copy")
    hosting.run("pg.user-create", user=reader, password=PASSWORD).ok()
    hosting.run("pg.create", name=source).ok()
    hosting.run("pg.extension-add", name=source, extension="pg_trgm").ok()
    postgres.psql(
        "CREATE TABLE notes (id int PRIMARY KEY, t text);"
        "INSERT INTO notes VALUES (1, E'\\\\unrestrict x'), (2, E'line\\nbreak\\ttab'),"
        " (3, 'ALTER TABLE x OWNER TO y;');"
        "CREATE INDEX notes_trgm ON notes USING gin (t gin_trgm_ops);"
        "CREATE FUNCTION whoami() RETURNS name LANGUAGE sql SECURITY DEFINER AS 'SELECT current_user';",
        source,
    )
    hosting.run("pg.grant", user=reader, name=source, privileges="read").ok()
    dumped = subprocess.run(
        [str(postgres.bin / "pg_dump"), "--clean", "--if-exists", "-h", str(postgres.socket_dir),
         "-p", str(postgres.port), "-U", "postgres", source],
        user="postgres", cwd="/", capture_output=True, check=True,
    ).stdout  # fmt: skip
    assert dumped.count(b"\\restrict ") == 1 and b"OWNER TO postgres;" in dumped
    site_file(hosting, site, "origin.sql", dumped)
    notes = "SELECT string_agg(t, '|' ORDER BY id) FROM notes"

    for name in (target, source):  # into a new database, then over the one it came from
        run = hosting.run("pg.restore", name=name, domain=site, path="origin.sql").ok()
        assert "ALTER DEFAULT PRIVILEGES" in run.text  # said left out
        assert postgres.psql(notes, name) == postgres.psql(notes, source)
        assert postgres.psql(notes, name) == "\\unrestrict x|line\nbreak\ttab|ALTER TABLE x OWNER TO y;"
        assert postgres.psql("SELECT count(*) FROM pg_indexes WHERE indexname = 'notes_trgm'", name) == "1"
        owner = owner_of(postgres, name)
        assert owner.startswith("fleetdeck_owner_") and owner not in superusers(postgres)
        assert postgres.psql("SELECT pg_get_userbyid(proowner) FROM pg_proc WHERE proname = 'whoami'", name) == owner
        assert postgres.login(reader, PASSWORD, name, "SELECT count(*) FROM notes").stdout.strip() == "3"
    assert postgres.psql("SELECT count(*) FROM pg_roles WHERE rolname LIKE 'fleetdeck_importer_%'") == "0"
    made_for_it = owner_of(postgres, target)
    hosting.run("pg.drop", name=target).ok()
    assert postgres.psql(f"SELECT count(*) FROM pg_roles WHERE rolname = '{made_for_it}'") == "0"  # gone with it


@needs_postgres
def test_a_restore_after_one_the_agent_never_ended_takes_its_database_back(
    hosting: Hosting, postgres: PostgresServer, site: str
) -> None:
    """An agent killed mid-restore leaves its role owning the database: the next restore hands
    all to the database's owner role and drops the role."""
    dead, name = f"fleetdeck_importer_{uuid.uuid4().hex[:12]}", unique("orphan")
    hosting.run("pg.create", name=name).ok()
    postgres.psql(f"CREATE ROLE {dead} LOGIN; ALTER DATABASE {name} OWNER TO {dead}")
    postgres.psql(f"CREATE TABLE old (id int); ALTER TABLE old OWNER TO {dead}", name)
    site_file(hosting, site, "after.sql", b"CREATE TABLE new (id int);\n")
    hosting.run("pg.restore", name=name, domain=site, path="after.sql").ok()
    owner = owner_of(postgres, name)
    assert owner.startswith("fleetdeck_owner_")
    tables = "SELECT string_agg(pg_get_userbyid(relowner), ',' ORDER BY relname) FROM pg_class"
    tables += " WHERE relname IN ('new', 'old')"
    assert postgres.psql(tables, name) == f"{owner},{owner}"
    assert postgres.psql("SELECT count(*) FROM pg_roles WHERE rolname LIKE 'fleetdeck_importer_%'") == "0"


@needs_postgres
def test_a_database_whose_owner_may_create_roles_is_not_restored_into(
    hosting: Hosting, postgres: PostgresServer, site: str
) -> None:
    admin, name = unique("admin"), unique("guarded")
    postgres.psql(f"CREATE ROLE {admin} LOGIN CREATEROLE")
    hosting.run("pg.create", name=name, owner=admin).ok()
    site_file(hosting, site, "plain.sql", b"CREATE TABLE t (id int);\n")
    run = hosting.run("pg.restore", name=name, domain=site, path="plain.sql")
    assert run.exit_code == 1 and "may create roles" in run.text and "nothing was restored" in run.text
    assert owner_of(postgres, name) == admin
    assert postgres.psql("SELECT count(*) FROM pg_tables WHERE tablename = 't'", name) == "0"


@needs_postgres
def test_the_agents_statements_ignore_a_search_path_the_database_sets(
    hosting: Hosting, postgres: PostgresServer
) -> None:
    """A database's owner may set its search_path and plant a function there: the agent's
    superuser sessions in that database never call it."""
    app, name = unique("planter"), unique("planted")
    hosting.run("pg.user-create", user=app, password=PASSWORD).ok()
    hosting.run("pg.create", name=name, owner=app).ok()
    postgres.psql(
        f"SET ROLE {app}; CREATE TABLE bait (id int);"
        "CREATE FUNCTION public.pg_get_userbyid(oid) RETURNS name LANGUAGE plpgsql AS"
        f" $$ BEGIN EXECUTE 'ALTER ROLE {app} SUPERUSER'; RETURN 'x'; END $$;"
        f"ALTER DATABASE {name} SET search_path = public, pg_catalog;",
        name,
    )
    tables = hosting.run("pg.table-list", name=name).ok().result["tables"]
    assert [t["owner"] for t in tables] == [app]
    hosting.run("pg.grant", user=app, name=name).ok()
    assert app not in superusers(postgres)


# --- the remote allowlist --------------------------------------------------------------------


@needs_postgres
@pytest.mark.skipif(not has_ipv6_loopback(), reason="the remote client is ::1: needs IPv6 on the loopback")
def test_an_allowlist_entry_lets_a_remote_login_in_and_its_removal_refuses_it(
    hosting: Hosting, postgres: PostgresServer
) -> None:
    user, name = unique("remote"), unique("remote")
    hosting.run("pg.user-create", user=user, password=PASSWORD).ok()
    hosting.run("pg.create", name=name, owner=user).ok()
    cidr = f"{REMOTE_ADDRESS}/128"

    def remote_login() -> int:
        return postgres.login(user, PASSWORD, name, address=REMOTE_ADDRESS).returncode

    assert remote_login() != 0
    added = output(hosting.run("pg.allow-add", cidr=cidr, name=name, user=user).ok())
    assert added["added"] is True
    assert remote_login() == 0
    assert postgres.login(user, PASSWORD, "postgres", address=REMOTE_ADDRESS).returncode != 0  # that database only
    entries = hosting.run("pg.allow-list").ok().result["entries"]
    assert {"cidr": cidr, "database": name, "user": user, "method": "scram-sha-256"} in entries
    assert output(hosting.run("pg.allow-add", cidr=cidr, name=name, user=user).ok())["added"] is False

    assert output(hosting.run("pg.allow-remove", cidr=cidr, name=name, user=user).ok())["removed"] is True
    assert remote_login() != 0
    assert output(hosting.run("pg.allow-remove", cidr=cidr, name=name, user=user).ok())["removed"] is False
    assert BEGIN not in postgres.hba_file.read_text()  # an empty block goes


@needs_postgres
def test_a_pg_hba_the_server_refuses_is_put_back(hosting: Hosting, postgres: PostgresServer) -> None:
    good = postgres.hba_file.read_text()
    broken = good + "host all all 10.0.0.0/33 scram-sha-256\n"  # someone's bad edit, outside the block
    postgres.hba_file.write_text(broken)
    try:
        run = hosting.run("pg.allow-add", cidr="10.1.0.0/16")
        assert run.exit_code == 78, run.text
        assert "put back" in run.text
        assert postgres.hba_file.read_text() == broken
        assert stat.S_IMODE(postgres.hba_file.stat().st_mode) == 0o600
        assert pwd.getpwuid(postgres.hba_file.stat().st_uid).pw_name == "postgres"
    finally:
        postgres.hba_file.write_text(good)


# --- parsers and builders --------------------------------------------------------------------


def test_hba_block_goes_before_the_first_host_rule_and_round_trips() -> None:
    text = "# comment\nlocal all all peer\nhost all all 127.0.0.1/32 scram-sha-256\n"
    hba = HbaFile.parse(text)
    assert not hba.found and hba.render() == text
    hba.entries.append(HbaEntry("10.0.0.0/8", "app", None))
    rendered = hba.render()
    lines = rendered.splitlines()
    assert lines[2] == BEGIN and lines[4] == END and lines[5].startswith("host")
    assert lines[3].split() == ["host", '"app"', "all", "10.0.0.0/8", "scram-sha-256"]
    again = HbaFile.parse(rendered)
    assert again.found and again.entries == [HbaEntry("10.0.0.0/8", "app", None)]
    assert again.render() == rendered
    again.entries.clear()
    assert again.render() == text


def test_hba_block_edited_by_hand_is_not_guessed_at() -> None:
    with pytest.raises(JobError, match="edited by hand"):
        HbaFile.parse(f"{BEGIN}\nhost all all 10.0.0.0/8 trust\n{END}\n")
    with pytest.raises(JobError, match="no"):
        HbaFile.parse(f"{BEGIN}\n")


def test_scram_verifier_passes_the_exchange_of_rfc_7677() -> None:
    """The RFC's example exchange (password "pencil"): the verifier's keys check its client proof
    and give its server signature."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    verifier = scram_verifier("pencil", salt=salt)
    head, keys = verifier.rsplit("$", 1)
    assert head == "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ=="
    stored_key, server_key = (base64.b64decode(key) for key in keys.split(":"))
    nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    auth_message = f"n=user,r=rOprNGfwEbeRWgbNEkqO,r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r={nonce}"
    signature = hmac.digest(server_key, auth_message.encode(), "sha256")
    assert base64.b64encode(signature).decode() == "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    proof = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client_signature = hmac.digest(stored_key, auth_message.encode(), "sha256")
    client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
    assert hashlib.sha256(client_key).digest() == stored_key


def test_saslprep_as_postgresql_applies_it() -> None:
    assert saslprep("plain ASCII \x07 kept") == b"plain ASCII \x07 kept"
    assert saslprep("I\u00adX-\u00e9") == "IX-\u00e9".encode()  # soft hyphen mapped to nothing
    assert saslprep("\u2168-\u00aa") == b"IX-a"  # NFKC
    assert saslprep("x\u00a0y\u00e9") == "x y\u00e9".encode()  # a non-ASCII space becomes a space
    assert saslprep("\u0627\u00e91") == "\u0627\u00e91".encode()  # bidi rule broken: raw bytes


def test_psql_quoting_and_messages() -> None:
    assert psql_quote("it's a \\ b") == "'it\\'s a \\\\ b'"
    assert psql_message('psql:<stdin>:4: ERROR:  role "x" does not exist\n') == 'ERROR: role "x" does not exist'
    assert psql_message(
        'psql: error: connection to server on socket "/r/.s.PGSQL.5" failed: No such file\n\tIs it'
    ) == ('connection to server on socket "/r/.s.PGSQL.5" failed: No such file Is it')
    assert dump_format(b"PGDMP") == "custom" and dump_format(b"\x1f\x8b\x08") == "gzip"
    assert dump_format(b"--\n-- ") == "plain"


def test_restore_script_strips_the_dumps_own_restrict_pair_and_refuses_any_other_unrestrict() -> None:
    dump = (
        b"--\n-- PostgreSQL database dump\n--\n\n\\restrict Key123\n\nSET x = 1;\n"
        b"COPY public.t (a) FROM stdin;\n\\\\unrestrict in the data\n\\.\n\n\\unrestrict Key123\n"
    )
    script = RestoreScript(frozenset())
    out = b"".join(script.feed(dump[i : i + 7]) for i in range(0, len(dump), 7)) + script.close()
    assert b"restrict Key123" not in out and b"\\\\unrestrict in the data" in out
    assert out.count(b"\n") == dump.count(b"\n")  # lines left out are emptied: psql's line numbers hold
    for hostile in (
        b"\\unrestrict `touch /tmp/x`\n",
        b"SELECT 1; \\unrestrict Key123\n",  # not alone on its line
        b"\\\\\\unrestrict x\n",  # an odd run of backslashes
        b"\\unrestrict Other\n",  # not the head's key
    ):
        with pytest.raises(ScriptRefused, match="unrestrict"):
            RestoreScript(frozenset()).feed(b"--\n\\restrict Key123\nSELECT 1;\n" + hostile)


def test_restore_script_leaves_out_owners_default_privileges_and_the_databases_extensions() -> None:
    dump = (
        b"ALTER TABLE public.items OWNER TO postgres;\n"
        b"ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT SELECT ON TABLES TO app;\n"
        b"DROP EXTENSION IF EXISTS pg_trgm;\n"
        b"COMMENT ON EXTENSION pg_trgm IS 'text similarity';\n"
        b"COMMENT ON EXTENSION hstore IS 'key/value';\n"
        b"COPY public.items (t) FROM stdin;\n"
        b"ALTER TABLE x OWNER TO y;\n"
        b"\\.\n"
        b"ALTER FUNCTION public.f(integer) OWNER TO app;\n"
    )
    script = RestoreScript(frozenset({"pg_trgm"}))
    lines = (script.feed(dump) + script.close()).split(b"\n")
    assert lines == [
        b"", b"", b"", b"", b"COMMENT ON EXTENSION hstore IS 'key/value';", b"COPY public.items (t) FROM stdin;",
        b"ALTER TABLE x OWNER TO y;", b"\\.", b"", b"",
    ]  # fmt: skip
    assert script.left_out == 1


def test_psql_has_its_restricted_mode_from_the_august_2025_releases() -> None:
    assert restricts((15, 14)) and restricts((15, 18)) and restricts((16, 10)) and restricts((18, 0))
    assert not restricts((15, 13)) and not restricts((17, 5)) and not restricts((12, 99))
