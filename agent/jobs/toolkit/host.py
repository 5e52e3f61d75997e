"""Where this server's services keep their configuration, and how each one is controlled.

On a Debian server every default below is the package's own (nginx reads
``/etc/nginx/sites-enabled``, PHP-FPM ``/etc/php/<version>/fpm/pool.d``, ...) and a service is
driven the way the system drives it: ``systemctl <action> <unit>`` where PID 1 is systemd, the
Debian init script (``service <name> <action>``) otherwise (the ``init`` section may name either).

A layout file (``fleetdeck agent --host-layout FILE``, JSON, any subset of the sections below)
overrides them: the tests run their own nginx, PHP-FPM, MariaDB, PostgreSQL... in their own
folders and say so there, including the exact commands that control those instances
(``control.commands``). The file is re-read when it changes (mtime, size,
inode), so a test may add the section of a service it has just started while the agent runs.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Literal

import trio
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.jobs.toolkit.output import JobError, Output
from agent.jobs.toolkit.proc import capture_command, child_pids, process_exiting, read_pid, require, stream_command

log = logging.getLogger("fleetdeck.agent.jobs")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServiceControl(_Section):
    """How one service is controlled: the system's unit/init script named `unit`, unless
    `commands` gives the argv of an action (the tests' own instances: ``nginx -c F -s reload``)."""

    unit: str
    commands: dict[str, list[str]] = Field(default_factory=dict)


class NginxLayout(_Section):
    sites_dir: str = "/etc/nginx/sites-enabled"  # one file per site, fleetdeck-<slug>.conf
    conf: str = "/etc/nginx/nginx.conf"  # what `nginx -t -c` checks
    listen: str = "80"  # the value of a site's `listen` (tests: 127.0.0.1:PORT)
    tls_listen: str = "443 ssl"  # a site's TLS `listen` (tests: 127.0.0.1:PORT ssl)
    fastcgi_params: str = "/etc/nginx/fastcgi_params"  # included by the PHP sites' server blocks
    acme_dir: str = "/var/lib/fleetdeck/acme-challenge"  # HTTP-01 files, read by the workers (not in the private state)
    user: str = "www-data"  # the workers' account (it must reach the sites' public folders)
    pid_file: str = "/run/nginx.pid"  # its master's: a reload is done once new workers serve
    control: ServiceControl = ServiceControl(unit="nginx")


class PhpLayout(_Section):
    pool_dir: str = "/etc/php/{version}/fpm/pool.d"  # {version}: 8.2
    ini_dir: str = "/etc/php/{version}"  # holds fpm/ and cli/ (php.ini, conf.d/)
    mods_dir: str = "/etc/php/{version}/mods-available"
    fpm_conf: str = "/etc/php/{version}/fpm/php-fpm.conf"  # the master's file (`php-fpm -t -y`), it includes pool_dir
    run_dir: str = "/run/php"  # the pools' sockets
    control: ServiceControl = ServiceControl(unit="php{version}-fpm")


PHP_FPM_BINARY = re.compile(r"^php-fpm(\d+\.\d+)$")  # /usr/sbin/php-fpm8.2
PHP_CLI_BINARY = re.compile(r"^php(\d+\.\d+)$")  # /usr/bin/php8.2


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def php_installed() -> dict[str, dict[str, bool]]:
    """Each PHP version with an FPM (``/usr/sbin/php-fpm8.2``) or a CLI (``/usr/bin/php8.2``),
    oldest first: ``{"8.2": {"fpm": True, "cli": True}}`` (what the Debian packages install)."""
    found: dict[str, dict[str, bool]] = {}
    binaries = (("/usr/sbin/php-fpm*", PHP_FPM_BINARY, "fpm"), ("/usr/bin/php*", PHP_CLI_BINARY, "cli"))
    for pattern, name_re, part in binaries:
        for path in glob.glob(pattern):
            match = name_re.match(os.path.basename(path))
            if match and os.access(path, os.X_OK):
                found.setdefault(match.group(1), {"fpm": False, "cli": False})[part] = True
    return dict(sorted(found.items(), key=lambda item: version_key(item[0])))


def php_fpm_versions() -> list[str]:
    """The PHP-FPM versions installed, oldest first."""
    return [version for version, parts in php_installed().items() if parts["fpm"]]


class MariaDbLayout(_Section):
    socket: str = "/run/mysqld/mysqld.sock"  # the agent connects as root over it (unix_socket auth)
    user: str = "root"  # the account the agent acts as
    defaults_file: str | None = None  # a client option file read instead of none (e.g. a password for `user`)
    control: ServiceControl = ServiceControl(unit="mariadb")


class PostgresLayout(_Section):
    host: str = "/var/run/postgresql"  # a socket folder or an address
    port: int = 5432
    superuser: str = "postgres"  # the role the agent acts as
    os_user: str = "postgres"  # the account peer authentication maps to it (the agent runs psql as it)
    hba_file: str | None = None  # None: ask the server (SHOW hba_file)
    control: ServiceControl = ServiceControl(unit="postgresql")


class BindLayout(_Section):
    zones_dir: str = "/var/lib/bind/fleetdeck"  # one zone file per zone
    zones_conf: str = "/etc/bind/named.conf.fleetdeck"  # the zone statements (included by named.conf.local)
    named_conf: str = "/etc/bind/named.conf"  # what named-checkconf checks
    rndc: list[str] = Field(default_factory=lambda: ["rndc"])  # argv prefix (tests: -c CONF -s 127.0.0.1 -p PORT)
    port: int = 53  # where `dig @127.0.0.1` asks
    nameservers: list[str] = Field(default_factory=list)  # the NS of new zones (empty: ns1.<zone> at its address)
    control: ServiceControl = ServiceControl(unit="named")


class SupervisorLayout(_Section):
    conf_dir: str = "/etc/supervisor/conf.d"  # one fleetdeck-<name>.conf per program
    supervisord_conf: str = "/etc/supervisor/supervisord.conf"  # supervisorctl -c
    log_dir: str = "/var/log/supervisor"
    control: ServiceControl = ServiceControl(unit="supervisor")


class Fail2banLayout(_Section):
    socket: str = "/run/fail2ban/fail2ban.sock"
    conf_dir: str = "/etc/fail2ban"  # what `fail2ban-client -c DIR -t` checks (it reads jail_dir)
    jail_dir: str = "/etc/fail2ban/jail.d"
    control: ServiceControl = ServiceControl(unit="fail2ban")


class SshLayout(_Section):
    sshd_config: str = "/etc/ssh/sshd_config"  # what `sshd -t -f` checks (it includes the drop-ins)
    dropin_dir: str = "/etc/ssh/sshd_config.d"
    control: ServiceControl = ServiceControl(unit="ssh")


class SystemLayout(_Section):
    sudoers_dir: str = "/etc/sudoers.d"
    nft_table: str = "fleetdeck"  # the nftables table (family inet) the firewall kinds own
    apt_history: str = "/var/log/apt/history.log"
    apt_conf_dir: str = "/etc/apt/apt.conf.d"
    apt_archives: str = "/var/cache/apt/archives"  # what `apt-get clean` empties (storage.cleanup)
    log_dir: str = "/var/log"  # the system's logs (logs.list, storage.cleanup of rotated logs)
    # The sites' web and PHP logs, <sites_log_dir>/<slug>/: root's folders, never in a site's own
    # tree (the web server's root master opens them; see agent.jobs.toolkit.site_web.site_log_dir).
    sites_log_dir: str = "/var/log/fleetdeck/sites"
    # Without systemd, system.timezone-set/hostname-set/locale-set write these files themselves.
    zoneinfo_dir: str = "/usr/share/zoneinfo"
    timezone_file: str = "/etc/timezone"
    localtime: str = "/etc/localtime"  # a link into zoneinfo_dir
    hostname_file: str = "/etc/hostname"
    locale_file: str = "/etc/default/locale"
    drop_caches: str = "/proc/sys/vm/drop_caches"
    swap_file: str = "/swapfile"  # the swap file system.swap-set sizes
    fstab: str = "/etc/fstab"  # where that swap file is listed for the next boot
    cron_control: ServiceControl = ServiceControl(unit="cron")


class ClamavLayout(_Section):
    # clamd's LocalSocket (Debian package clamav-daemon): the scan streams each file to it
    socket: str = "/run/clamav/clamd.ctl"
    # clamd's DatabaseDirectory (freshclam keeps it current): named when no clamd answers
    database_dir: str = "/var/lib/clamav"


class AcmeLayout(_Section):
    """The ACME CA of the sites' certificates (None: the agent's --acme-directory / --acme-ca-bundle,
    Let's Encrypt by default; a directory given here serves every `provider`)."""

    directory_url: str | None = None
    ca_bundle: str | None = None


class RedisLayout(_Section):
    """Redis: where it listens (``unixsocket``, else ``bind`` and ``port``) and its password
    (``requirepass``) are read from `conf`, the file the service starts with."""

    conf: str = "/etc/redis/redis.conf"
    control: ServiceControl = ServiceControl(unit="redis-server")


class MemcachedLayout(_Section):
    """memcached: its options (``-m``, ``-s``, ``-l``, ``-p``) are read from `conf`, one a line
    (Debian's ``start-memcached`` reads the same file)."""

    conf: str = "/etc/memcached.conf"
    control: ServiceControl = ServiceControl(unit="memcached")


class GitLayout(_Section):
    """The CA certificates the agent trusts when it reads a deploy token's https repository for
    the site's git (`agent.jobs.toolkit.git_proxy`; None: the system's)."""

    ca_bundle: str | None = None


class InitLayout(_Section):
    """What drives the services: ``auto`` asks the machine (systemd where PID 1 is systemd, what
    ``sd_booted()`` checks; the Debian init scripts otherwise), ``systemd`` or ``sysv`` says it.
    The tests name ``systemd`` with a `tools_dir` of stand-ins that replay systemd's recorded
    output (PID 1 is not systemd where they run: see ``tests/helpers/recorded_systemd.py``)."""

    system: Literal["auto", "systemd", "sysv"] = "auto"
    tools_dir: str | None = None  # looked in before the system PATH for the init system's tools (systemctl, ...)

    @property
    def systemd(self) -> bool:
        """The services are systemd's units (else the Debian init scripts)."""
        return self.system == "systemd" or (self.system == "auto" and systemd_running())

    def tool(self, name: str, purpose: str) -> str:
        """The path of one of the init system's tools (`require`, `tools_dir` first)."""
        return require(name, purpose, first_in=self.tools_dir)


class HostLayout(_Section):
    init: InitLayout = InitLayout()
    nginx: NginxLayout = NginxLayout()
    php: PhpLayout = PhpLayout()
    mariadb: MariaDbLayout = MariaDbLayout()
    postgres: PostgresLayout = PostgresLayout()
    bind: BindLayout = BindLayout()
    supervisor: SupervisorLayout = SupervisorLayout()
    fail2ban: Fail2banLayout = Fail2banLayout()
    ssh: SshLayout = SshLayout()
    system: SystemLayout = SystemLayout()
    acme: AcmeLayout = AcmeLayout()
    git: GitLayout = GitLayout()
    clamav: ClamavLayout = ClamavLayout()
    redis: RedisLayout = RedisLayout()
    memcached: MemcachedLayout = MemcachedLayout()


DEFAULT_LAYOUT = HostLayout()


class LayoutFile:
    """A layout file, re-read when it changes; a file that does not parse keeps the last good
    layout (and says why in the log), a missing one means the defaults."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._key: tuple[int, int, int] | None = None
        self._layout = DEFAULT_LAYOUT

    def current(self) -> HostLayout:
        if self.path is None:
            return DEFAULT_LAYOUT
        with self._lock:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                self._key, self._layout = None, DEFAULT_LAYOUT
                return self._layout
            key = (st.st_mtime_ns, st.st_size, st.st_ino)
            if key != self._key:
                try:
                    with open(self.path, "rb") as f:
                        self._layout = HostLayout.model_validate_json(f.read())
                except (OSError, ValidationError) as exc:
                    log.warning("host layout %s not used: %s", self.path, exc)
                self._key = key
            return self._layout


# --- controlling a service ------------------------------------------------------------------


def systemd_running() -> bool:
    """PID 1 is systemd (what ``sd_booted()`` checks)."""
    return os.path.isdir("/run/systemd/system")


INIT_D = "/etc/init.d"
RC_DIRS = "/etc/rc{level}.d"
BOOT_LEVELS = ("2", "3", "4", "5")  # Debian's multi-user runlevels: a service starts at boot when linked S.. there


def rc_links(unit: str) -> list[str]:
    """The ``/etc/rc?.d/[SK]NNunit`` links of an init script (what ``update-rc.d`` writes)."""
    return sorted(glob.glob(os.path.join(RC_DIRS.format(level="?"), f"[SK][0-9][0-9]{glob.escape(unit)}")))


def sysv_enabled(unit: str) -> bool:
    """The init script starts at boot: an S link in one of the multi-user runlevels."""
    return any(
        os.path.basename(link).startswith("S") and os.path.basename(os.path.dirname(link))[2:3] in BOOT_LEVELS
        for link in rc_links(unit)
    )


def system_argv(unit: str, action: str, init: InitLayout) -> list[str]:
    """The system's command for `action` on `unit`: systemctl under systemd, else the init script
    (``service``), and ``update-rc.d`` for enable/disable: ``enable``/``disable`` flip existing
    rc.d links between S and K, so a script without any links first gets them from its LSB header
    (``defaults``, or ``defaults-disabled``)."""
    if init.systemd:
        systemctl = init.tool("systemctl", f"{action} {unit}")
        return [systemctl, action, unit, *(["--no-pager"] if action == "status" else [])]
    if not os.path.exists(os.path.join(INIT_D, unit)):
        raise JobError(f"no service named {unit} on this server (no {INIT_D}/{unit})")
    if action in ("enable", "disable"):
        update_rc_d = init.tool("update-rc.d", f"{action} {unit} at boot")
        if not rc_links(unit):
            return [update_rc_d, unit, "defaults" if action == "enable" else "defaults-disabled"]
        return [update_rc_d, unit, action]
    return [init.tool("service", f"{action} {unit}"), unit, action]


def control_argv(control: ServiceControl, action: str, *, init: InitLayout, **names: str) -> list[str]:
    """The argv that performs `action` on the service of `control` (`names` fill ``{version}``)."""
    given = control.commands.get(action)
    if given is not None:
        return [part.format(**names) for part in given]
    return system_argv(control.unit.format(**names), action, init)


async def control_service(
    control: ServiceControl, action: str, out: Output | None = None, *, init: InitLayout, **names: str
) -> None:
    """Perform `action` (reload after a configuration change, ...) or raise JobError with the
    tool's own words; with `out`, its lines are streamed there. `init` is the layout's."""
    argv = control_argv(control, action, init=init, **names)
    if out is not None:
        code = await stream_command(out, argv)
        detail = ""
    else:
        code, text, err = await capture_command(argv)
        detail = ": " + " ".join((err or text).split())[-500:] if (err or text).strip() else ""
    if code != 0:
        raise JobError(f"{' '.join(argv)} failed (exit {code}){detail}")


NGINX_RELOAD_WAIT_S = 15.0


def worker_leaving(worker: int) -> bool:
    """An old nginx worker is shutting down (it closed its listening sockets), exiting, or gone.

    A worker with nothing left to serve exits right after it says "shutting down": from then until
    its master reaps it, its cmdline reads empty, so the title alone would take it for one still
    serving. Its cmdline is read first: a worker that exits meanwhile is exiting when asked next."""
    try:
        if b"shutting down" in Path(f"/proc/{worker}/cmdline").read_bytes():
            return True
    except OSError:
        return True
    return process_exiting(worker)


def nginx_reload_took(master: int, before: set[int]) -> bool:
    """The reload of the nginx `master` whose workers were `before` took: it has new workers, and
    the old ones accept no more (else a request may still meet the old rules)."""
    return bool(child_pids(master) - before) and all(worker_leaving(pid) for pid in before)


async def reload_nginx(layout: HostLayout) -> None:
    """Reload the layout's nginx and return once its new workers serve and the old ones accept no
    more: the reload signal only starts that, and a request meeting an old worker would get the old
    rules."""
    nginx = layout.nginx
    master = await trio.to_thread.run_sync(read_pid, Path(nginx.pid_file))
    before = await trio.to_thread.run_sync(child_pids, master) if master is not None else set()
    await control_service(nginx.control, "reload", init=layout.init)
    if master is None:
        return  # not running here (or no pid file where the layout says): nothing to wait for

    deadline = time.monotonic() + NGINX_RELOAD_WAIT_S
    while not await trio.to_thread.run_sync(nginx_reload_took, master, before):
        if time.monotonic() > deadline:
            raise JobError(
                f"nginx started no new worker within {NGINX_RELOAD_WAIT_S:.0f} s of the reload: see its error log"
            )
        await trio.sleep(0.005)  # reading /proc for a few pids costs some 0.1 ms a round


__all__ = [
    "DEFAULT_LAYOUT",
    "HostLayout",
    "InitLayout",
    "LayoutFile",
    "ServiceControl",
    "control_argv",
    "control_service",
    "nginx_reload_took",
    "rc_links",
    "reload_nginx",
    "system_argv",
    "systemd_running",
    "sysv_enabled",
    "worker_leaving",
]
