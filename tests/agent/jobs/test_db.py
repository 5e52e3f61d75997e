"""The db kinds through the API, on a real MariaDB server of the session's own.

Each kind runs as a job of the hosting server's root agent (`hosting.run`), and its effect is
checked on the server itself: the database exists, the account logs in over TCP with its password,
a grant lets it read or write and a revoke stops it, the dump is a gzip file in the site that
imports back. Plus the parsers and the SQL quoting, on their own.
"""

from __future__ import annotations

import gzip
import json
import os
import pwd
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.jobs.db import (
    DEFINER_CLAUSE,
    connection,
    grant_pattern,
    json_rows,
    literal,
    parse_status,
    scrub,
    unescape_pattern,
)
from agent.jobs.toolkit.host import MariaDbLayout
from tests.helpers.hosting import JOB_TIMEOUT_S, Hosting, JobRun
from tests.helpers.mariadb import MariaDb, mariadb_installed, run_mariadb

pytestmark = pytest.mark.skipif(not mariadb_installed(), reason="needs mariadb-server and mariadb-client")

SITE = f"shop-{uuid.uuid4().hex[:6]}.test"  # unique: a site user of an interrupted run may be left on the machine
PASSWORD = "first-Secret'pass\\word"  # a quote and a backslash: the literal must escape both
NEW_PASSWORD = "second-secret-passw0rd"


@pytest.fixture(scope="session")
def mariadb(hosting: Hosting) -> Iterator[MariaDb]:
    with run_mariadb(hosting.folder / "mariadb") as server:
        hosting.configure("mariadb", server.layout())
        yield server


@pytest.fixture(scope="session")
def site_home(hosting: Hosting, mariadb: MariaDb) -> Iterator[Path]:
    hosting.run("site.create", domain=SITE, profile="static").ok()
    yield hosting.home / SITE.replace(".", "-")  # the site's folder (`agent.jobs.site.lifecycle.slug_of`)
    hosting.run("site.delete", domain=SITE).ok()


def databases(server: MariaDb) -> set[str]:
    return set(server.sql("SHOW DATABASES;").split())


def reply(run: JobRun) -> dict[str, object]:
    """The object a create/delete kind reports: the job's stored `result`, what it printed with --json."""
    obj: dict[str, object] = run.ok().result
    assert obj == json.loads(run.stdout[-1])
    return obj


def can(server: MariaDb, user: str, password: str, sql: str, database: str | None = None) -> bool:
    return server.client(sql, user=user, password=password, database=database).returncode == 0


# --- databases ------------------------------------------------------------------------------


def test_a_database_is_created_listed_measured_and_dropped(hosting: Hosting, mariadb: MariaDb) -> None:
    assert reply(hosting.run("db.create", name="catalog", collation="utf8mb4_bin")) == {
        "name": "catalog",
        "created": True,
        "charset": "utf8mb4",
    }
    assert "catalog" in databases(mariadb)
    assert mariadb.sql("SELECT DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME='catalog';")
    again = hosting.run("db.create", name="catalog").ok()
    assert reply(again) == {"name": "catalog", "created": False, "charset": "utf8mb4"}

    mariadb.sql("CREATE TABLE items (id INT PRIMARY KEY, title TEXT); INSERT INTO items VALUES (1, 'a');", "catalog")
    listed = {item["name"]: item for item in hosting.run("db.list").ok().result}
    assert listed["catalog"]["collation"] == "utf8mb4_bin"
    assert not {"mysql", "information_schema", "performance_schema", "sys"} & set(listed)

    (size,) = hosting.run("db.size", name="catalog").ok().result
    assert size["name"] == "catalog" and size["tables"] == 1 and size["bytes"] > 0
    assert "catalog" in {item["name"] for item in hosting.run("db.size").ok().result}

    (table,) = hosting.run("db.table-list", name="catalog").ok().result
    assert table["name"] == "items" and table["engine"] == "InnoDB" and table["type"] == "BASE TABLE"

    assert reply(hosting.run("db.drop", name="catalog")) == {"name": "catalog", "dropped": True}
    assert "catalog" not in databases(mariadb)
    assert reply(hosting.run("db.drop", name="catalog")) == {"name": "catalog", "dropped": False}
    missing = hosting.run("db.table-list", name="catalog")
    assert missing.exit_code == 1 and "no database catalog" in missing.text


def test_the_catalog_refuses_a_collation_of_another_charset_and_a_dump_that_is_not_sql(hosting: Hosting) -> None:
    assert hosting.post("db.create", name="x1", charset="latin1", collation="utf8mb4_bin").status_code == 422
    for path in ("backups/x.tar", "../x.sql", "/etc/x.sql"):
        assert hosting.post("db.export", name="x1", domain=SITE, path=path).status_code == 422, path


def test_the_status_of_the_server(hosting: Hosting, mariadb: MariaDb) -> None:
    status = hosting.run("db.status").ok().result
    assert status["running"] is True
    assert status["version"] == mariadb.sql("SELECT VERSION();").strip()
    assert status["uptime_s"] >= 0 and status["threads_connected"] >= 1


# --- accounts -------------------------------------------------------------------------------


def test_an_account_logs_in_with_its_password_which_never_shows(hosting: Hosting, mariadb: MariaDb) -> None:
    created = hosting.run("db.user-create", user="app_user", password=PASSWORD, host="127.0.0.1")
    assert reply(created) == {"user": "app_user", "host": "127.0.0.1", "created": True}
    assert can(mariadb, "app_user", PASSWORD, "SELECT 1;")
    assert not can(mariadb, "app_user", "not-the-password", "SELECT 1;")

    again = hosting.run("db.user-create", user="app_user", password=NEW_PASSWORD, host="127.0.0.1")
    assert reply(again)["created"] is False
    assert can(mariadb, "app_user", PASSWORD, "SELECT 1;")  # an existing account keeps its password

    changed = hosting.run("db.user-password", user="app_user", password=NEW_PASSWORD, host="127.0.0.1").ok()
    assert can(mariadb, "app_user", NEW_PASSWORD, "SELECT 1;")
    assert not can(mariadb, "app_user", PASSWORD, "SELECT 1;")

    accounts = hosting.run("db.user-list").ok().result
    assert {"user": "app_user", "host": "127.0.0.1", "databases": []} in accounts
    for run in (created, again, changed):
        for secret in (PASSWORD, NEW_PASSWORD):
            assert secret not in json.dumps(run.job) and secret not in run.text

    deleted = hosting.run("db.user-delete", user="app_user", host="127.0.0.1")
    assert reply(deleted) == {"user": "app_user", "host": "127.0.0.1", "deleted": True}
    assert not can(mariadb, "app_user", NEW_PASSWORD, "SELECT 1;")
    assert reply(hosting.run("db.user-delete", user="app_user", host="127.0.0.1"))["deleted"] is False
    refused = hosting.run("db.user-password", user="app_user", password=NEW_PASSWORD, host="127.0.0.1")
    assert refused.exit_code == 1 and "no database account app_user@127.0.0.1" in refused.text


def test_grants_take_effect_and_an_underscore_is_no_wildcard(hosting: Hosting, mariadb: MariaDb) -> None:
    mariadb.sql("CREATE DATABASE shop_a; CREATE DATABASE shopxa;")
    mariadb.sql("CREATE TABLE t (n INT); INSERT INTO t VALUES (1);", "shop_a")
    mariadb.sql("CREATE TABLE t (n INT); INSERT INTO t VALUES (1);", "shopxa")
    hosting.run("db.user-create", user="grantee", password=PASSWORD, host="127.0.0.1").ok()
    assert not can(mariadb, "grantee", PASSWORD, "SELECT * FROM t;", "shop_a")

    hosting.run("db.user-grant", user="grantee", name="shop_a", privileges="read", host="127.0.0.1").ok()
    assert can(mariadb, "grantee", PASSWORD, "SELECT * FROM t;", "shop_a")
    assert not can(mariadb, "grantee", PASSWORD, "INSERT INTO t VALUES (2);", "shop_a")
    assert not can(mariadb, "grantee", PASSWORD, "SELECT * FROM t;", "shopxa")  # `_` matched itself only

    hosting.run("db.user-grant", user="grantee", name="shop_a", privileges="readwrite", host="127.0.0.1").ok()
    assert can(mariadb, "grantee", PASSWORD, "INSERT INTO t VALUES (2);", "shop_a")
    assert not can(mariadb, "grantee", PASSWORD, "DROP TABLE t;", "shop_a")
    listed = {(a["user"], a["host"]): a for a in hosting.run("db.user-list").ok().result}
    assert listed["grantee", "127.0.0.1"]["databases"] == ["shop_a"]

    hosting.run("db.user-revoke", user="grantee", name="shop_a", host="127.0.0.1").ok()
    assert not can(mariadb, "grantee", PASSWORD, "SELECT * FROM t;", "shop_a")
    nothing = hosting.run("db.user-revoke", user="grantee", name="shop_a", host="127.0.0.1").ok()
    assert "nothing to revoke" in nothing.text

    refused = hosting.run("db.user-grant", user="grantee", name="no_such_db", host="127.0.0.1")
    assert refused.exit_code == 1 and "no database no_such_db" in refused.text
    hosting.run("db.user-delete", user="grantee", host="127.0.0.1").ok()
    mariadb.sql("DROP DATABASE shop_a; DROP DATABASE shopxa;")


# --- dumps ----------------------------------------------------------------------------------


def test_a_dump_is_written_gzipped_into_the_site_as_its_user_and_imports_back(
    hosting: Hosting, mariadb: MariaDb, site_home: Path
) -> None:
    hosting.run("db.create", name="shop").ok()
    mariadb.sql("CREATE TABLE orders (id INT PRIMARY KEY, note TEXT);", "shop")
    mariadb.sql("INSERT INTO orders VALUES " + ", ".join(f"({i}, 'order {i}')" for i in range(1, 501)) + ";", "shop")

    exported = hosting.run("db.export", name="shop", domain=SITE, path="backups/shop.sql.gz").ok()
    assert any(line.startswith("-- ") and "orders" in line for line in exported.stdout)  # the dump's progress
    dump = site_home / "backups" / "shop.sql.gz"
    owner = os.stat(site_home).st_uid
    assert os.stat(dump).st_uid == owner and os.stat(dump.parent).st_uid == owner
    assert os.stat(dump).st_mode & 0o777 == 0o600  # the data: the site's user alone reads it
    assert b"CREATE TABLE `orders`" in gzip.decompress(dump.read_bytes())
    assert [p.name for p in dump.parent.iterdir()] == ["shop.sql.gz"]  # no temporary file left

    hosting.run("db.create", name="shop_copy").ok()
    imported = hosting.run("db.import", name="shop_copy", domain=SITE, path="backups/shop.sql.gz").ok()
    assert "imported backups/shop.sql.gz into database shop_copy" in imported.text
    assert mariadb.sql("SELECT COUNT(*), MAX(note) FROM orders;", "shop_copy").split("\t") == ["500", "order 99\n"]

    mariadb.sql("ALTER TABLE orders ADD pad TEXT; UPDATE orders SET pad = REPEAT('x', 6000);", "shop")  # 3 MB
    hosting.run("db.export", name="shop", domain=SITE, path="backups/plain.sql").ok()
    assert (site_home / "backups" / "plain.sql").read_text().count("INSERT INTO `orders`") >= 1
    mariadb.sql("CREATE TABLE extra (n INT); DELETE FROM orders WHERE id > 10;", "shop_copy")
    again = hosting.run("db.import", name="shop_copy", domain=SITE, path="backups/plain.sql", drop_existing=True)
    assert any(line.startswith("backups/plain.sql: 50% read") for line in again.ok().stdout)  # its progress
    assert mariadb.sql("SHOW TABLES;", "shop_copy").split() == ["orders"]
    assert mariadb.sql("SELECT COUNT(*) FROM orders;", "shop_copy").strip() == "500"

    for name in ("shop", "shop_copy"):
        hosting.run("db.drop", name=name).ok()


def test_a_failed_dump_leaves_the_previous_file_in_place(hosting: Hosting, mariadb: MariaDb, site_home: Path) -> None:
    hosting.run("db.create", name="fragile").ok()
    mariadb.sql("CREATE TABLE t (n INT); CREATE VIEW v AS SELECT n FROM t;", "fragile")
    hosting.run("db.export", name="fragile", domain=SITE, path="fragile.sql").ok()
    before = (site_home / "fragile.sql").read_bytes()
    listing = sorted(p.name for p in site_home.iterdir())
    mariadb.sql("DROP TABLE t;", "fragile")  # the view now fails: so does the dump
    failed = hosting.run("db.export", name="fragile", domain=SITE, path="fragile.sql")
    assert failed.exit_code == 1 and "fragile.sql was not written" in failed.text
    assert (site_home / "fragile.sql").read_bytes() == before
    assert sorted(p.name for p in site_home.iterdir()) == listing  # no temporary file left
    hosting.run("db.drop", name="fragile").ok()
    (site_home / "fragile.sql").unlink()


GOOD_DUMP = """DROP TABLE IF EXISTS `orders`;
CREATE TABLE `orders` (id INT PRIMARY KEY, note TEXT);
INSERT INTO `orders` VALUES (10,'new');
CREATE TABLE `fresh` (n INT);
INSERT INTO `fresh` VALUES (1);
INSERT INTO `orders` VALUES (11,'newer');
"""


def contents(server: MariaDb, name: str) -> dict[str, str]:
    """Each table of the database with its rows (tab-separated, sorted)."""
    tables = server.sql("SHOW TABLES;", name).split()
    return {table: server.sql(f"SELECT * FROM `{table}` ORDER BY 1;", name) for table in tables}


def test_an_import_that_fails_half_way_leaves_the_database_as_it_was(
    hosting: Hosting, mariadb: MariaDb, site_home: Path
) -> None:
    hosting.run("db.create", name="atomic").ok()
    mariadb.sql("CREATE TABLE keep (n INT); INSERT INTO keep VALUES (1), (2);", "atomic")
    mariadb.sql("CREATE TABLE orders (id INT PRIMARY KEY, note TEXT); INSERT INTO orders VALUES (1, 'old');", "atomic")
    before = contents(mariadb, "atomic")
    broken = GOOD_DUMP.replace("INSERT INTO `orders` VALUES (11", "INSERT INTO orders VALUES (oops syntax;\n(11")
    (site_home / "broken.sql").write_text(broken)
    for drop_existing in (False, True):
        failed = hosting.run("db.import", name="atomic", domain=SITE, path="broken.sql", drop_existing=drop_existing)
        assert failed.exit_code == 1 and "nothing of it was imported" in failed.text
        assert "ERROR 1064" in failed.text  # the server's own words, with the line
        assert contents(mariadb, "atomic") == before
    assert not [name for name in databases(mariadb) if name.startswith("fleetdeck_")]  # the scratch is gone
    assert no_importer_left(mariadb)  # and so is the throwaway account the dump ran as

    (site_home / "good.sql").write_text(GOOD_DUMP)
    done = hosting.run("db.import", name="atomic", domain=SITE, path="good.sql").ok()
    assert "2 tables, 1 replaced or dropped, 1 kept" in done.text
    after = contents(mariadb, "atomic")
    assert after == {**before, "orders": "10\tnew\n11\tnewer\n", "fresh": "1\n"}
    hosting.run("db.import", name="atomic", domain=SITE, path="good.sql", drop_existing=True).ok()
    assert sorted(contents(mariadb, "atomic")) == ["fresh", "orders"]  # `keep` went with the rest
    assert not [name for name in databases(mariadb) if name.startswith("fleetdeck_")]
    assert no_importer_left(mariadb)
    hosting.run("db.drop", name="atomic").ok()
    for name in ("broken.sql", "good.sql"):
        (site_home / name).unlink()


def test_views_triggers_and_routines_are_made_again_in_the_database(
    hosting: Hosting, mariadb: MariaDb, site_home: Path
) -> None:
    hosting.run("db.create", name="objects").ok()
    mariadb.sql(
        "CREATE TABLE t (n INT); INSERT INTO t VALUES (1);"
        " CREATE VIEW v AS SELECT n FROM t; CREATE VIEW w AS SELECT n * 10 AS m FROM v;"
        " CREATE TRIGGER plus BEFORE INSERT ON t FOR EACH ROW SET NEW.n = NEW.n + 100;"
        " CREATE PROCEDURE counted() SELECT COUNT(*) FROM t;",
        "objects",
    )
    hosting.run("db.export", name="objects", domain=SITE, path="objects.sql").ok()
    hosting.run("db.create", name="objects_copy").ok()
    for _ in range(2):  # the second time they replace what the first one made
        done = hosting.run("db.import", name="objects_copy", domain=SITE, path="objects.sql").ok()
        assert "1 tables, 4 views, triggers, routines or events" in done.text
    assert mariadb.sql("SHOW FULL TABLES;", "objects_copy").split() == ["t", "BASE", "TABLE", "v", "VIEW", "w", "VIEW"]
    mariadb.sql("INSERT INTO t VALUES (2);", "objects_copy")  # the trigger adds 100
    # the views read the copy's table (the source's has one row), the procedure counts it
    assert mariadb.sql("SELECT m FROM w ORDER BY m;", "objects_copy").split() == ["10", "1020"]
    assert mariadb.sql("CALL counted();", "objects_copy").strip() == "2"
    assert not [name for name in databases(mariadb) if name.startswith("fleetdeck_")]
    for name in ("objects", "objects_copy"):
        hosting.run("db.drop", name=name).ok()
    (site_home / "objects.sql").unlink()


def test_an_import_stays_in_its_database_and_runs_no_client_command(
    hosting: Hosting, mariadb: MariaDb, site_home: Path
) -> None:
    hosting.run("db.create", name="target").ok()
    hosting.run("db.create", name="bystander").ok()
    touched = hosting.folder / f"touched-{uuid.uuid4().hex[:6]}"
    dumps = {
        "use.sql": "CREATE TABLE t (n INT);\nUSE `bystander`;\nCREATE TABLE intruder (n INT);\n",
        "databases.sql": "/*!40000 DROP DATABASE IF EXISTS `bystander`*/;\nCREATE TABLE t (n INT);\n",
        "shell.sql": f"CREATE TABLE t (n INT);\n\\! touch {touched}\n",
    }
    expected = {
        "use.sql": "leaves the database it is imported into ('USE `bystander`;')",
        "databases.sql": "leaves the database",
        "shell.sql": "Not allowed in the sandbox mode",
    }
    for name, text in dumps.items():
        (site_home / name).write_text(text)
        refused = hosting.run("db.import", name="target", domain=SITE, path=name)
        assert refused.exit_code == 1 and expected[name] in refused.text, refused.text
        (site_home / name).unlink()
    assert not touched.exists()
    assert mariadb.sql("SHOW TABLES;", "target") == "" and mariadb.sql("SHOW TABLES;", "bystander") == ""
    assert not [name for name in databases(mariadb) if name.startswith("fleetdeck_")]
    for name in ("target", "bystander"):
        hosting.run("db.drop", name=name).ok()


IMPORTERS = "SELECT User FROM mysql.user WHERE User LIKE 'fleetdeck\\_importer\\_%';"
IMPORTER_SESSIONS = "SELECT ID FROM information_schema.PROCESSLIST WHERE USER LIKE 'fleetdeck\\_importer\\_%';"


def no_importer_left(server: MariaDb) -> bool:
    """No throwaway import account, nor a session of one, is left on the server."""
    return server.sql(IMPORTERS) == "" and server.sql(IMPORTER_SESSIONS) == ""


def test_a_dump_runs_as_a_throwaway_account_confined_to_its_database(
    hosting: Hosting, mariadb: MariaDb, site_home: Path
) -> None:
    hosting.run("db.create", name="confined").ok()
    hosting.run("db.create", name="neighbour").ok()
    mariadb.sql("CREATE TABLE t (n INT) ENGINE=InnoDB; INSERT INTO t VALUES (1);", "confined")
    mariadb.sql("CREATE TABLE secrets (s TEXT); INSERT INTO secrets VALUES ('neighbour-secret');", "neighbour")
    hosting.run("db.user-create", user="victim", password=PASSWORD, host="127.0.0.1").ok()
    (hash_,) = mariadb.sql("SELECT authentication_string FROM mysql.user WHERE User = 'victim';").split()
    outfile = hosting.folder / f"outfile-{uuid.uuid4().hex[:6]}"
    creates = "CREATE TABLE made (n INT);\nINSERT INTO made VALUES (2);\n"
    dumps = {  # each as a dump that makes its tables (into the scratch) and as rows only (in place)
        "other-table": ("CREATE TABLE `neighbour`.`x` (n INT);\n", "CREATE command denied"),
        "other-rows": ("INSERT INTO neighbour.secrets VALUES ('planted');\n", "INSERT command denied"),
        "read-other": ("SELECT * FROM neighbour.secrets;\n", "SELECT command denied"),
        "read-accounts": ("SELECT * FROM mysql.global_priv;\n", "SELECT command denied"),
        "read-hashes": ("SELECT authentication_string FROM mysql.user;\n", "SELECT command denied"),
        "outfile": (f"SELECT 'written' INTO OUTFILE '{outfile}';\n", "FILE privilege"),
        "load-file": ("SELECT LOAD_FILE('/etc/passwd');\n", None),  # NULL without FILE: the import goes on
        "load-data": (
            "LOAD DATA INFILE '/etc/passwd' INTO TABLE made;\n",
            "Access denied for user 'fleetdeck_importer_",
        ),
        "data-directory": (f"CREATE TABLE far (n INT) DATA DIRECTORY = '{outfile}';\n", "folder of its own"),
        "grant": ("GRANT ALL PRIVILEGES ON *.* TO 'victim'@'127.0.0.1';\n", "denied"),
    }
    before = {name: contents(mariadb, name) for name in ("confined", "neighbour")}
    for name, (statement, refused_with) in dumps.items():
        for variant, text in (("tables", creates + statement), ("rows", "INSERT INTO `t` VALUES (2);\n" + statement)):
            if variant == "rows" and name in ("other-table", "load-data", "data-directory", "grant"):
                continue  # not rows only (it makes a table), or refused before it runs (it would commit)
            (site_home / "hostile.sql").write_text(text)
            run = hosting.run("db.import", name="confined", domain=SITE, path="hostile.sql")
            if refused_with is None:
                assert run.exit_code == 0 and "root:" not in run.text, run.text
                mariadb.sql("DROP TABLE IF EXISTS made; DELETE FROM t WHERE n = 2;", "confined")
            else:
                if (name, variant) == ("other-rows", "rows"):  # a dotted name: no table of the database
                    refused_with = "for tables database confined does not have: neighbour"
                assert run.exit_code == 1 and refused_with in run.text, (name, variant, run.text)
            assert "neighbour-secret" not in run.text and hash_ not in run.text and '"access"' not in run.text
            assert {name: contents(mariadb, name) for name in ("confined", "neighbour")} == before, (name, variant)
            assert not outfile.exists()
            assert no_importer_left(mariadb)
    assert "ALL PRIVILEGES" not in mariadb.sql("SHOW GRANTS FOR 'victim'@'127.0.0.1';")
    assert not [name for name in databases(mariadb) if name.startswith("fleetdeck_")]
    hosting.run("db.user-delete", user="victim", host="127.0.0.1").ok()
    for name in ("confined", "neighbour"):
        hosting.run("db.drop", name=name).ok()
    (site_home / "hostile.sql").unlink()


ROOT_ROUTINES = """CREATE TABLE t (n INT);
INSERT INTO t VALUES (1);
DELIMITER ;;
CREATE DEFINER=`root`@`localhost` PROCEDURE `peek`() SELECT COUNT(*) FROM mysql.global_priv ;;
/*!50003 CREATE*/ /*!50017 DEFINER=`root`@`localhost`*/ /*!50003 TRIGGER spy BEFORE INSERT ON t FOR EACH ROW
INSERT INTO neighbour.log VALUES (NEW.n) */;;
DELIMITER ;
/*!50001 CREATE ALGORITHM=UNDEFINED */
/*!50013 DEFINER=`root`@`localhost` SQL SECURITY DEFINER */
/*!50001 VIEW `accounts` AS SELECT User FROM mysql.global_priv */;
"""


def test_a_dump_with_root_as_definer_makes_objects_that_run_with_the_database_rights_only(
    hosting: Hosting, mariadb: MariaDb, site_home: Path
) -> None:
    hosting.run("db.create", name="defined").ok()
    hosting.run("db.create", name="neighbour").ok()
    mariadb.sql("CREATE TABLE log (n INT);", "neighbour")
    (site_home / "definer.sql").write_text(ROOT_ROUTINES)
    view = hosting.run("db.import", name="defined", domain=SITE, path="definer.sql")
    # the view reads mysql.* when it is made: neither the importer nor the database's role may
    assert view.exit_code == 1 and "denied to user 'fleetdeck_importer_" in view.text, view.text
    assert "for table `mysql`.`global_priv`" in view.text and "DEFINER=CURRENT_USER" in view.text  # rewritten
    assert no_importer_left(mariadb)

    (site_home / "definer.sql").write_text(ROOT_ROUTINES.split("/*!50001 CREATE ALGORITHM")[0])
    hosting.run("db.import", name="defined", domain=SITE, path="definer.sql").ok()
    definers = mariadb.sql(
        "SELECT DEFINER FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'defined' UNION ALL"
        " SELECT DEFINER FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'defined';"
    )
    assert [definer.rstrip("@") for definer in definers.split()] == ["fleetdeck_owner.defined"] * 2  # a role
    peek = mariadb.client("CALL peek();", database="defined")  # as root: the routine runs as its definer
    assert peek.returncode == 1 and "SELECT command denied" in peek.stderr, peek.stderr
    spied = mariadb.client("INSERT INTO t VALUES (5);", database="defined")  # the trigger, as its definer
    assert spied.returncode == 1 and "INSERT command denied" in spied.stderr, spied.stderr
    assert mariadb.sql("SELECT * FROM log;", "neighbour") == ""
    assert no_importer_left(mariadb)
    listed = [item["user"] for item in hosting.run("db.user-list").ok().result]
    assert "fleetdeck_owner.defined" not in listed  # a role, not an account

    hosting.run("db.drop", name="defined").ok()  # its owner role goes with it
    assert mariadb.sql("SELECT User FROM mysql.user WHERE User = 'fleetdeck_owner.defined';") == ""
    hosting.run("db.drop", name="neighbour").ok()
    (site_home / "definer.sql").unlink()


def sandboxed_clients() -> list[int]:
    """The live processes of the mariadb client run in sandbox mode (an import's)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"--sandbox" in (entry / "cmdline").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_the_import_client_runs_as_the_site_user_and_a_cancel_leaves_no_account_nor_session(
    hosting: Hosting, mariadb: MariaDb, site_home: Path
) -> None:
    hosting.run("db.create", name="slow").ok()
    (site_home / "slow.sql").write_text("CREATE TABLE t (n INT);\nSELECT SLEEP(600);\n")
    started = hosting.post("db.import", name="slow", domain=SITE, path="slow.sql")
    assert started.status_code == 201, started.text
    job_id = started.json()["id"]
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while "SLEEP" not in mariadb.sql("SELECT INFO FROM information_schema.PROCESSLIST;"):  # the dump is running
        assert time.monotonic() < deadline, "the import never reached its SELECT SLEEP"
        time.sleep(0.1)
    (client,) = sandboxed_clients()
    status = dict(line.split(":", 1) for line in Path(f"/proc/{client}/status").read_text().splitlines())
    account = pwd.getpwnam(SITE.replace(".", "-"))
    assert [int(status["Uid"].split()[0]), int(status["Gid"].split()[0])] == [account.pw_uid, account.pw_gid]
    assert {int(group) for group in status["Groups"].split()} == set(os.getgrouplist(account.pw_name, account.pw_gid))
    with hosting.http() as http:
        assert http.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    assert hosting.wait(job_id).job["status"] == "cancelled"
    assert no_importer_left(mariadb)
    assert not [name for name in databases(mariadb) if name.startswith("fleetdeck_")]
    assert mariadb.sql("SHOW TABLES;", "slow") == ""
    hosting.run("db.drop", name="slow").ok()
    (site_home / "slow.sql").unlink()


def dump_by_hand(server: MariaDb, into: Path, *args: str) -> None:
    """``mariadb-dump ARGS > INTO``, as a user would make a dump."""
    argv = ["mariadb-dump", *connection(MariaDbLayout(socket=str(server.socket))), *args]
    into.write_bytes(subprocess.run(argv, capture_output=True, check=True, timeout=60).stdout)


BLOG = (
    "CREATE TABLE authors (id INT PRIMARY KEY, name TEXT);"
    " CREATE TABLE posts (id INT PRIMARY KEY, author INT, title TEXT,"
    " CONSTRAINT posts_author_foreign FOREIGN KEY (author) REFERENCES authors (id));"
    " CREATE TABLE untouched (n INT);"
)


def test_a_data_only_dump_goes_into_the_existing_tables_all_or_nothing(
    hosting: Hosting, mariadb: MariaDb, site_home: Path
) -> None:
    for name in ("blog_src", "blog"):
        hosting.run("db.create", name=name).ok()
        mariadb.sql(BLOG, name)
    mariadb.sql(
        "INSERT INTO authors VALUES (2, 'b'), (3, 'c'); INSERT INTO posts VALUES (20, 2, 'x'), (21, 3, 'y');",
        "blog_src",
    )
    mariadb.sql(
        "INSERT INTO authors VALUES (1, 'a'); INSERT INTO posts VALUES (10, 1, 'w'); INSERT INTO untouched VALUES (7);",
        "blog",
    )
    dump_by_hand(mariadb, site_home / "rows.sql", "--no-create-info", "--skip-triggers", "blog_src")
    assert b"CREATE TABLE" not in (site_home / "rows.sql").read_bytes()

    done = hosting.run("db.import", name="blog", domain=SITE, path="rows.sql").ok()
    assert "rows.sql has rows only: they go into the tables of database blog" in done.stdout[0]
    assert "rows for 2 tables in one transaction" in done.text
    imported = {"authors": "1\ta\n2\tb\n3\tc\n", "posts": "10\t1\tw\n20\t2\tx\n21\t3\ty\n", "untouched": "7\n"}
    assert contents(mariadb, "blog") == imported  # the rows added to those there, the others kept
    orphan = mariadb.client("INSERT INTO posts VALUES (99, 99, 'z');", database="blog")
    assert orphan.returncode == 1 and "posts_author_foreign" in orphan.stderr  # the same tables, keys and all

    # post 21 is taken: the dump fails at its last row, after authors 2 and 3 went in; they go again
    mariadb.sql(
        "DELETE FROM posts WHERE id > 10; DELETE FROM authors WHERE id > 1; INSERT INTO posts VALUES (21, 1, 't');",
        "blog",
    )
    before = contents(mariadb, "blog")
    failed = hosting.run("db.import", name="blog", domain=SITE, path="rows.sql")
    assert (
        failed.exit_code == 1 and "Duplicate entry '21'" in failed.text and "nothing of it was imported" in failed.text
    )
    assert contents(mariadb, "blog") == before

    (site_home / "rows.sql.gz").write_bytes(gzip.compress((site_home / "rows.sql").read_bytes()))
    hosting.run("db.import", name="blog", domain=SITE, path="rows.sql.gz", drop_existing=True).ok()  # read twice
    assert contents(mariadb, "blog") == {"authors": "2\tb\n3\tc\n", "posts": "20\t2\tx\n21\t3\ty\n", "untouched": ""}
    assert not [name for name in databases(mariadb) if name.startswith("fleetdeck_")]  # no scratch database used
    for name in ("blog_src", "blog"):
        hosting.run("db.drop", name=name).ok()
    for file in ("rows.sql", "rows.sql.gz"):
        (site_home / file).unlink()


def test_a_data_only_dump_that_could_not_be_undone_is_refused_before_it_runs(
    hosting: Hosting, mariadb: MariaDb, site_home: Path
) -> None:
    hosting.run("db.create", name="notes").ok()
    mariadb.sql("CREATE TABLE notes (n INT); INSERT INTO notes VALUES (1);", "notes")
    mariadb.sql("CREATE TRIGGER plus BEFORE INSERT ON notes FOR EACH ROW SET NEW.n = NEW.n + 100;", "notes")
    dump_by_hand(
        mariadb, site_home / "with-trigger.sql", "--no-create-info", "notes"
    )  # mariadb-dump writes the triggers too
    mariadb.sql("CREATE TABLE plain (n INT) ENGINE=MyISAM; INSERT INTO plain VALUES (1);", "notes")
    dumps = {
        "with-trigger.sql": "would commit that transaction half-way ('/*!50003 CREATE*/",
        "myisam.sql": "cannot roll one back: plain (MyISAM)",
        "missing.sql": "for tables database notes does not have: gone",
    }
    (site_home / "myisam.sql").write_text("INSERT INTO `notes` VALUES (5);\nINSERT INTO `plain` VALUES (5);\n")
    (site_home / "missing.sql").write_text("INSERT INTO `notes` VALUES (5);\nINSERT INTO gone VALUES (5);\n")
    before = contents(mariadb, "notes")
    for name, expected in dumps.items():
        refused = hosting.run("db.import", name="notes", domain=SITE, path=name)
        assert refused.exit_code == 1 and expected in refused.text, refused.text
        assert contents(mariadb, "notes") == before
        (site_home / name).unlink()
    hosting.run("db.drop", name="notes").ok()


def test_foreign_keys_keep_their_names_and_point_at_the_database_after_an_import(
    hosting: Hosting, mariadb: MariaDb, site_home: Path
) -> None:
    hosting.run("db.create", name="keyed").ok()
    mariadb.sql(
        BLOG + " CREATE TABLE comments (id INT PRIMARY KEY, post INT,"
        " CONSTRAINT comments_post_foreign FOREIGN KEY (post) REFERENCES posts (id) ON DELETE CASCADE);"
        " INSERT INTO authors VALUES (1, 'a'); INSERT INTO posts VALUES (10, 1, 'w');"
        " INSERT INTO comments VALUES (100, 10);",
        "keyed",
    )
    dumps = {"all.sql": ["keyed"], "two.sql": ["keyed", "authors", "posts"], "one.sql": ["keyed", "posts"]}
    for file, args in dumps.items():
        dump_by_hand(mariadb, site_home / file, *args)
    before = contents(mariadb, "keyed")

    def works(sql: str) -> bool:
        return mariadb.client(sql, database="keyed").returncode == 0

    # all.sql brings the named keys again (a key's name is unique in its database); two.sql replaces
    # the tables that `comments`, kept, points at; one.sql makes `posts` point at a table it lacks
    for file in dumps:
        hosting.run("db.import", name="keyed", domain=SITE, path=file).ok()
        assert contents(mariadb, "keyed") == before
        create = {table: mariadb.sql(f"SHOW CREATE TABLE {table};", "keyed") for table in ("posts", "comments")}
        assert "REFERENCES `authors` (`id`)" in create["posts"], create
        assert "REFERENCES `posts` (`id`) ON DELETE CASCADE" in create["comments"], create
        assert not works("INSERT INTO posts VALUES (11, 9, 'orphan');")
        assert not works("INSERT INTO comments VALUES (101, 99);")
        assert works("INSERT INTO comments VALUES (101, 10); DELETE FROM comments WHERE id = 101;")
    assert not [name for name in databases(mariadb) if name.startswith("fleetdeck_")]
    hosting.run("db.drop", name="keyed").ok()
    for file in dumps:
        (site_home / file).unlink()


def test_a_foreign_key_that_cannot_be_pointed_back_says_the_tables_are_swapped_in(
    hosting: Hosting, mariadb: MariaDb, site_home: Path
) -> None:
    hosting.run("db.create", name="rekeyed").ok()
    mariadb.sql(
        "CREATE TABLE posts (id INT PRIMARY KEY); CREATE TABLE comments (id INT PRIMARY KEY, post INT,"
        " CONSTRAINT comments_post_foreign FOREIGN KEY (post) REFERENCES posts (id));",
        "rekeyed",
    )
    # the dump's `posts` has no key on `id`: the kept `comments` cannot point at it
    (site_home / "unkeyed.sql").write_text("CREATE TABLE posts (id VARCHAR(10));\nINSERT INTO posts VALUES ('x');\n")
    failed = hosting.run("db.import", name="rekeyed", domain=SITE, path="unkeyed.sql")
    assert failed.exit_code == 1 and "already in database rekeyed (swapped in)" in failed.text, failed.text
    assert "Missing index for constraint 'comments_post_foreign'" in failed.text
    assert mariadb.sql("SELECT * FROM posts;", "rekeyed") == "x\n"  # as the error says
    assert not [name for name in databases(mariadb) if name.startswith("fleetdeck_")]
    assert no_importer_left(mariadb)
    hosting.run("db.drop", name="rekeyed").ok()
    (site_home / "unkeyed.sql").unlink()


def test_a_server_that_does_not_answer_is_a_status(hosting: Hosting, mariadb: MariaDb) -> None:
    hosting.configure("mariadb", {**mariadb.layout(), "socket": str(mariadb.socket.with_name("gone.sock"))})
    try:
        status = hosting.run("db.status").ok().result
        assert status["running"] is False and "Can't connect" in status["error"]
        refused = hosting.run("db.list")
        assert refused.exit_code == 1 and "Can't connect" in refused.text
    finally:
        hosting.configure("mariadb", mariadb.layout())
    assert hosting.run("db.status").ok().result["running"] is True


def test_a_dump_stays_inside_the_site(hosting: Hosting, mariadb: MariaDb, site_home: Path) -> None:
    hosting.run("db.create", name="jailed").ok()
    outside = hosting.folder / "outside"
    outside.mkdir()
    (site_home / "escape").symlink_to(outside)
    try:
        written = hosting.run("db.export", name="jailed", domain=SITE, path="escape/x.sql")
        assert written.exit_code == 1 and "outside the scope" in written.text
        assert list(outside.iterdir()) == []
        (outside / "y.sql").write_text("CREATE TABLE stolen (n INT);")
        read = hosting.run("db.import", name="jailed", domain=SITE, path="escape/y.sql")
        assert read.exit_code == 1 and "outside the scope" in read.text
        assert mariadb.sql("SHOW TABLES;", "jailed") == ""
    finally:
        (site_home / "escape").unlink()
    missing = hosting.run("db.import", name="jailed", domain=SITE, path="backups/none.sql.gz")
    assert missing.exit_code == 1
    (site_home / "broken.sql.gz").write_bytes(b"not gzip at all")
    broken = hosting.run("db.import", name="jailed", domain=SITE, path="broken.sql.gz")
    assert broken.exit_code == 1 and "gzip" in broken.text
    hosting.run("db.drop", name="jailed").ok()


# --- parsers and quoting --------------------------------------------------------------------


def test_rows_status_and_quoting() -> None:
    assert json_rows('{"name": "a", "n": 1}\n\n{"name": "b\\tc", "n": null}\n') == [
        {"name": "a", "n": 1},
        {"name": "b\tc", "n": None},
    ]
    assert parse_status("Uptime\t42\nThreads_connected\t3\nOdd\tx\n") == {
        "uptime": 42,
        "threads_connected": 3,
        "odd": "x",
    }
    assert literal("it's a \\ test") == "'it\\'s a \\\\ test'"
    assert grant_pattern("shop_a%") == "shop\\_a\\%"
    assert unescape_pattern(grant_pattern("shop_a%")) == "shop_a%"
    assert connection(MariaDbLayout(socket="/s.sock"))[0] == "--no-defaults"
    assert connection(MariaDbLayout(defaults_file="/etc/mysql/agent.cnf"))[0] == "--defaults-file=/etc/mysql/agent.cnf"
    assert scrub("near 'it\\'s secret' at\nline 1", ["it's secret"]) == "near '***' at line 1"


def test_definer_clauses_are_rewritten_where_mariadb_dump_writes_them_and_nowhere_else() -> None:
    dump = b"""CREATE DEFINER=`root`@`localhost` PROCEDURE `p`()
/*!50003 CREATE*/ /*!50017 DEFINER=`root`@`localhost`*/ /*!50003 TRIGGER tr BEFORE INSERT ON t
/*!50013 DEFINER=`root`@`localhost` SQL SECURITY DEFINER */
/*!50001 CREATE ALGORITHM=UNDEFINED DEFINER=`fleetdeck_owner.x` SQL SECURITY DEFINER VIEW `v` AS select 1 */;
/*!50106 CREATE*/ /*!50117 DEFINER='admin'@'%'*/ /*!50106 EVENT `e` ON SCHEDULE EVERY 1 DAY DO SELECT 1 */ ;;
CREATE OR REPLACE DEFINER = root@localhost FUNCTION f() RETURNS INT RETURN 1;
CREATE DEFINER="admin"@"localhost" PROCEDURE `q`() SELECT 1;
CREATE DEFINER='o''admin'@'%' FUNCTION g() RETURNS INT RETURN 1;
INSERT INTO `posts` VALUES (1,'CREATE DEFINER=`root`@`localhost` PROCEDURE');
"""
    rewritten = DEFINER_CLAUSE.sub(rb"\1DEFINER=CURRENT_ROLE", dump).decode()
    assert rewritten.count("DEFINER=CURRENT_ROLE") == 8 and "root`@`localhost` PROCEDURE')" in rewritten
    assert "admin" not in rewritten and "fleetdeck_owner.x" not in rewritten
    assert "/*!50003 CREATE*/ /*!50017 DEFINER=CURRENT_ROLE*/ /*!50003 TRIGGER" in rewritten
