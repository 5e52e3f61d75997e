"""The agent's state folder is private: site registry, cron record, transfer keys, job records.

The folder is 0700 and its files 0600 from their first write. A folder left readable by an older
agent (or made by hand) is tightened when the agent starts, with a log line for each change:
other local accounts must not read what the agent keeps about the sites it serves.
"""

from __future__ import annotations

import logging
import os
import stat
from typing import IO

log = logging.getLogger("fleetdeck.agent")

_OTHERS = 0o077  # group and world bits


def prepare_state_dir(state_dir: str) -> None:
    """Make `state_dir` (0700) or tighten it and everything in it to its owner only."""
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    _tighten(state_dir)
    for folder, dirs, files in os.walk(state_dir):
        for name in (*dirs, *files):
            _tighten(os.path.join(folder, name))


def open_lock_file(path: str) -> IO[str]:
    """The lock file beside a state file (opened for `flock`), created 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, "a")


def _tighten(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode) or not mode & _OTHERS:
        return  # a symbolic link has no mode of its own; chmod would change its target
    os.chmod(path, mode & ~_OTHERS)
    log.warning("%s was open to other accounts (mode %04o): tightened to %04o", path, mode, mode & ~_OTHERS)
