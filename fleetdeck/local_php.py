"""The embedded stack's own PHP-FPM: the PHP sites its agent makes run on masters of its own.

The agent's defaults are a Debian server's (pools in ``/etc/php/<version>/fpm/pool.d``, the FPM
reloaded through its init script): a demo started on the user's machine would rewrite and reload
the system's PHP-FPM, and without root it could not even write the pool. So the host layout's php
section points into ``<data>/php``: per version, ``<version>/fpm/php-fpm.conf`` (the master's
file, written at each start), the pools in ``<version>/fpm/pool.d``, the ini (``php.ini`` and
``conf.d`` of fpm and cli) copied from ``/etc/php/<version>`` at first start, then the stack's own.
The pools' sockets are in the stack's short runtime folder (`agent.unix_sockets.runtime_dir`): in
a data folder of any length, a socket path would not always fit the kernel's 107 bytes. The
modules' ini files stay ``/etc/php/<version>/mods-available`` (the copied ``conf.d`` links to
them, and the agent only reads there). One master per version
with an FPM installed (`agent.jobs.toolkit.host.php_fpm_versions`) runs as a child of the stack
(`fleetdeck.local_children`); the agent reloads it with ``SIGUSR2`` to its PID file.

A site's PHP runs as the site's account, which must reach its files: the stack's own account
when it runs unprivileged (PHP-FPM ignores a pool's ``user`` then); a root stack's sites get
system users, who pass through its data folder (`fleetdeck.paths.PASSABLE`) to their own.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from agent.jobs.toolkit.host import PhpLayout, ServiceControl, php_fpm_versions
from agent.jobs.toolkit.proc import which
from agent.sites import write_atomically
from fleetdeck.local_children import Child

log = logging.getLogger("fleetdeck.local")

SYSTEM_INI = Path("/etc/php")
SAPIS = ("fpm", "cli")
IDLE_POOL = "local-stack-idle"


def php_layout(folder: Path, sockets: Path) -> PhpLayout:
    """Where the stack's PHP-FPM keeps its files (``{version}``: 8.2; the pools' sockets in
    `sockets`), and how the agent reloads it."""
    version = folder / "{version}"
    signal_master = [which("pkill") or "pkill", "--pidfile", str(version / "php-fpm.pid"), "--signal"]
    return PhpLayout(
        pool_dir=str(version / "fpm" / "pool.d"),
        ini_dir=str(version),
        fpm_conf=str(version / "fpm" / "php-fpm.conf"),
        run_dir=str(sockets),  # one for all versions, as Debian's /run/php
        control=ServiceControl(
            unit="php{version}-fpm",
            # USR2: the master re-reads everything (re-executing itself, under the same pid)
            commands={"reload": [*signal_master, "USR2"], "restart": [*signal_master, "USR2"]},
        ),
    )


def render_conf(php: PhpLayout, version: str) -> str:
    folder = Path(php.ini_dir.format(version=version))
    # As root, PHP-FPM refuses a pool without a user (its sites' pools name theirs).
    user = "user = nobody\n" if os.geteuid() == 0 else ""
    return f"""; the local stack's own PHP-FPM {version} (fleetdeck.local_php): written at each start
[global]
pid = {folder / "php-fpm.pid"}
error_log = {folder / "php-fpm.log"}
daemonize = no
include = {php.pool_dir.format(version=version)}/*.conf

; PHP-FPM will not start without a pool: this one stays idle
[{IDLE_POOL}]
{user}listen = {Path(php.run_dir) / f"idle-{version}.sock"}
pm = ondemand
pm.max_children = 1
"""


def prepare(folder: Path, sockets: Path) -> tuple[PhpLayout, list[Child]]:
    """Write the configuration of each installed version's master (and copy its ini the first
    time); the layout (the agent's php section) and the masters to run: none without PHP-FPM.
    `sockets`: the folder of the pools' sockets (made already)."""
    php = php_layout(folder, sockets)
    children = []
    for version in php_fpm_versions():
        binary = which(f"php-fpm{version}")
        if binary is not None and _copy_system_ini(Path(php.ini_dir.format(version=version)), version):
            children.append(_master(php, version, binary))
    return php, children


def _master(php: PhpLayout, version: str, binary: str) -> Child:
    """The version's master, its configuration written."""
    folder, conf = Path(php.ini_dir.format(version=version)), php.fpm_conf.format(version=version)
    Path(php.pool_dir.format(version=version)).mkdir(parents=True, exist_ok=True)
    write_atomically(conf, render_conf(php, version).encode())
    argv = [binary, "-y", conf, "-c", str(folder / "fpm" / "php.ini")]
    env = {"PHP_INI_SCAN_DIR": str(folder / "fpm" / "conf.d")}
    return Child(f"PHP-FPM {version}", argv, conf, folder / "php-fpm.pid", folder / "php-fpm.log", env)


def _copy_system_ini(folder: Path, version: str) -> bool:
    """The version's ``php.ini`` and ``conf.d`` of each SAPI, copied from /etc/php once (later
    starts keep the stack's own, changed by the agent's php.* kinds); False when the system has
    no FPM ini for that version (its package half removed): nothing to run it with."""
    for sapi in SAPIS:
        source, target = SYSTEM_INI / version / sapi, folder / sapi
        if (target / "php.ini").exists() or not (source / "php.ini").exists():
            continue
        target.mkdir(parents=True, exist_ok=True)
        if (source / "conf.d").is_dir():
            shutil.copytree(source / "conf.d", target / "conf.d", symlinks=True, dirs_exist_ok=True)
        shutil.copy2(source / "php.ini", target / "php.ini")  # last: it marks the copy done
    if not (folder / "fpm" / "php.ini").exists():
        log.warning("PHP-FPM %s is installed but %s has no php.ini: the stack runs no FPM of it", version, SYSTEM_INI)
        return False
    return True
