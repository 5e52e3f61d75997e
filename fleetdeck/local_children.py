"""The services the local stack runs as children of its own: its nginx, PHP-FPM masters, MariaDB.

Each runs in the foreground, a child of the stack that stops with it: cancelled, the stack tells
its master to quit (SIGQUIT, the graceful stop of nginx, PHP-FPM and mariadbd) and waits for it. A stack
killed outright cannot tell it: util-linux's ``setpriv --pdeathsig`` has the kernel send the
master SIGQUIT when the stack dies; a master left all the same (no setpriv) is quit at the next
start, known by its PID file and the file (or folder) its command line names.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc

from agent.jobs.toolkit.proc import pid_alive, read_pid, which

log = logging.getLogger("fleetdeck.local")

QUIT_WAIT_S = 10.0  # then it is killed
LEFT_OVER_WAIT_S = 10.0


@dataclass(frozen=True)
class Child:
    """One service the stack runs."""

    name: str  # for the log: "nginx", "PHP-FPM 8.2"
    argv: list[str]  # in the foreground
    conf: str  # its configuration file (or data folder), on its master's command line: how one left behind is known
    pid_file: Path  # written by its master
    log: Path  # where it says why it stopped
    env: Mapping[str, str] | None = None  # added to the stack's own
    # A blocking step before the start (a first start's data folder), False when it failed: run
    # in a worker thread while the stack goes on without waiting.
    setup: Callable[[], bool] | None = None


async def run_child(child: Child, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Run `child` until cancelled (then its master is told to quit, and waited for).

    The kernel sends the pdeathsig when the *thread* that started the child ends, not the
    process. So the child is started here, on the stack's own event-loop thread, which lives as
    long as the stack: `anyio.open_process` under trio starts it on a worker thread, whose end
    (idle for 10 s) quit nginx under a running stack."""
    await _stop_left_over(child)
    if child.setup is not None:
        task_status.started()
        task_status = anyio.TASK_STATUS_IGNORED
        if not await anyio.to_thread.run_sync(child.setup):
            return
    argv = child.argv
    setpriv = which("setpriv")
    if setpriv is not None:
        argv = [setpriv, "--pdeathsig", "QUIT", "--", *argv]
    env = {**os.environ, **child.env} if child.env is not None else None
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env)  # noqa: ASYNC220 (on this thread: see above)
    task_status.started()
    try:
        code = await anyio.to_thread.run_sync(process.wait, abandon_on_cancel=True)
        log.warning("the stack's %s exited %s: see %s", child.name, code, child.log)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGQUIT)
            with anyio.CancelScope(shield=True):
                try:
                    await anyio.to_thread.run_sync(process.wait, QUIT_WAIT_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


async def _stop_left_over(child: Child) -> None:
    """Quit the master of an earlier run of this stack that was killed (it outlives it)."""
    pid = await anyio.to_thread.run_sync(read_pid, child.pid_file)
    if pid is None or not _runs_conf(pid, child.conf):
        return
    log.info("quitting the %s (pid %s) a stopped run of this stack left behind", child.name, pid)
    os.kill(pid, signal.SIGQUIT)
    with anyio.move_on_after(LEFT_OVER_WAIT_S):
        while pid_alive(pid):  # noqa: ASYNC110 (not our child: no exit to wait on)
            await anyio.sleep(0.05)


def _runs_conf(pid: int, conf: str) -> bool:
    """Whether `pid` runs with `conf` (a master rewrites its title, and keeps the file in it:
    "nginx: master process ... -c CONF", "php-fpm: master process (CONF)"; mariadbd keeps its
    arguments, ``--datadir=DIR``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return conf.encode() in f.read()
    except OSError:
        return False
