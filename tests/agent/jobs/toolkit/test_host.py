"""When an nginx reload took (`agent.jobs.toolkit.host.nginx_reload_took`, the one check behind the
sites' reloads and the load balancers' engine): new workers under the master, and every old one
gone or leaving. Real processes stand in for the workers, this test process for their master."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from agent.jobs.toolkit.host import nginx_reload_took, worker_leaving
from agent.jobs.toolkit.proc import pid_alive
from tests.helpers import wait_until


def a_worker() -> subprocess.Popen[bytes]:
    """A live child that serves until its stdin closes."""
    return subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)


def test_an_old_worker_that_exited_before_its_master_reaped_it_has_left() -> None:
    """An old worker with nothing left to serve exits right after saying "shutting down"; until its
    master reaps it, its cmdline reads empty. Taken for a worker still serving, it made a reload
    that had taken fail with "nginx started no new worker process after the reload"."""
    old = a_worker()
    assert not worker_leaving(old.pid)  # running, and not shutting down
    assert old.stdin is not None
    old.stdin.close()
    wait_until(lambda: not pid_alive(old.pid))  # exited: a zombie, as this process does not reap it yet
    new = a_worker()
    try:
        assert Path(f"/proc/{old.pid}").exists() and Path(f"/proc/{old.pid}/cmdline").read_bytes() == b""
        assert worker_leaving(old.pid)
        assert nginx_reload_took(os.getpid(), {old.pid})
        old.wait()
        assert worker_leaving(old.pid)  # reaped: gone
    finally:
        new.kill()
        new.wait()
