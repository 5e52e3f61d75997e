"""Every path fleetdeck uses by default, named in one place.

The towers never pick a path on their own: the composition root (`fleetdeck.cli`,
`fleetdeck.local`) takes them from here and passes them down as arguments. This is the only
module that asks `platformdirs` where the user's folders are.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import platformdirs

log = logging.getLogger(__name__)

APP_NAME = "fleetdeck"
AGENT_NAME = "fleetdeck-agent"
# Root keeps its state where system services do: /root is closed to every other account, and a
# root stack's site users must reach their homes in its data folder.
ROOT_AGENT_STATE_DIR = Path("/var/lib/fleetdeck-agent")
ROOT_DATA_DIR = Path("/var/lib/fleetdeck")
PRIVATE = 0o700
# A root stack's data folder: its sites' users pass through it to their homes (PHP-FPM runs
# their code as them) and nginx's workers to the sites' files, but nobody else may list it;
# everything else in it stays its owner's alone (mode 0600 files, 0700 folders).
PASSABLE = 0o711


def private_dir(folder: Path, mode: int = PRIVATE) -> Path:
    """`folder`, made (with its parents) or set to `mode` (0700, or `PASSABLE`): a data folder
    holds the database and secrets, and other local accounts must not even list it. Returns `folder`."""
    folder.mkdir(mode=mode, parents=True, exist_ok=True)
    was = stat.S_IMODE(folder.stat().st_mode)
    if was != mode:  # tightened, or made passable (a root stack's folder of an earlier version)
        folder.chmod(mode)
        if was & ~mode:
            log.warning("%s was open to other accounts (mode %04o): tightened to %04o", folder, was, mode)
    return folder


def stack_dir(folder: Path) -> Path:
    """A local stack's data folder (or the sites' home in it), made or tightened: private,
    passable by its sites' users when the stack runs as root (`PASSABLE`). Returns `folder`."""
    return private_dir(folder, PASSABLE if os.geteuid() == 0 else PRIVATE)


def data_dir() -> Path:
    """The user's fleetdeck data folder (e.g. ``~/.local/share/fleetdeck``; root's is
    `ROOT_DATA_DIR`: a root stack's sites' users cannot pass ``/root``)."""
    if os.geteuid() == 0:
        return ROOT_DATA_DIR
    return Path(platformdirs.user_data_dir(APP_NAME))


def local_stack_dir() -> Path:
    """The data folder of the embedded local stack that `fleetdeck` opens without `--url`."""
    return data_dir() / "local"


def default_db_url() -> str:
    """The database of `fleetdeck serve` and `fleetdeck admin` when neither --db nor FLEETDECK_DB says."""
    return f"sqlite:///{data_dir() / 'fleetdeck.db'}"


def session_store_dir() -> Path:
    """Where the TUI keeps its session tokens for remote control planes (files of mode 0600)."""
    return Path(platformdirs.user_config_dir(APP_NAME)) / "sessions"


def log_dir() -> Path:
    return Path(platformdirs.user_log_dir(APP_NAME))


def tui_log() -> Path:
    """The TUI's log: anything it wrote to the terminal would tear the screen apart."""
    return log_dir() / "tui.log"


def agent_state_dir() -> Path:
    """The agent's state folder (site registry, transfers) when --state-dir does not say."""
    if os.geteuid() == 0:
        return ROOT_AGENT_STATE_DIR
    return Path(platformdirs.user_state_dir(AGENT_NAME))


@dataclass(frozen=True)
class StackLayout:
    """The files of one local stack's data folder (`fleetdeck local --data-dir DIR`)."""

    root: Path

    @property
    def home(self) -> Path:
        """The demo sites: the local agent's home (as root `PASSABLE`, as the data folder)."""
        return self.root / "home"

    @property
    def agent_state(self) -> Path:
        return self.root / "agent"

    @property
    def host_layout(self) -> Path:
        """The local agent's host layout file: its nginx, PHP-FPM and MariaDB are the stack's own
        (`fleetdeck.local_nginx`, `fleetdeck.local_php`, `fleetdeck.local_mariadb`)."""
        return self.root / "host-layout.json"

    @property
    def nginx(self) -> Path:
        """The stack's own nginx: its configuration, the sites' server blocks, PID file and logs."""
        return self.root / "nginx"

    @property
    def site_logs(self) -> Path:
        """The sites' web and PHP logs, one folder per site (the agent's ``system.sites_log_dir``)."""
        return self.root / "site-logs"

    @property
    def php(self) -> Path:
        """The stack's own PHP-FPM: per version its configuration, pools, ini, PID file and log; the sockets."""
        return self.root / "php"

    @property
    def mariadb(self) -> Path:
        """The stack's own MariaDB: its data folder, socket, PID file and log."""
        return self.root / "mariadb"

    @property
    def agent_token(self) -> Path:
        return self.agent_state / "agent-token"

    @property
    def database(self) -> Path:
        return self.root / "fleetdeck.db"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.database}"

    @property
    def credentials(self) -> Path:
        """What `fleetdeck local` writes once it runs: base URL, demo login, session token."""
        return self.root / "demo-credentials.json"

    @property
    def demo_password(self) -> Path:
        return self.root / "demo-password"

    @property
    def run_file(self) -> Path:
        """Written by a running `fleetdeck local` (base URL, pid, version), removed when it stops:
        how the next TUI start finds the stack still running."""
        return self.root / "run.json"

    @property
    def start_lock(self) -> Path:
        """Locked (flock, exclusive) by a TUI while it finds or starts this stack, and by the stack
        while it exits idle: two starts never make two stacks, nor join one that is going."""
        return self.root / "start.lock"

    @property
    def attach_lock(self) -> Path:
        """Locked (flock, shared) by every TUI using this stack: the stack exits idle only once it
        can lock it exclusively. The kernel releases a TUI's lock however it ends."""
        return self.root / "tui.lock"

    @property
    def stderr_log(self) -> Path:
        """The stack's stderr when a launcher runs it as a child process."""
        return self.root / "stack.log"
