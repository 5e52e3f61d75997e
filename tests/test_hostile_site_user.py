"""The hostile site user against every job kind that reads or writes inside a site (or a file a
site's user can write): the kind runs as a job of a real root agent, on a hosting server of this
module's own, while the site's user has planted a symbolic link, a hard link or a FIFO at each
path the kind touches, or races a folder-for-link exchange (`tests.helpers.hostile`).

Each attack asserts that the kind was not led out of the site: the canaries outside it are as
they were (content, mode, owner, times: a read changes the access time; and no new name beside
them), no canary token shows in the site's tree, in the job's output or in its result, the job
ended (a FIFO it waits on is found at once: its task sleeps in ``wait_for_partner``) with 0 or a
clean failure (1, 2, 69, 78 and one stderr line, no traceback in the agent's log).

`SCENARIOS` is the list of kinds that touch a site, as data: the paths each touches (relative to
the site's folder), who opens them and the arguments that run it; `NOT_IN_A_SITE` says, for every
other kind with a handler, why it touches no file a site user can write. A test fails when a kind
is in neither, and another when ``docs/security.md``'s table and this list disagree.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.jobs.kinds import all_kinds
from agent.jobs.toolkit.host import php_fpm_versions
from agent.jobs.toolkit.proc import read_pid
from tests.conftest import Stack
from tests.helpers.clamd import CLAMD, EICAR, eicar_database, run_clamd
from tests.helpers.hostile import (
    Canaries,
    Racer,
    SiteUser,
    fifos_under,
    leaks_in_tree,
    make_parents,
    plant_fifo,
    plant_hardlink,
    plant_symlink,
    release_fifo,
    remove_entry,
    stash_aside,
    waiting_on_a_fifo,
)
from tests.helpers.hosting import JobRun, remove_site_users, start_hosting
from tests.helpers.mariadb import mariadb_installed, run_mariadb
from tests.helpers.pebble import pebble_installed, run_pebble
from tests.helpers.postgres_server import bin_dir, start_postgres
from tests.helpers.supervisor import SUPERVISORD, start_supervisor
from tests.helpers.web_services import stop_nginx, stop_php_fpm

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the site users' attacks need root to set up")

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "security.md"
CLEAN_EXITS = {0, 1, 2, 69, 78}
ENDED = {"succeeded", "failed", "cancelled", "interrupted"}
JOB_BOUND_S = 120.0  # a backstop: a FIFO wait is seen at once, this catches any other hang
RELEASE_GRACE_S = 20.0  # after its FIFOs are released, a job still running is cancelled
POLL_S = 0.05
UNHANDLED = re.compile(r"^error: \S+ failed: \w+: ")  # run_kind's line for an exception no handler expected

# Who opens a touched path: the agent's handler itself (as root), a root daemon from the
# configuration the kind renders, or commands the agent runs as the site's own user.
AGENT, SITE_USER = "agent (root)", "site user"


@dataclass(frozen=True)
class Touch:
    """A path a kind touches, relative to the site's folder (``{name}`` fields come from the
    site's state); a folder it walks, or a file it reads or (`writes`) writes or creates."""

    path: str
    folder: bool = False
    writes: bool = False
    by: str = AGENT


# Where the web server's logs were before they left the site for root's own folder: attacked still,
# so that nothing of root's opens them again.
WAS_NGINX = "none now (nginx's root master, before its logs left the site)"
WAS_FPM = "none now (PHP-FPM workers as the site user, before)"  # the pool's error_log: never its master
NGINX_LOGS = (Touch("logs/access.log", writes=True, by=WAS_NGINX), Touch("logs/error.log", writes=True, by=WAS_NGINX))
PHP_LOGS = (*NGINX_LOGS, Touch("logs/php-error.log", writes=True, by=WAS_FPM))


@dataclass
class Site:
    domain: str
    home: Path
    user: SiteUser
    profile: str
    state: dict[str, Any] = field(default_factory=dict)

    def path(self, touch: Touch) -> Path:
        return self.home / touch.path.format(**self.state)


Args = Callable[["Hostile", Site], dict[str, Any]]
Step = Callable[["Hostile", Site], None]


@dataclass(frozen=True)
class Scenario:
    touches: tuple[Touch, ...]
    args: Args
    boundary: str  # what keeps the kind inside the site (the table's column)
    profile: str = "static"
    needs: tuple[str, ...] = ()  # services: mariadb, postgres, supervisor, pebble, clamav
    prepare: Step | None = None  # once, on the kind's site
    before: Step | None = None  # before each attack (what a run used up)
    after: Step | None = None  # after each attack (what a run made outside the site's folder)
    canary: str = "{token}\n"  # the canary file's text (a format the kind parses shows the token)
    serves: bool = False  # nginx serves the rendered block: two requests make it write its logs
    fresh_site: bool = False  # the kind removes its site: a new one for each attack

    def variants(self) -> list[str]:
        files = [t for t in self.touches if not t.folder]
        found = ["symlink"]
        if files:
            found += ["hardlink", "fifo"]
        if race_folders(self.touches):
            found.append("race")
        return found


def race_folders(touches: tuple[Touch, ...]) -> list[str]:
    """The folders a race exchanges: the folders touched and those holding a touched file (not
    the site's folder itself: its user cannot rename it, the home is root's)."""
    folders = [t.path if t.folder else os.path.dirname(t.path) for t in touches]
    return list(dict.fromkeys(f for f in folders if f))


# --- what each kind needs ----------------------------------------------------------------------


def fresh(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(3)}"


def put(site: Site, rel: str, data: bytes, mode: int = 0o644) -> Path:
    """A file of the site's user (as an upload would make it)."""
    path = site.home / rel
    make_parents(site.user, path.parent, site.home)
    path.write_bytes(data)
    path.chmod(mode)
    site.user.chown(path)
    return path


def prepare_certificate_files(h: Hostile, s: Site) -> None:
    folder = h.hosting.folder / fresh("pem-")
    folder.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "2", "-subj", f"/CN={s.domain}", "-keyout", str(folder / "key.pem"),
         "-out", str(folder / "cert.pem")],
        check=True, capture_output=True,
    )  # fmt: skip
    put(s, "certs/cert.pem", (folder / "cert.pem").read_bytes())
    put(s, "certs/key.pem", (folder / "key.pem").read_bytes(), 0o600)
    put(s, "certs/chain.pem", (folder / "cert.pem").read_bytes())
    shutil.rmtree(folder)


def issue(h: Hostile, s: Site) -> None:
    if not (h.hosting.state / "ssl" / s.home.name).exists():
        h.hosting.run("ssl.issue", domain=s.domain).ok()


def install_certificate(h: Hostile, s: Site) -> None:
    """A certificate from the site's files (no CA to ask: quicker than `issue`)."""
    if "certificate" not in s.state:
        prepare_certificate_files(h, s)
        s.state["certificate"] = True
    args = {"cert_path": "certs/cert.pem", "key_path": "certs/key.pem"}
    h.hosting.run("ssl.install", domain=s.domain, **args).ok()


def prepare_origin(h: Hostile, s: Site) -> None:
    """A git origin of the site's user's, with one commit on main (git reads a local repository
    only as its owner)."""
    folder = h.hosting.folder / fresh("git-")
    work, bare = folder / "work", folder / "origin.git"
    work.mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.test"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(work)], check=True)
    (work / "index.html").write_text("first\n")
    subprocess.run([*git, "-C", str(work), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-q", "-m", "first"], check=True)
    subprocess.run([*git, "clone", "-q", "--bare", str(work), str(bare)], check=True)
    for path in [folder, *folder.rglob("*")]:
        s.user.chown(path)
    s.state["origin"] = f"file://{bare}"


def prepare_deploy(releases: int) -> Step:
    def prepare(h: Hostile, s: Site) -> None:
        prepare_origin(h, s)
        h.hosting.run("deploy.init", domain=s.domain, repo=s.state["origin"]).ok()
        made = [
            json.loads(h.hosting.run("deploy.run", domain=s.domain).ok().stdout[-1])["release"] for _ in range(releases)
        ]
        s.state["release"] = made[0]
        s.state["releases"] = made

    return prepare


def other_release(h: Hostile, s: Site) -> dict[str, Any]:
    current = os.path.basename(os.readlink(s.home / "current"))
    return {"domain": s.domain, "release": next(r for r in s.state["releases"] if r != current)}


def prepare_database(h: Hostile, s: Site) -> None:
    s.state["db"] = fresh("hdb")
    h.hosting.run("db.create", name=s.state["db"]).ok()
    put(s, "backups/in.sql", b"CREATE TABLE t (id INT);\nINSERT INTO t VALUES (1);\n")


def prepare_pg(h: Hostile, s: Site) -> None:
    s.state["db"] = fresh("hpg")
    h.hosting.run("pg.create", name=s.state["db"]).ok()
    put(s, "backups/in.sql", b"CREATE TABLE IF NOT EXISTS t (id INT);\nINSERT INTO t VALUES (1);\n")


def prepare_keys(h: Hostile, s: Site) -> None:
    h.hosting.run("user.ssh-key-add", username=s.user.name, key=h.ssh_key).ok()
    s.state["fingerprint"] = h.ssh_fingerprint


def prepare_app_folder(h: Hostile, s: Site) -> None:
    make_parents(s.user, s.home / "app", s.home)
    s.state["daemon"] = fresh("hd")


def put_rotated_log(h: Hostile, s: Site) -> None:
    old = put(s, "logs/old.log.1", b"an old line\n")
    os.utime(old, (time.time() - 3 * 86400,) * 2)


def put_infected(h: Hostile, s: Site) -> None:
    put(s, "public_html/infected.php", EICAR)


def add_alias(h: Hostile, s: Site) -> None:
    s.state["alias"] = f"{fresh('alias')}.test"
    h.hosting.run("site.alias-add", domain=s.domain, alias=s.state["alias"]).ok()


def set_env(h: Hostile, s: Site) -> None:
    h.hosting.run("site.env-set", domain=s.domain, key="HOSTILE", value=fresh("value-")).ok()


def add_cron_entry(h: Hostile, s: Site) -> None:
    s.state["entry"] = h.cron_entry(s)


def drop_clone(h: Hostile, s: Site) -> None:
    target = s.state.pop("clone", None)
    if target is not None and h.hosting.run("site.inspect", domain=target).exit_code == 0:
        h.hosting.run("site.delete", domain=target).ok()


def other_php(h: Hostile, s: Site) -> dict[str, Any]:
    current = h.hosting.run("site.inspect", domain=s.domain).ok().result["php"]
    return {"domain": s.domain, "version": next(v for v in h.php_versions if v != current)}


def site_php(h: Hostile, s: Site) -> str:
    return str(h.hosting.run("site.inspect", domain=s.domain).ok().result["php"])


def count(s: Site, start: int) -> int:
    """A value the site's setting has not had yet (so the kind changes it, and renders it again)."""
    s.state["count"] = s.state.get("count", 0) + 1
    return start + int(s.state["count"])


def other_www(h: Hostile, s: Site) -> str:
    current = h.hosting.run("site.inspect", domain=s.domain).ok().result["www_redirect"]
    return "remove" if current == "add" else "add"


def clone_args(h: Hostile, s: Site) -> dict[str, Any]:
    s.state["clone"] = f"{fresh('clone')}.test"
    return {"domain": s.domain, "target": s.state["clone"]}


JSON_CANARY = '{{"commit": "{token}", "subject": "{token}", "branch": "{token}", "created_at": "{token}"}}\n'
KEY_CANARY = "{key} {token}\n"  # an authorized_keys line whose comment is the token
DOMAIN: Args = lambda h, s: {"domain": s.domain}  # noqa: E731
WALKED = (Touch("public_html", folder=True), Touch("public_html/index.html"))
LOGS = (Touch("logs/access.log"), Touch("logs/error.log"))
SSH = (Touch(".ssh", folder=True), Touch(".ssh/authorized_keys", writes=True))
SSH_READ = (Touch(".ssh", folder=True), Touch(".ssh/authorized_keys"))
RELEASES = (Touch("releases", folder=True, by=SITE_USER), Touch("current", writes=True, by=SITE_USER))
META = (Touch("releases", folder=True), Touch("deploy/releases/{release}.json"), Touch("current"))

JAIL = "jail descriptors (openat2 beneath the site, O_NOFOLLOW, O_NONBLOCK, foreign hard links refused)"
AS_USER = "runs as the site user (uid, gid, no other groups)"
WALK = "jail descriptors (a walk from directory descriptors, links never followed)"
KEYS = "descriptors from the home (O_NOFOLLOW, O_NONBLOCK), the user's own regular file only"
NGINX_ROOT = "nginx's root master opens the site's logs in root's own folder for it, nothing in the site"
LOG_READ = "root's log folder for the site, opened beneath it, no link followed, O_NONBLOCK"
LOGROTATE = "logrotate as root over root's own log folders; nothing in the site"
STREAMED = (
    "jail descriptors (a walk, links never followed, another user's hard links not read), each file's bytes"
    " streamed to clamd; hits moved out through descriptors (boundary.move_out)"
)
COPYTREE = "boundary.copy_tree: descriptors, links copied as links, another user's hard links left out"
RMTREE = "account locked, its processes stopped, then boundary.remove_tree through descriptors"

SCENARIOS: dict[str, Scenario] = {
    # -- the site's files, read by the agent itself
    "site.inspect": Scenario(WALKED, DOMAIN, WALK),
    "site.list": Scenario(WALKED, lambda h, s: {}, WALK),
    "site.logs": Scenario(LOGS, lambda h, s: {"domain": s.domain, "lines": 10, "log": "both"}, LOG_READ),
    "storage.usage": Scenario(WALKED, lambda h, s: {"domain": s.domain, "path": "public_html", "depth": 2}, WALK),
    "storage.largest": Scenario(WALKED, lambda h, s: {"domain": s.domain, "path": "public_html"}, WALK),
    "storage.cleanup": Scenario(
        (Touch("logs", folder=True), Touch("logs/old.log.1", writes=True)),
        lambda h, s: {"targets": ["logs"], "older_than_days": 1},
        WALK,
        before=put_rotated_log,
    ),
    "logs.tail": Scenario(LOGS[:1], lambda h, s: {"domain": s.domain, "log": "access", "lines": 10}, LOG_READ),
    "logs.search": Scenario(LOGS[:1], lambda h, s: {"domain": s.domain, "text": "GET", "log": "access"}, LOG_READ),
    "logs.list": Scenario(LOGS, DOMAIN, JAIL),
    "logs.rotate": Scenario(
        (Touch("logs/access.log", writes=True, by=SITE_USER), Touch("logs/error.log", writes=True, by=SITE_USER)),
        DOMAIN,
        LOGROTATE,
    ),
    "security.scan": Scenario(
        (Touch("public_html", folder=True), Touch("public_html/infected.php", writes=True)),
        lambda h, s: {"domain": s.domain, "quarantine": True},
        STREAMED,
        needs=("clamav",),
        before=put_infected,
    ),
    "site.clone": Scenario((*WALKED, Touch("logs", folder=True)), clone_args, COPYTREE, after=drop_clone),
    "site.delete": Scenario((*WALKED, Touch("logs", folder=True)), DOMAIN, RMTREE, fresh_site=True),
    "ssl.install": Scenario(
        (Touch("certs/cert.pem"), Touch("certs/key.pem"), Touch("certs/chain.pem"), *NGINX_LOGS),
        lambda h, s: {
            "domain": s.domain,
            "cert_path": "certs/cert.pem",
            "key_path": "certs/key.pem",
            "chain_path": "certs/chain.pem",
        },
        JAIL,
        prepare=prepare_certificate_files,
        serves=True,
    ),
    # -- files the agent writes into the site (a temporary file in the jail, renamed into place)
    "db.export": Scenario(
        (Touch("backups/out.sql", writes=True),),
        lambda h, s: {"name": s.state["db"], "domain": s.domain, "path": "backups/out.sql"},
        JAIL,
        needs=("mariadb",),
        prepare=prepare_database,
    ),
    "db.import": Scenario(
        (Touch("backups/in.sql"),),
        lambda h, s: {"name": s.state["db"], "domain": s.domain, "path": "backups/in.sql"},
        JAIL,
        needs=("mariadb",),
        prepare=prepare_database,
    ),
    "pg.dump": Scenario(
        (Touch("backups/pg.sql", writes=True),),
        lambda h, s: {"name": s.state["db"], "domain": s.domain, "path": "backups/pg.sql"},
        JAIL,
        needs=("postgres",),
        prepare=prepare_pg,
    ),
    "pg.restore": Scenario(
        (Touch("backups/in.sql"),),
        lambda h, s: {"name": s.state["db"], "domain": s.domain, "path": "backups/in.sql"},
        JAIL,
        needs=("postgres",),
        prepare=prepare_pg,
    ),
    # -- a site user's ~/.ssh (the site's folder is its home)
    "user.ssh-key-add": Scenario(
        SSH, lambda h, s: {"username": s.user.name, "key": h.ssh_key}, KEYS, prepare=prepare_keys, canary=KEY_CANARY
    ),
    "user.ssh-key-remove": Scenario(
        SSH,
        lambda h, s: {"username": s.user.name, "fingerprint": s.state["fingerprint"]},
        KEYS,
        prepare=prepare_keys,
        canary=KEY_CANARY,
    ),
    "user.ssh-key-list": Scenario(
        SSH_READ, lambda h, s: {"username": s.user.name}, KEYS, prepare=prepare_keys, canary=KEY_CANARY
    ),
    "user.key-audit": Scenario(
        SSH_READ, lambda h, s: {"username": s.user.name}, KEYS, prepare=prepare_keys, canary=KEY_CANARY
    ),
    "user.inspect": Scenario(
        SSH_READ, lambda h, s: {"username": s.user.name}, KEYS, prepare=prepare_keys, canary=KEY_CANARY
    ),
    # -- commands run as the site's user (cron, deploy); the agent reads through the jail
    "cron.run": Scenario(
        (Touch("logs/cron-{entry}.history", writes=True, by=SITE_USER),),
        lambda h, s: {"id": s.state["entry"]},
        AS_USER,
        prepare=add_cron_entry,
    ),
    "cron.history": Scenario(
        (Touch("logs/cron-{entry}.history"),), lambda h, s: {"id": s.state["entry"]}, JAIL, prepare=add_cron_entry
    ),
    "cron.delete": Scenario(
        (Touch("logs/cron-{entry}.history", writes=True, by=SITE_USER),),
        lambda h, s: {"id": s.state["entry"]},
        AS_USER,
        before=add_cron_entry,
    ),
    "daemon.create": Scenario(
        (Touch("app", folder=True),),
        lambda h, s: {"name": s.state["daemon"], "domain": s.domain, "command": "sleep 600", "directory": "app"},
        "the folder is resolved and checked inside the site; supervisord enters it as the site user",
        needs=("supervisor",),
        prepare=prepare_app_folder,
    ),
    "deploy.init": Scenario(
        (Touch("deploy", folder=True, writes=True, by=SITE_USER),),
        lambda h, s: {"domain": s.domain, "repo": s.state["origin"]},
        AS_USER,
        prepare=prepare_origin,
    ),
    "deploy.run": Scenario(RELEASES, DOMAIN, AS_USER, prepare=prepare_deploy(1)),
    "deploy.git": Scenario(
        RELEASES, lambda h, s: {"domain": s.domain, "repo": s.state["origin"]}, AS_USER, prepare=prepare_deploy(1)
    ),
    "deploy.rollback": Scenario(RELEASES, other_release, AS_USER, prepare=prepare_deploy(2)),
    "deploy.prune": Scenario(
        RELEASES, lambda h, s: {"domain": s.domain, "keep": 1}, AS_USER, prepare=prepare_deploy(2)
    ),
    "deploy.list": Scenario(META, DOMAIN, JAIL, prepare=prepare_deploy(1), canary=JSON_CANARY),
    "deploy.inspect": Scenario(
        META,
        lambda h, s: {"domain": s.domain, "release": s.state["release"]},
        JAIL,
        prepare=prepare_deploy(1),
        canary=JSON_CANARY,
    ),
    "deploy.key-show": Scenario(
        (Touch("deploy", folder=True), Touch("deploy/id_ed25519.pub")), DOMAIN, JAIL, canary=KEY_CANARY
    ),
    # -- kinds whose only way into the site is the server block they render (nginx's logs)
    "site.create": Scenario(
        NGINX_LOGS, lambda h, s: {"domain": s.domain, "profile": "static"}, NGINX_ROOT, serves=True
    ),
    "site.enable": Scenario(NGINX_LOGS, DOMAIN, NGINX_ROOT, serves=True),
    "site.disable": Scenario(NGINX_LOGS, DOMAIN, NGINX_ROOT, serves=True),
    "site.alias-add": Scenario(
        NGINX_LOGS, lambda h, s: {"domain": s.domain, "alias": f"{fresh('alias')}.test"}, NGINX_ROOT, serves=True
    ),
    "site.alias-remove": Scenario(
        NGINX_LOGS,
        lambda h, s: {"domain": s.domain, "alias": s.state["alias"]},
        NGINX_ROOT,
        before=add_alias,
        serves=True,
    ),
    "site.redirect-set": Scenario(
        NGINX_LOGS,
        lambda h, s: {"domain": s.domain, "www": other_www(h, s)},
        NGINX_ROOT,
        serves=True,
    ),
    "site.limits": Scenario(
        NGINX_LOGS,
        lambda h, s: {"domain": s.domain, "upload_limit": f"{count(s, 2)}M"},
        NGINX_ROOT,
        serves=True,
    ),
    "site.env-set": Scenario(
        PHP_LOGS,
        lambda h, s: {"domain": s.domain, "key": "HOSTILE", "value": fresh("value-")},
        NGINX_ROOT,
        profile="php",
        serves=True,
    ),
    "site.env-unset": Scenario(
        PHP_LOGS,
        lambda h, s: {"domain": s.domain, "key": "HOSTILE"},
        NGINX_ROOT,
        profile="php",
        before=set_env,
        serves=True,
    ),
    "php.set": Scenario(PHP_LOGS, other_php, NGINX_ROOT, profile="php", needs=("php2",), serves=True),
    "php.pool-set": Scenario(
        PHP_LOGS,
        lambda h, s: {"domain": s.domain, "pm": "ondemand", "max_children": count(s, 2)},
        NGINX_ROOT,
        profile="php",
        serves=True,
    ),
    "php.ini-set": Scenario(
        PHP_LOGS,
        lambda h, s: {
            "domain": s.domain,
            "version": site_php(h, s),
            "key": "max_execution_time",
            "value": str(count(s, 30)),
        },
        NGINX_ROOT,
        profile="php",
        serves=True,
    ),
    "ssl.issue": Scenario(NGINX_LOGS, DOMAIN, NGINX_ROOT, needs=("pebble",), serves=True),
    "ssl.renew": Scenario(
        NGINX_LOGS,
        lambda h, s: {"domain": s.domain, "force": True},
        NGINX_ROOT,
        needs=("pebble",),
        prepare=issue,
        serves=True,
    ),
    "ssl.revoke": Scenario(NGINX_LOGS, DOMAIN, NGINX_ROOT, needs=("pebble",), before=issue, serves=True),
    "ssl.delete": Scenario(NGINX_LOGS, DOMAIN, NGINX_ROOT, before=install_certificate, serves=True),
}

# Every other kind with a handler, and why it touches no file a site's user can write.
_REGISTRY = "the agent's registry and root-owned configuration only (the pool, the server block)"
_SERVICE = "drives a system service or tool with root-owned configuration; names no site"
_DATABASE = "statements on the database server; no file"
_STATE = "the agent's own state folder (root's, 0700)"
_LOGIN_USERS = "login users only (a site's user is refused); the system's own tools"
_CRONTAB = "the record in the agent's state and the user's crontab through crontab -u; cron runs the line as the user"
_SUPERVISOR = "supervisor's root-owned configuration and logs; the program runs as the site user"
_ROUTE = "load balancers: the node's own root-owned configuration"
_CACHE = "a cache server through its socket or port and root-owned configuration; a domain only names a PHP version"
NOT_IN_A_SITE: dict[str, str] = {
    "site.env-list": _REGISTRY,
    "php.ini-get": _REGISTRY,
    "php.opcache-reset": "a root-owned script run through the site's pool (its socket is in the FPM's run folder)",
    "ssl.auto-renew": _STATE,
    "ssl.inspect": _STATE,
    "ssl.list": _STATE,
    "cron.add": _CRONTAB,
    "cron.edit": _CRONTAB,
    "cron.list": _CRONTAB,
    "cron.pause": _CRONTAB,
    "cron.resume": _CRONTAB,
    "daemon.delete": _SUPERVISOR,
    "daemon.list": _SUPERVISOR,
    "daemon.logs": _SUPERVISOR,
    "daemon.restart": _SUPERVISOR,
    "daemon.start": _SUPERVISOR,
    "daemon.status": _SUPERVISOR,
    "daemon.stop": _SUPERVISOR,
    "security.scan-report": _STATE,
    "security.status": _STATE,
    "logs.journal": _SERVICE,
    "storage.disks": _SERVICE,
    "storage.inodes": _SERVICE,
    "user.create": _LOGIN_USERS,
    "user.delete": _LOGIN_USERS,
    "user.list": "the account database (no key file is read)",
    "user.lock": "the account database (passwd, usermod)",
    "user.unlock": "the account database (passwd, usermod)",
    "user.password-set": "the account database (chpasswd)",
    "user.sudo-set": "a root-owned sudoers drop-in (checked by visudo)",
    "php.ini-global-set": "the version's root-owned fleetdeck ini (checked by php-fpm -t); names no site",
    **{k: _DATABASE for k in ("db.create", "db.drop", "db.list", "db.size", "db.status", "db.table-list")},
    **{k: _DATABASE for k in ("db.user-create", "db.user-delete", "db.user-grant", "db.user-list")},
    **{k: _DATABASE for k in ("db.user-password", "db.user-revoke")},
    **{k: _DATABASE for k in ("pg.create", "pg.drop", "pg.extension-add", "pg.grant", "pg.list", "pg.revoke")},
    **{k: _DATABASE for k in ("pg.size", "pg.status", "pg.table-list", "pg.user-create", "pg.user-delete")},
    **{k: _DATABASE for k in ("pg.user-list", "pg.user-password", "pg.vacuum")},
    **{k: "pg_hba.conf, root's (or the server's)" for k in ("pg.allow-add", "pg.allow-list", "pg.allow-remove")},
    **{k: _SERVICE for k in ("php.extension-install", "php.fpm-status", "php.install", "php.module-disable")},
    **{k: _SERVICE for k in ("php.module-enable", "php.module-list", "php.reload", "php.restart")},
    **{k: _SERVICE for k in ("php.uninstall", "php.versions")},
    **{k: _SERVICE for k in ("dns.check", "dns.dnssec-set", "dns.lookup", "dns.record-add", "dns.record-delete")},
    **{k: _SERVICE for k in ("dns.record-list", "dns.zone-add", "dns.zone-delete", "dns.zone-list", "dns.zone-show")},
    **{k: _ROUTE for k in ("lb.apply", "lb.remove", "lb.status")},
    **{k: _CACHE for k in ("cache.config-set", "cache.disable", "cache.enable", "cache.flush", "cache.status")},
    **{k: _STATE for k in ("metrics.alert-delete", "metrics.alert-list", "metrics.alert-set", "metrics.history")},
    "metrics.get": "the kernel's counters and the home's file system (statvfs)",
    **{k: _SERVICE for k in ("security.fail2ban-ban", "security.fail2ban-jail-set", "security.fail2ban-status")},
    **{k: _SERVICE for k in ("security.fail2ban-unban", "security.firewall-allow", "security.firewall-delete")},
    **{k: _SERVICE for k in ("security.firewall-deny", "security.firewall-disable", "security.firewall-enable")},
    **{k: _SERVICE for k in ("security.firewall-list", "security.ssh-set")},
    **{k: _SERVICE for k in ("service.disable", "service.enable", "service.list", "service.logs", "service.reload")},
    **{k: _SERVICE for k in ("service.restart", "service.start", "service.status", "service.stop")},
    **{k: _SERVICE for k in ("system.cache-drop", "system.hostname-set", "system.info", "system.locale-set")},
    **{k: _SERVICE for k in ("system.ntp-sync", "system.processes", "system.reboot", "system.swap-set")},
    "system.timezone-set": _SERVICE,
    **{k: _SERVICE for k in ("updates.apply", "updates.auto-set", "updates.history", "updates.hold", "updates.list")},
    **{k: _SERVICE for k in ("updates.security", "updates.status", "updates.unhold")},
}

# Attacks that get through by design, each a stated limit (docs/security.md): an xfail
# that fails the day the attack is stopped.
KNOWN_LIMITS: dict[tuple[str, str], str] = {}


class LedOut(AssertionError):
    """The verdict of an attack that got through (what a known limit's xfail expects; any other
    error of the harness still fails the test)."""


def attack_params() -> list[Any]:
    params = []
    for kind, scenario in SCENARIOS.items():
        for variant in scenario.variants():
            marks: list[pytest.MarkDecorator] = []
            if (kind, variant) in KNOWN_LIMITS:
                marks.append(pytest.mark.xfail(strict=True, raises=LedOut, reason=KNOWN_LIMITS[kind, variant]))
            params.append(pytest.param(kind, variant, id=f"{kind}-{variant}", marks=marks))
    return params


# --- the module's hosting server -----------------------------------------------------------------


@dataclass
class Outcome:
    run: JobRun
    hung: list[str]
    log: str
    seconds: float


class Hostile:
    """The module's hosting server, its services (started when a kind first needs them) and a
    site per kind."""

    def __init__(self, stack: Stack, folder: Path) -> None:
        self.hosting = start_hosting(stack, folder)
        self.exits = contextlib.ExitStack()
        self.outside = folder / "outside"  # the canaries: root's, on the sites' file system
        self.stash = folder / "stash"  # what a plant replaced, kept until it is put back
        for made in (self.outside, self.stash):
            made.mkdir(mode=0o700)
        var_log = folder / "var-log"  # storage.cleanup's system logs: not the machine's
        var_log.mkdir()
        self.hosting.configure("system", {"log_dir": str(var_log)})
        self.sites: dict[str, Site] = {}
        self.started: dict[str, Any] = {}
        self.php_versions = [v for v in php_fpm_versions() if v in self.hosting.php_versions]
        keys = folder / "keys"
        keys.mkdir()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "k")], check=True)
        self.ssh_key = (keys / "k.pub").read_text().strip()
        listed = subprocess.run(["ssh-keygen", "-l", "-f", str(keys / "k.pub")], capture_output=True, text=True)
        self.ssh_fingerprint = listed.stdout.split()[1]

    # -- services

    def need(self, service: str) -> None:
        if service in self.started:
            return
        folder = self.hosting.folder
        if service == "mariadb":
            if not mariadb_installed():
                pytest.skip("needs mariadb-server and mariadb-client")
            server = self.exits.enter_context(run_mariadb(folder / "mariadb"))
            self.hosting.configure("mariadb", server.layout())
        elif service == "postgres":
            if bin_dir() is None:
                pytest.skip("needs PostgreSQL")
            server = start_postgres(folder / "postgres")
            self.exits.callback(server.stop)
            self.hosting.configure("postgres", server.layout())
        elif service == "supervisor":
            if SUPERVISORD is None:
                pytest.skip("needs supervisor (Debian package supervisor)")
            server = start_supervisor(folder / "supervisor")
            self.exits.callback(server.stop)
            self.hosting.configure("supervisor", server.layout())
        elif service == "pebble":
            if not pebble_installed():
                pytest.skip("pebble is not installed (Debian package: pebble)")
            assert self.hosting.nginx is not None
            (folder / "pebble").mkdir()
            server = self.exits.enter_context(run_pebble(folder / "pebble", http_port=self.hosting.nginx.port))
            self.hosting.configure("acme", {"directory_url": server.directory_url, "ca_bundle": str(server.ca_bundle)})
        elif service == "clamav":
            if CLAMD is None:
                pytest.skip("needs clamd (Debian package clamav-daemon)")
            (folder / "clamav").mkdir()
            database = eicar_database(folder / "clamav" / "db")
            server = self.exits.enter_context(run_clamd(folder / "clamav" / "clamd", database))
            self.hosting.configure("clamav", server.layout())
        elif service == "php2":
            if len(self.php_versions) < 2:
                pytest.skip("php.set needs two PHP-FPM versions (scripts/test installs 7.4 beside 8.2)")
            server = self.php_versions
        else:
            raise AssertionError(f"no such service {service}")
        self.started[service] = server

    def watched(self) -> list[int]:
        """The processes whose tasks may wait on a planted FIFO: the agent (and its children),
        nginx's and PHP-FPM's masters, supervisord."""
        pids = [self.hosting.agent.process.pid]
        files = [self.hosting.nginx.pid_file] if self.hosting.nginx else []
        files += [fpm.pid_file for fpm in self.hosting.php_versions.values()]
        pids += [pid for pid in (read_pid(path) for path in files) if pid is not None]
        if "supervisor" in self.started:
            pids.append(self.started["supervisor"].pid)
        return pids

    # -- sites

    def site(self, kind: str, scenario: Scenario) -> Site:
        if kind in self.sites and not scenario.fresh_site:
            return self.sites[kind]
        domain = f"{fresh('h')}.test"
        self.hosting.run("site.create", domain=domain, profile=scenario.profile).ok()
        account = pwd.getpwnam(domain.replace(".", "-"))
        site = Site(
            domain,
            self.hosting.home / domain.replace(".", "-"),
            SiteUser(account.pw_name, account.pw_uid, account.pw_gid),
            scenario.profile,
        )
        if scenario.prepare is not None:
            scenario.prepare(self, site)
        self.sites[kind] = site
        return site

    def trees(self, site: Site) -> list[Path]:
        """Where a kind run on `site` may put what it reads: the site's folder, and a clone's."""
        found = [site.home]
        if "clone" in site.state:
            found.append(self.hosting.home / site.state["clone"].replace(".", "-"))
        return [tree for tree in found if tree.exists()]

    def cron_entry(self, site: Site) -> str:
        command = f"true {fresh('c')}"
        self.hosting.run("cron.add", domain=site.domain, schedule="0 0 1 1 *", command=command).ok()
        entries = self.hosting.run("cron.list", domain=site.domain).ok().result["entries"]
        entry_id: str = next(e["id"] for e in entries if e["command"] == command)
        history = put(site, f"logs/cron-{entry_id}.history", b"start run-0 1700000000\nend run-0 1700000001 0\n")
        history.chmod(0o644)
        return entry_id

    def request(self, site: Site) -> None:
        """Two requests to the site, one after the other: nginx (one worker) has written the
        first one's log lines (a missing page: access and error log) before it answers the second."""
        for _ in range(2):
            with contextlib.suppress(httpx.HTTPError):
                self.hosting.get(site.domain, "/hostile-missing-page")

    # -- jobs

    def run(self, kind: str, args: dict[str, Any], fifos: list[Path]) -> Outcome:
        """Run the job; find a wait on a planted FIFO at once (then release it: the job is free
        to end, and the attack has failed); cancel a job still running past the bound."""
        log_file = self.hosting.agent.log_file
        offset = log_file.stat().st_size
        started = time.monotonic()
        answer = self.hosting.post(kind, **args)
        assert answer.status_code == 201, f"{kind} {args}: {answer.status_code} {answer.text}"
        job_id = answer.json()["id"]
        hung: list[str] = []
        released_at = None
        with self.hosting.http() as http:
            while http.get(f"/v1/jobs/{job_id}").json()["status"] not in ENDED:
                waiting = waiting_on_a_fifo(self.watched()) if fifos else []
                overdue = time.monotonic() - started > JOB_BOUND_S
                if waiting or overdue:
                    hung.append(f"waits on a FIFO: {', '.join(waiting)}" if waiting else "ran past the bound")
                    for fifo in fifos_under(fifos):
                        release_fifo(fifo)
                    released_at = released_at or time.monotonic()
                if released_at is not None and time.monotonic() - released_at > RELEASE_GRACE_S:
                    http.post(f"/v1/jobs/{job_id}/cancel")
                    released_at = time.monotonic()
                time.sleep(POLL_S)
        seconds = time.monotonic() - started
        with open(log_file, encoding="utf-8", errors="replace") as f:
            f.seek(offset)
            log = f.read()
        return Outcome(self.hosting.wait(job_id), list(dict.fromkeys(hung)), log, seconds)

    def close(self) -> None:
        """Stop the server and its services, then remove the sites' users: the whole folder goes
        (a site.delete job for each of the module's fifty sites would take most of a minute)."""
        hosting = self.hosting
        try:
            hosting.agent.stop()
        finally:
            for fpm in hosting.php_versions.values():
                stop_php_fpm(fpm)
            if hosting.nginx is not None:
                stop_nginx(hosting.nginx)
            self.exits.close()  # supervisord stops the daemons' processes, the site users' last ones
        left = remove_site_users(hosting.home)
        still = [name for name in left if subprocess.run(["id", name], capture_output=True).returncode == 0]
        assert not still, f"site users that could not be removed: {still}"


@pytest.fixture(scope="module")
def hostile(stack: Stack) -> Iterator[Hostile]:
    folder = Path(tempfile.mkdtemp(prefix="fleetdeck-hostile-"))
    folder.chmod(0o755)  # the sites' users and nginx's workers go through it
    made = Hostile(stack, folder)
    yield made
    made.close()
    shutil.rmtree(folder, ignore_errors=True)


# --- the attacks -----------------------------------------------------------------------------------


@dataclass
class Planted:
    fifos: list[Path] = field(default_factory=list)
    racers: list[Racer] = field(default_factory=list)
    swaps: int = 0

    def stop_racers(self) -> None:
        for racer in self.racers:
            self.swaps += racer.stop()
        self.racers.clear()


@contextlib.contextmanager
def planted(hostile: Hostile, site: Site, scenario: Scenario, variant: str, canaries: Canaries) -> Iterator[Planted]:
    """The attack `variant` at every path the scenario touches; afterwards the site's own files
    are put back."""
    attack = Planted()
    kept: list[tuple[Path, Path | None]] = []
    files = [t for t in scenario.touches if not t.folder]
    try:
        if variant == "race":
            canaries.decoy([os.path.basename(t.path.format(**site.state)) for t in files if not t.writes])
            for folder in race_folders(scenario.touches):
                path = site.home / folder.format(**site.state)
                make_parents(site.user, path, site.home)
                attack.racers.append(Racer(site.user, path, canaries.folder))
        else:
            file_paths = [t.path for t in files]
            for touch in scenario.touches:
                holds_a_file = any(p.startswith(touch.path + "/") for p in file_paths)
                if touch.folder and (variant != "symlink" or holds_a_file):
                    continue
                path = site.path(touch)
                make_parents(site.user, path.parent, site.home)
                kept.append((path, stash_aside(path, hostile.stash)))
                if variant == "symlink":
                    target = canaries.missing(touch.path) if touch.writes else canaries.file
                    plant_symlink(site.user, path, canaries.folder if touch.folder else target)
                elif variant == "hardlink":
                    plant_hardlink(path, canaries.file)
                else:
                    plant_fifo(site.user, path)
                    attack.fifos.append(path)
        yield attack
    finally:
        attack.stop_racers()
        for path, original in reversed(kept):
            if not path.parent.is_dir():  # the kind removed the site (site.delete)
                continue
            remove_entry(path)
            if original is not None:
                os.rename(original, path)


@pytest.mark.parametrize(("kind", "variant"), attack_params())
def test_a_site_user_cannot_lead_the_kind_out_of_its_site(hostile: Hostile, kind: str, variant: str) -> None:
    scenario = SCENARIOS[kind]
    for service in scenario.needs:
        hostile.need(service)
    site = hostile.site(kind, scenario)
    if scenario.before is not None:
        scenario.before(hostile, site)
    canaries = Canaries.make(hostile.outside, lambda token: scenario.canary.format(token=token, key=hostile.ssh_key))
    args = scenario.args(hostile, site)
    problems: list[str] = []
    try:
        with planted(hostile, site, scenario, variant, canaries) as attack:
            before = canaries.snapshot()
            outcome = hostile.run(kind, args, attack.fifos)
            attack.stop_racers()
            if scenario.serves:
                hostile.request(site)
            problems += judge(outcome, canaries, before)
            for tree in hostile.trees(site):
                leaks = leaks_in_tree(tree, canaries, canaries.inodes(before))
                problems += [f"a canary's token is in the site: {leak}" for leak in leaks]
        if variant == "race" and attack.swaps == 0:
            problems.append("the race never exchanged the folder")
    finally:
        if scenario.after is not None:
            scenario.after(hostile, site)
        canaries.remove()
    if problems:
        raise LedOut(f"{kind} under a {variant} attack ({outcome.seconds:.1f} s):\n" + "\n".join(problems))


def judge(outcome: Outcome, canaries: Canaries, before: dict[str, Any]) -> list[str]:
    """What went wrong in one attacked run (see the module docstring)."""
    problems = [f"the job {what}" for what in outcome.hung]
    run = outcome.run
    status, code = run.job["status"], run.job["exit_code"]
    if status not in ("succeeded", "failed") or code not in CLEAN_EXITS:
        problems.append(f"the job ended {status} with exit code {code}")
    if code not in (0, None):
        if not run.stderr:
            problems.append("the job failed without a line saying why")
        elif UNHANDLED.match(run.stderr[-1]):
            problems.append(f"the job failed on an exception no handler expected: {run.stderr[-1]}")
    if "Traceback" in outcome.log:
        problems.append("a traceback in the agent's log:\n" + outcome.log[outcome.log.index("Traceback") :][:3000])
    after = canaries.snapshot()
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            problems.append(f"outside the site, {name} changed: {before.get(name)} -> {after.get(name)}")
    said = "\n".join(run.stdout + run.stderr) + json.dumps(run.job.get("result"))
    if canaries.found_in(said):
        problems.append("a canary's token is in the job's output or result:\n" + run.text[-2000:])
    return problems


# --- the list of kinds and the table ---------------------------------------------------------------


def test_every_kind_is_attacked_or_said_not_to_touch_a_site() -> None:
    handled = set(all_kinds())
    attacked, excused = set(SCENARIOS), set(NOT_IN_A_SITE)
    assert not attacked & excused, f"both attacked and said not to touch a site: {sorted(attacked & excused)}"
    assert not (attacked | excused) - handled, f"no such handled kind: {sorted((attacked | excused) - handled)}"
    missing = handled - attacked - excused
    assert not missing, (
        f"kinds with a handler that are neither attacked (SCENARIOS) nor said not to touch a site (NOT_IN_A_SITE):"
        f" {sorted(missing)}"
    )
    for name in sorted(excused):
        spec = all_kinds()[name].spec
        assert not spec.paths, f"{name} names a path ({[p.field for p in spec.paths]}): it must be attacked"


TEST_ID = "tests/test_hostile_site_user.py::test_a_site_user_cannot_lead_the_kind_out_of_its_site"


def table_rows() -> dict[str, tuple[str, ...]]:
    """The tables' rows as the harness sees them: kind -> (what it touches, who opens it, its
    boundary, its tests); and (for the other kinds) reason -> the kinds."""
    rows: dict[str, tuple[str, ...]] = {}
    for kind, scenario in SCENARIOS.items():
        touched = ", ".join(
            f"`{t.path}{'/' if t.folder else ''}` ({'w' if t.writes else 'r'})" for t in scenario.touches
        )
        who = ", ".join(dict.fromkeys(t.by for t in scenario.touches))
        tests = f"`{TEST_ID}[{kind}-{{{','.join(scenario.variants())}}}]`"
        rows[f"`{kind}`"] = (touched, who, scenario.boundary, tests)
    reasons: dict[str, list[str]] = {}
    for kind, reason in sorted(NOT_IN_A_SITE.items()):
        reasons.setdefault(reason, []).append(f"`{kind}`")
    for reason, kinds in reasons.items():
        rows[reason] = (", ".join(kinds),)
    return rows


def table_markdown() -> str:
    """The two tables of ``docs/security.md``, as the harness sees them."""
    lines = [
        "| kind | touches in the site (r: reads, w: writes) | opened by | boundary | test |",
        "|---|---|---|---|---|",
    ]
    rows = table_rows()
    lines += [f"| {kind} | {' | '.join(cells)} |" for kind, cells in rows.items() if len(cells) == 4]
    lines += ["", "| why it touches no file a site's user can write | kinds |", "|---|---|"]
    lines += [f"| {reason} | {cells[0]} |" for reason, cells in rows.items() if len(cells) == 1]
    return "\n".join(lines) + "\n"


def test_the_security_table_lists_each_kind_as_the_harness_attacks_it() -> None:
    """docs/security.md holds `table_markdown` as it is: a kind added, a path or a
    boundary changed here shows there (print `table_markdown()` to write it)."""
    assert table_markdown() in DOC.read_text()
