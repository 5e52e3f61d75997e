"""Running the public system tools and site commands: never through a shell.

`stream_command` reads a child's stdout and stderr incrementally and hands complete lines to the
job's `Output` (split on ``\\n``; a partial line waits for the rest; the last line may lack its
newline; UTF-8 decoded with ``errors="replace"``). `capture_command` is for tools whose whole
output is parsed. Children run in their own session; cancelling the job terminates the group:
TERM, then KILL after `KILL_GRACE_S` to the child and to whatever of its group is still alive.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from subprocess import DEVNULL, PIPE
from typing import Any

import trio

from agent.jobs.toolkit.output import EXIT_MISSING, STDERR, STDOUT, JobError, Output

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
READ_SIZE = 64 * 1024
MAX_LINE_BYTES = 1024 * 1024  # a longer line without a newline is cut here
KILL_GRACE_S = 5.0


def tool_env(**extra: str) -> dict[str, str]:
    """A small, predictable environment for a system tool: the C locale in UTF-8 and the system PATH.

    Why: a tool's messages and number formats must not depend on the agent's own environment (the
    handlers parse them), and no variable of the agent's reaches a child by accident.

    Args:
        extra: more variables for this tool (``DEBIAN_FRONTEND=noninteractive``...).
    """
    env = {"PATH": SYSTEM_PATH, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    env.update(extra)
    return env


def child_identity(options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` of a child (`subprocess.Popen`'s) with the groups of the account it runs as.

    Popen's ``user`` alone changes the uid only: the child would keep root's group and
    supplementary groups. So a ``user`` (a name or a uid) brings its account's primary group and
    that account's own supplementary groups (``/etc/group``), unless ``group`` or
    ``extra_groups`` say otherwise (``extra_groups=[]``: none at all). Options without a
    ``user`` are returned as they are.

    Raises:
        JobError: the ``user`` is no account of this system.
    """
    user = options.get("user")
    if user is None:
        return dict(options)
    try:
        account = pwd.getpwuid(user) if isinstance(user, int) else pwd.getpwnam(user)
    except KeyError:
        raise JobError(f"there is no system user {user} to run the tool as") from None
    identity = {"group": account.pw_gid, "extra_groups": os.getgrouplist(account.pw_name, account.pw_gid)}
    return {**identity, **options}


def which(tool: str, first_in: str | None = None) -> str | None:
    """The path of `tool` on the system PATH, or in the folder `first_in` before it; None when absent.

    Why: a handler checks for an optional tool (and says what it skips) without failing; for a tool
    it needs, `require` names the Debian package instead.

    Args:
        tool: the program's name.
        first_in: a folder looked in before the system PATH (a service's own, from the host layout).
    """
    return shutil.which(tool, path=SYSTEM_PATH if first_in is None else f"{first_in}{os.pathsep}{SYSTEM_PATH}")


# apt-get's options that wait (up to 2 minutes) for dpkg's lock rather than fail at once while
# another apt holds it (unattended-upgrades at work, another job).
APT_WAITS_FOR_ITS_LOCK = ("-o", "DPkg::Lock::Timeout=120")

# The Debian package of each tool a handler may need (the missing-software line names it).
PACKAGES = {
    "apt": "apt",
    "apt-config": "apt",
    "apt-get": "apt",
    "apt-mark": "apt",
    "cgi-fcgi": "libfcgi-bin",
    "chpasswd": "passwd",
    "chronyc": "chrony",
    "crontab": "cron",
    "dd": "coreutils",
    "dig": "bind9-dnsutils",
    "fail2ban-client": "fail2ban",
    "fail2ban-server": "fail2ban",
    "fallocate": "util-linux",
    "findmnt": "util-linux",
    "git": "git",
    "hostname": "hostname",
    "hostnamectl": "systemd",
    "journalctl": "systemd",
    "kill": "procps",
    "locale": "libc-bin",
    "localectl": "systemd",
    "logrotate": "logrotate",
    "mariadb": "mariadb-client",
    "mariadb-dump": "mariadb-client",
    "mkswap": "util-linux",
    "named": "bind9",
    "named-checkconf": "bind9-utils",
    "named-checkzone": "bind9-utils",
    "nft": "nftables",
    "nginx": "nginx",
    "openssl": "openssl",
    "passwd": "passwd",
    "pg_dump": "postgresql-client",
    "pg_restore": "postgresql-client",
    "php": "php-cli",
    "ps": "procps",
    "psql": "postgresql-client",
    "rm": "coreutils",
    "rndc": "bind9-utils",
    "service": "init-system-helpers",
    "shutdown": "systemd-sysv",
    "ss": "iproute2",
    "ssh-keygen": "openssh-client",
    "sshd": "openssh-server",
    "supervisorctl": "supervisor",
    "swapoff": "mount",
    "swapon": "mount",
    "sync": "coreutils",
    "systemctl": "systemd",
    "tail": "coreutils",
    "tee": "coreutils",
    "timedatectl": "systemd",
    "unattended-upgrade": "unattended-upgrades",
    "update-rc.d": "init-system-helpers",
    "useradd": "passwd",
    "userdel": "passwd",
    "usermod": "passwd",
    "vacuumdb": "postgresql-client",
    "visudo": "sudo",
    "zsh": "zsh",
}


def require(tool: str, purpose: str, package: str | None = None, first_in: str | None = None) -> str:
    """The path of `tool`, which the job cannot do without (looked for as `which` does).

    Why: a missing tool ends the job with exit 69 and a line naming its Debian package, never with
    a traceback or a shell's "command not found".

    Args:
        tool: the program's name.
        purpose: what it is needed for, ending the sentence "it is needed to ...".
        package: its Debian package (default: the one `PACKAGES` knows, else the tool's name).
        first_in: a folder looked in before the system PATH.

    Raises:
        JobError: exit `EXIT_MISSING`, the tool is not installed.
    """
    path = which(tool, first_in)
    if path is None:
        package = package or PACKAGES.get(tool, tool)
        raise JobError(
            f"{tool} is not installed on this server (Debian package {package}): it is needed to {purpose}",
            EXIT_MISSING,
        )
    return path


class LineSplitter:
    """Bytes in, complete lines out; ``\\n`` never occurs inside a UTF-8 sequence, so the
    complete part of a chunk decodes in one call."""

    def __init__(self) -> None:
        self._pending: list[bytes] = []
        self._pending_size = 0

    def feed(self, data: bytes | bytearray) -> list[str]:
        head, sep, tail = data.rpartition(b"\n")
        if not sep:
            self._pending.append(bytes(data))
            self._pending_size += len(data)
            if self._pending_size >= MAX_LINE_BYTES:
                return self.close()
            return []
        if self._pending:
            self._pending.append(bytes(head))
            head = b"".join(self._pending)
            self._pending.clear()
        self._pending_size = 0
        if tail:
            self._pending.append(bytes(tail))
            self._pending_size = len(tail)
        return bytes(head).decode("utf-8", "replace").split("\n")

    def close(self) -> list[str]:
        """The last line, when the stream ended without a newline."""
        if not self._pending:
            return []
        rest = b"".join(self._pending)
        self._pending.clear()
        self._pending_size = 0
        return [rest.decode("utf-8", "replace")]


GROUP_POLL_S = 0.05  # how often a cancelled child's group is looked at until it is empty


async def _terminate_group(process: trio.Process) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            process.kill()
        if wait is not None:
            with trio.move_on_after(wait):
                await process.wait()
                return


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process is in the group `pgid`: an orphan's zombie waits for
    PID 1 to reap it, which a container's init may never do."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


async def _stop_leftovers(pgid: int) -> None:
    """After a cancelled child exited: what is left of its process group (a grandchild that
    ignores TERM or outlives its parent) gets `KILL_GRACE_S` to go, then KILL. trio stops
    `_terminate_group` as soon as the child itself has exited, so the rest is stopped here."""
    with trio.move_on_after(KILL_GRACE_S):
        while _group_alive(pgid):  # noqa: ASYNC110 (the kernel sends no event when a group empties)
            await trio.sleep(GROUP_POLL_S)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class _GroupStopper:
    """The `deliver_cancel` of a child: TERM to its group, then KILL (`_terminate_group`). It keeps
    the group's id, so that `stop_leftovers` stops what outlived the child, once trio is done."""

    def __init__(self) -> None:
        self.pgid: int | None = None  # set once a cancel has stopped the child

    async def __call__(self, process: trio.Process) -> None:
        self.pgid = process.pid  # the child leads its own session, so its pid is its group's id
        await _terminate_group(process)

    async def stop_leftovers(self) -> None:
        if self.pgid is not None:
            with trio.CancelScope(shield=True):
                await _stop_leftovers(self.pgid)


async def _pump(receive: trio.abc.ReceiveStream, stream: str, out: Output) -> None:
    splitter = LineSplitter()
    while data := await receive.receive_some(READ_SIZE):
        lines = splitter.feed(data)
        if lines:
            out.lines(stream, lines)
            await out.drain()
    last = splitter.close()
    if last:
        out.lines(stream, last)


async def stream_command(
    out: Output,
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    stdin: int | None = None,
    stdout: int | None = None,
    **options: Any,
) -> int:
    """Run `argv`, streaming its stdout and stderr lines to `out` as they come; its exit code.

    Why: long tools (apt, dumps, deploys) show their progress live, in a session of their own so a
    cancelled job stops the whole process group (TERM, then KILL after `KILL_GRACE_S`).

    Args:
        out: where the lines go.
        argv: the program and its arguments (never through a shell).
        cwd: its working folder.
        env: its whole environment (default: `tool_env()`).
        stdin: a descriptor it reads its input from (a restore reading a file).
        stdout: a descriptor it writes its output to (a dump going to a file): then only its stderr
            is streamed.
        options: `subprocess.Popen`'s (``user``, ``group``, ``extra_groups``, ``pass_fds``); a
            ``user`` runs it with that account's own groups (`child_identity`).

    Raises:
        FileNotFoundError: the program is missing (`require` it first).
        JobError: the ``user`` is no account of this system.
    """
    stopper = _GroupStopper()
    try:
        async with trio.open_nursery() as nursery:
            process: trio.Process = await nursery.start(
                partial(
                    trio.run_process,
                    list(argv),
                    stdin=DEVNULL if stdin is None else stdin,
                    stdout=PIPE if stdout is None else stdout,
                    stderr=PIPE,
                    check=False,
                    cwd=cwd,
                    env=dict(env) if env is not None else tool_env(),
                    start_new_session=True,
                    deliver_cancel=stopper,
                    **child_identity(options),
                )
            )
            assert process.stderr is not None
            if process.stdout is not None:
                nursery.start_soon(_pump, process.stdout, STDOUT, out)
            nursery.start_soon(_pump, process.stderr, STDERR, out)
    except BaseException:
        await stopper.stop_leftovers()
        raise
    assert process.returncode is not None
    return process.returncode


async def capture_command(
    argv: Sequence[str],
    *,
    stdin: bytes = b"",
    env: Mapping[str, str] | None = None,
    **options: Any,
) -> tuple[int, str, str]:
    """Run `argv` to its end: (exit code, stdout, stderr), decoded with ``errors="replace"``.

    Why: for short tools whose output the handler parses or quotes (``nginx -t``, ``crontab -l``);
    the child runs in a session of its own, stopped as a group when the job is cancelled.

    Args:
        argv: the program and its arguments (never through a shell).
        stdin: the bytes given on its standard input.
        env: its whole environment (default: `tool_env()`).
        options: `stream_command`'s (a ``user`` with its own groups).

    Raises:
        FileNotFoundError: the program is missing (`require` it first).
        JobError: the ``user`` is no account of this system.
    """
    stopper = _GroupStopper()
    try:
        done = await trio.run_process(
            list(argv),
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=dict(env) if env is not None else tool_env(),
            start_new_session=True,
            deliver_cancel=stopper,
            **child_identity(options),
        )
    except BaseException:
        await stopper.stop_leftovers()
        raise
    return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")


# --- processes by pid (the services the agent reloads) -----------------------------------------


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


PF_EXITING = 0x4  # a task's flag (linux/sched.h): set when it starts to exit, kept while a zombie


async def all_of(*steps: Callable[[], Awaitable[object]]) -> None:
    """Run `steps` at once and return when all have ended.

    Why: a job's independent waits (nginx's old workers leaving, a PHP-FPM socket appearing)
    overlap instead of adding up. A failing step does not stop the others (each is a bounded
    wait or a tool run that should finish either way).

    Raises:
        Exception: the first failure, as itself (not in an exception group), once all ended.
    """
    failures: list[Exception] = []

    async def run(step: Callable[[], Awaitable[object]]) -> None:
        try:
            await step()
        except Exception as exc:
            failures.append(exc)

    async with trio.open_nursery() as nursery:
        for step in steps:
            nursery.start_soon(run, step)
    if failures:
        raise failures[0]


def process_exiting(pid: int) -> bool:
    """`pid` is gone, exiting, or exited and not yet reaped by its parent (a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return bool(int(stat.rsplit(")", 1)[1].split()[6]) & PF_EXITING)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def read_pid(pidfile: Path) -> int | None:
    """The live process a pidfile names, or None."""
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if pid_alive(pid) else None


def child_pids(pid: int) -> set[int]:
    """The live children of `pid` (from /proc)."""
    children: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            children.add(int(entry.name))
    return children


def apt_env() -> dict[str, str]:
    """The environment apt and dpkg run in: `tool_env` without a question or a pager, and no restart prompt."""
    return tool_env(DEBIAN_FRONTEND="noninteractive", APT_LISTCHANGES_FRONTEND="none", NEEDRESTART_MODE="l")
