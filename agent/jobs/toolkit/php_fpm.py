"""PHP as the agent finds it: the versions installed, where each keeps its files, its FPM master
and pools, and the one way a configuration change is made (checked by ``php-fpm -t`` first).

Every path comes from the host layout's ``php`` section (``{version}`` filled in), so the Debian
defaults and the tests' own FPM are driven the same way: the CLI and ``php-fpm -t`` are always
given the layout's ``php.ini`` (``-c``) and conf.d (``PHP_INI_SCAN_DIR``), which on Debian are the
ones they would read anyway.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.host import PHP_CLI_BINARY, PhpLayout, control_service, php_fpm_versions, php_installed
from agent.jobs.toolkit.needs import AnyFile
from agent.jobs.toolkit.output import EXIT_MISSING, EXIT_REFUSED, JobError, Output
from agent.jobs.toolkit.proc import capture_command, require, tool_env, which

SAPIS = ("fpm", "cli")
# What a kind that drives PHP-FPM needs on the host: one version at least (the version a job names
# is its handler's to check, exit 69 naming php<version>-fpm).
FPM_INSTALLED = (AnyFile("/usr/sbin/php-fpm[0-9]*", "php-fpm"),)
_MASTER = re.compile(r"^php-fpm: master process \((.*)\)$")
_WORKER = re.compile(r"^php-fpm: pool (\S+)$")


def parse_alternatives(text: str) -> str | None:
    """The version the ``php`` alternative points at, from ``update-alternatives --query php``
    (its ``Value:`` is ``/usr/bin/php8.2`` or Debian's ``/usr/bin/php.default``, a link to one)."""
    for line in text.splitlines():
        if line.startswith("Value:"):
            target = line.split(":", 1)[1].strip()
            match = PHP_CLI_BINARY.match(os.path.basename(os.path.realpath(target)))
            return match.group(1) if match else None
    return None


@dataclass(frozen=True)
class PhpPaths:
    """Where one PHP version keeps its files, by the host layout."""

    version: str
    layout: PhpLayout

    def _at(self, template: str) -> str:
        return template.format(version=self.version)

    @property
    def pool_dir(self) -> str:
        return self._at(self.layout.pool_dir)

    @property
    def ini_dir(self) -> str:
        return self._at(self.layout.ini_dir)

    @property
    def mods_dir(self) -> str:
        return self._at(self.layout.mods_dir)

    @property
    def run_dir(self) -> str:
        return self._at(self.layout.run_dir)

    @property
    def fpm_conf(self) -> str:
        return self._at(self.layout.fpm_conf)

    def conf_d(self, sapi: str) -> str:
        return os.path.join(self.ini_dir, sapi, "conf.d")

    def sapis(self) -> list[str]:
        """The SAPIs of `SAPIS` installed (their conf.d exists: no php<version>-cli, no cli/)."""
        return [sapi for sapi in SAPIS if os.path.isdir(self.conf_d(sapi))]

    def php_ini(self, sapi: str) -> str:
        return os.path.join(self.ini_dir, sapi, "php.ini")

    def env(self, sapi: str) -> dict[str, str]:
        return tool_env(PHP_INI_SCAN_DIR=self.conf_d(sapi))

    def fpm_binary(self) -> str:
        return require(f"php-fpm{self.version}", f"run PHP {self.version} under FPM", package=f"php{self.version}-fpm")

    def cli_binary(self) -> str:
        return require(f"php{self.version}", f"run PHP {self.version} scripts", package=f"php{self.version}-cli")

    def cli_argv(self, sapi: str, *args: str) -> list[str]:
        """The PHP CLI of this version reading the ini of `sapi` (fpm: what FPM's workers see)."""
        return [self.cli_binary(), "-c", self.php_ini(sapi), *args]


def php_paths(ctx: JobContext, version: str) -> PhpPaths:
    """The paths of an installed PHP version (from the host layout's ``php`` section).

    Why: every handler that touches a version's files or its FPM starts here, so a version that is
    not installed ends the job the same way everywhere.

    Args:
        ctx: the job's context (its host layout).
        version: ``8.2``, as the catalog validated it.

    Raises:
        JobError: exit `EXIT_MISSING` naming ``php<version>-fpm``, it is not installed.
    """
    if not php_installed().get(version, {}).get("fpm"):
        raise JobError(f"PHP {version} is not installed on this server (Debian package php{version}-fpm)", EXIT_MISSING)
    return PhpPaths(version, ctx.host.php)


# --- ini-style files ----------------------------------------------------------------------------


def set_directive(text: str, key: str, value: str) -> str:
    """`text` (a php.ini or an FPM pool file) with ``key = value``: the last line setting `key`
    is replaced (PHP keeps the last one), others setting it are dropped; else appended."""
    lines = text.splitlines()
    hits = [i for i, line in enumerate(lines) if directive_key(line) == key]
    wanted = f"{key} = {value}"
    if not hits:
        return "\n".join([*lines, wanted]) + "\n"
    kept = [line for i, line in enumerate(lines) if i not in hits[:-1]]
    kept[hits[-1] - len(hits) + 1] = wanted
    return "\n".join(kept) + "\n"


def directive_key(line: str) -> str | None:
    """The key a line of an ini-style file sets, or None (a comment, a section, a blank line)."""
    stripped = line.strip()
    if not stripped or stripped[0] in ";#[" or "=" not in stripped:
        return None
    return stripped.split("=", 1)[0].strip()


def unquoted(value: str) -> str:
    """An ini value without the quotes around it."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def parse_sections(text: str) -> list[tuple[str, dict[str, str]]]:
    """The ``[section]`` blocks of an FPM configuration file and their directives, in order
    (directives before any section belong to ``""``; values lose their quotes)."""
    sections: list[tuple[str, dict[str, str]]] = [("", {})]
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            sections.append((stripped[1:-1].strip(), {}))
            continue
        key = directive_key(line)
        if key is not None:
            sections[-1][1][key] = unquoted(stripped.split("=", 1)[1].strip())
    return [(name, values) for name, values in sections if name or values]


def fpm_pools(paths: PhpPaths) -> list[dict[str, Any]]:
    """The pools of the version's FPM: those of its main file and of the files it includes
    (blocking). Each: ``name``, ``file`` and the pool's directives (``values``)."""
    pools: list[dict[str, Any]] = []
    for file in _fpm_files(paths.fpm_conf):
        try:
            with open(file, encoding="utf-8", errors="replace") as f:
                sections = parse_sections(f.read())
        except OSError:
            continue
        named = [(name, values) for name, values in sections if name not in ("", "global")]
        pools.extend({"name": name, "file": file, "values": values} for name, values in named)
    return pools


def _fpm_files(conf: str) -> list[str]:
    files = [conf]
    try:
        with open(conf, encoding="utf-8", errors="replace") as f:
            sections = parse_sections(f.read())
    except OSError:
        return files
    for _name, values in sections:
        include = values.get("include")
        if include:
            pattern = include if os.path.isabs(include) else os.path.join(os.path.dirname(conf), include)
            files.extend(sorted(glob.glob(pattern)))
    return files


# --- the running FPM ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FpmProcess:
    pid: int
    ppid: int
    uid: int
    title: str  # "php-fpm: master process (/etc/php/8.2/fpm/php-fpm.conf)", "php-fpm: pool www"


def fpm_processes() -> list[FpmProcess]:
    """Every PHP-FPM master and worker, from /proc (blocking)."""
    found: list[FpmProcess] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                title = f.read().split(b"\0", 1)[0].decode("utf-8", "replace").strip()
            if not title.startswith("php-fpm: "):
                continue
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            uid = os.stat(f"/proc/{entry}").st_uid
        except (OSError, ValueError, IndexError):
            continue
        found.append(FpmProcess(int(entry), ppid, uid, title))
    return found


def master_pid(processes: list[FpmProcess], fpm_conf: str) -> int | None:
    """The pid of the FPM master started with `fpm_conf`, if one runs."""
    for process in processes:
        match = _MASTER.match(process.title)
        if match and os.path.realpath(match.group(1)) == os.path.realpath(fpm_conf):
            return process.pid
    return None


def workers(processes: list[FpmProcess], master: int) -> dict[str, list[FpmProcess]]:
    """The workers of `master`, by pool name."""
    by_pool: dict[str, list[FpmProcess]] = {}
    for process in processes:
        match = _WORKER.match(process.title)
        if match and process.ppid == master:
            by_pool.setdefault(match.group(1), []).append(process)
    return by_pool


async def running_master(paths: PhpPaths) -> int | None:
    """The pid of the FPM master of `paths`'s version, or None when it is not running."""
    processes = await trio.to_thread.run_sync(fpm_processes)
    return master_pid(processes, paths.fpm_conf)


async def control_fpm(ctx: JobContext, paths: PhpPaths, action: str, out: Output | None = None) -> None:
    """`action` (start, stop, restart, reload) on the FPM service of `paths`'s version, through
    the host layout's service control.

    Args:
        ctx: the job's context (its host layout).
        paths: the version's paths (`php_paths`).
        action: the service action.
        out: where the tool's lines go (None: captured, and quoted in the error).

    Raises:
        JobError: the service control failed.
    """
    layout = ctx.host
    await control_service(layout.php.control, action, out, init=layout.init, version=paths.version)


async def reload_after_change(ctx: JobContext, paths: PhpPaths, out: Output) -> None:
    """Reload the version's FPM so a change applies (a stopped one reads it when it starts)."""
    if await running_master(paths) is None:
        out.stdout(f"PHP-FPM {paths.version} is not running: the change applies when it starts")
        return
    await control_fpm(ctx, paths, "reload")
    out.stdout(f"PHP-FPM {paths.version} reloaded")


def parse_fcgi_json(text: str) -> Any:
    """The JSON body of a FastCGI answer as ``cgi-fcgi`` prints it (headers, a blank line, the
    body); None when it is not JSON."""
    parts = text.replace("\r\n", "\n").split("\n\n", 1)
    try:
        return json.loads(parts[1] if len(parts) == 2 else text)
    except ValueError:
        return None


# --- checked changes ----------------------------------------------------------------------------

_STAMP = re.compile(r"^\[[^\]]*\]\s*")
_PROBLEM = re.compile(r"ERROR:|PHP (Warning|Fatal error|Parse error|Startup)|PHP:\s+syntax error", re.IGNORECASE)


def problem_lines(text: str) -> list[str]:
    """The warnings and errors of ``php-fpm -t`` or the CLI, without their time stamps (so the
    same problem reads the same in two runs)."""
    found = []
    for line in text.splitlines():
        line = _STAMP.sub("", line.strip()).removeprefix("NOTICE: PHP message: ").strip()
        if _PROBLEM.search(line):
            found.append(line)
    return found


async def fpm_test(paths: PhpPaths) -> tuple[int, list[str]]:
    """``php-fpm<version> -t`` on the layout's files: its exit code and problem lines (it exits 0
    on a broken php.ini value, with a warning: those count as refusals too)."""
    argv = [paths.fpm_binary(), "-t", "-y", paths.fpm_conf, "-c", paths.php_ini("fpm")]
    code, text, err = await capture_command(argv, env=paths.env("fpm"))
    return code, problem_lines(text + "\n" + err)


class FileTrial:
    """Configuration files changed so that they can be put back: each write, link or removal
    first remembers what the path held (a file's bytes and mode, a link's target, nothing)."""

    def __init__(self) -> None:
        self._before: list[tuple[str, tuple[str, Any, int] | None]] = []

    def _remember(self, path: str) -> None:
        if os.path.islink(path):
            self._before.append((path, ("link", os.readlink(path), 0)))
        elif os.path.exists(path):
            with open(path, "rb") as f:
                self._before.append((path, ("file", f.read(), os.stat(path).st_mode & 0o7777)))
        else:
            self._before.append((path, None))

    def write(self, path: str, text: str, mode: int = 0o644) -> None:
        self._remember(path)
        temporary = f"{path}.fleetdeck-new"
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)

    def link(self, path: str, target: str) -> None:
        self._remember(path)
        if os.path.lexists(path):
            os.unlink(path)
        os.symlink(target, path)

    def remove(self, path: str) -> None:
        self._remember(path)
        if os.path.lexists(path):
            os.unlink(path)

    def undo(self) -> None:
        for path, before in reversed(self._before):
            if os.path.lexists(path):
                os.unlink(path)
            if before is None:
                continue
            what, content, mode = before
            if what == "link":
                os.symlink(content, path)
            else:
                with open(path, "wb") as f:
                    f.write(content)
                os.chmod(path, mode)
        self._before.clear()


async def change_checked(paths: PhpPaths, make: Callable[[FileTrial], None]) -> None:
    """Make a configuration change (`make` edits files through the trial), then check the whole
    configuration with ``php-fpm -t``: a new problem (one the configuration did not have before)
    or a failed check puts every file back and exits 78."""
    _code, before = await fpm_test(paths)
    trial = FileTrial()
    try:
        await trio.to_thread.run_sync(make, trial)
        code, after = await fpm_test(paths)
    except BaseException:
        await trio.to_thread.run_sync(trial.undo)
        raise
    fresh = [line for line in after if line not in before]
    if code != 0 or fresh:
        await trio.to_thread.run_sync(trial.undo)
        said = "; ".join(fresh or after)[:600] or f"exit {code}"
        raise JobError(f"php-fpm{paths.version} -t refused the change, nothing changed: {said}", EXIT_REFUSED)


async def default_version() -> str | None:
    """The version ``php`` runs (the Debian alternative), None when there is no alternative."""
    tool = which("update-alternatives")
    if tool is None:
        return None
    code, text, _err = await capture_command([tool, "--query", "php"])
    return parse_alternatives(text) if code == 0 else None


async def version_for_new_site() -> str | None:
    """The PHP a new php or wordpress site runs when none is asked for: the server's default (the
    ``php`` alternative, which its admin sets) when it has an FPM, else the newest FPM; None
    without any.

    Why: ``site.create`` makes the site's pool with it, without knowing the php domain's code.
    """
    fpms = await trio.to_thread.run_sync(php_fpm_versions)
    default = await default_version()
    if default in fpms:
        return default
    return fpms[-1] if fpms else None
