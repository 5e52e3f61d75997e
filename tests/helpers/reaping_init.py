"""PID 1 of a test's private PID namespace: runs the command it is given, reaps every orphan, and
exits with the command's status (the kernel then ends whatever else still runs in the namespace).

An init script's daemon (nginx, HAProxy) is an orphan, a child of PID 1: without a PID 1 that
reaps, a daemon stopped by its init script stays a zombie and ``start-stop-daemon --stop
--retry`` waits for it in vain. Usage: ``python reaping_init.py COMMAND [ARG...]``.
"""

from __future__ import annotations

import os
import subprocess
import sys


def main() -> int:
    command = subprocess.Popen(sys.argv[1:])
    while True:
        pid, status = os.wait()  # any child: the command, or an orphan handed to PID 1
        if pid == command.pid:
            return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
