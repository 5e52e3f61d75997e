"""A configuration file changed in place and taken back when its service's own check refuses it
(``sshd -t``, ``fail2ban-client -t`` read the whole configuration, drop-ins included, so the
new file has to be where they look)."""

from __future__ import annotations

import os

import trio

from agent.jobs.toolkit.output import EXIT_REFUSED, JobError
from agent.jobs.toolkit.proc import capture_command
from agent.sites import write_atomically


def read_or_none(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _put_back(path: str, previous: bytes | None, mode: int) -> None:
    if previous is not None:
        write_atomically(path, previous, mode)
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


async def replace_checked(path: str, content: str, check: list[str], what: str, mode: int = 0o644) -> bool:
    """Put `content` at `path` (atomically) and run `check`; when it fails, the previous file is
    put back and a JobError(EXIT_REFUSED) carries the check's error lines. False when the file
    already held `content` (nothing to do)."""
    previous = await trio.to_thread.run_sync(read_or_none, path)
    if previous == content.encode():
        return False
    await trio.to_thread.run_sync(lambda: os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True))
    await trio.to_thread.run_sync(write_atomically, path, content.encode(), mode)
    try:
        code, text, err = await capture_command(check)
    except BaseException:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_put_back, path, previous, mode)
        raise
    if code != 0:
        await trio.to_thread.run_sync(_put_back, path, previous, mode)
        lines = [line for line in (err + "\n" + text).splitlines() if line.strip() and "WARNING" not in line]
        said = " ".join(" ".join(lines[-3:]).split())[-500:]
        raise JobError(f"{what} refused the change (exit {code}): {said}; the previous {path} is back", EXIT_REFUSED)
    return True
