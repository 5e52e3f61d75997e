"""Removing the temporary names a dead agent left (see `agent.files.inflight` for the journal).

`start` runs when the agent starts: every entry of a process that is no longer alive is settled.
`scope` runs when the agent first touches a scope: the entries beneath it, again (an entry of a
process that was still alive at start, such as another agent's receive command, may be dead now).

Settling an entry goes through the home's jail: its folder is resolved beneath the home without
following a link at its end, and must still be the folder the entry names (same device and
inode): a folder swapped for another since is left alone. The name must still be one of
`inflight.temp_name`'s, with the tag of the process the entry names. Then a file or a folder tree
is removed without following any link (`fdops.remove_entry`); an ``.old`` folder, set aside by a
replace that was killed before the new one took its name, is put back when the name is still free.
"""

from __future__ import annotations

import logging
import os

from agent.files import inflight
from agent.files.fdops import lstat_at, never, remove_entry, rename_noreplace
from agent.files.jail import Jail
from contract.link.protocol import RpcError

log = logging.getLogger("fleetdeck.agent.files")

_O_PATH_DIR = os.O_PATH | os.O_DIRECTORY


def start(state_dir: str, home: str) -> int:
    """Open the journal, make it the process's, and settle the entries of dead processes; the
    number of leftovers removed or put back. Blocking."""
    journal = inflight.Journal(state_dir, home)
    inflight.activate(journal)
    return settle(journal, home, "")


def scope(home: str, prefix: str) -> int:
    """Settle the dead processes' entries beneath `prefix` (a site's folder below the home; ""
    for all of it), if a journal is active. Blocking."""
    journal = inflight.active()
    return settle(journal, home, prefix) if journal is not None else 0


def settle(journal: inflight.Journal, home: str, prefix: str) -> int:
    settled = 0
    try:
        jail = Jail(home)
    except OSError as exc:
        log.warning("cannot open %s to remove leftover temporary names: %s", home, exc.strerror)
        return 0
    try:
        entries = journal.entries()
    except OSError as exc:  # the state folder is the agent's: a fault there must not fail a file call
        jail.close()
        log.warning("cannot read the journal of temporary names in %s: %s", journal.folder, exc.strerror)
        return 0
    with jail:
        for entry in entries:
            if prefix and entry.folder != prefix and not entry.folder.startswith(prefix + "/"):
                continue
            if entry.process == journal.process or entry.process.alive():
                continue
            try:
                settled += _settle(jail, entry)
            except (OSError, RpcError) as exc:
                reason = exc.message if isinstance(exc, RpcError) else exc.strerror
                log.warning("leftover %s in %s/%s not removed: %s", entry.name, home, entry.folder, reason)
            journal.drop(entry.file)
    return settled


def _settle(jail: Jail, entry: inflight.Entry) -> int:
    parsed = inflight.parse_temp(entry.name)
    if parsed is None or "/" in entry.name or entry.file != f"{parsed[0]}-{parsed[1]}.json":
        return 0  # not a name of ours, or not the one this entry was written for: never touched
    try:
        dir_fd = jail.open(entry.folder, _O_PATH_DIR, follow_last=False)
    except RpcError as exc:
        if exc.code in ("not_found", "path_outside_scope", "validation_error"):
            return 0  # the folder is gone or became a link: nothing of ours to find there
        raise
    try:
        st = os.fstat(dir_fd)
        if (st.st_dev, st.st_ino) != (entry.device, entry.inode) or lstat_at(dir_fd, entry.name) is None:
            return 0
        where = f"{jail.root}/{entry.folder}".rstrip("/")
        if entry.restore is not None and lstat_at(dir_fd, entry.restore) is None:
            rename_noreplace(dir_fd, entry.name, dir_fd, entry.restore)
            log.info("put back %s in %s, set aside by a replace that was cut short", entry.restore, where)
            return 1
        remove_entry(dir_fd, entry.name, never())
        log.info("removed the leftover %s in %s", entry.name, where)
        return 1
    finally:
        os.close(dir_fd)
