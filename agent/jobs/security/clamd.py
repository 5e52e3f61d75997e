"""clamd, ClamAV's daemon, asked over its unix socket (``LocalSocket`` of its ``clamd.conf``; the
Debian package clamav-daemon listens at ``/run/clamav/clamd.ctl`` and runs as the user clamav).

The agent never names a file to clamd: it opens each one itself, beneath a site's jail, and
streams the bytes of that descriptor (``zINSTREAM``: chunks of a 4-byte big-endian length then the
data, ended by a chunk of length 0). clamd answers ``stream: OK``, ``stream: <signature> FOUND``,
or, past its ``StreamMaxLength`` (25 MiB by default), ``INSTREAM size limit exceeded. ERROR``, and
closes the connection. The daemon loads the signature database once, for every scan it serves.
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

CHUNK = 256 * 1024  # bytes per INSTREAM chunk
ANSWER_S = 300.0  # how long an answer may take: clamd gives up on a file after its MaxScanTime (120 s)
PING_S = 5.0
_END = struct.pack("!I", 0)
_FOUND = " FOUND"
_STREAM = "stream: "
_SIZE_LIMIT = "INSTREAM size limit exceeded"


class ClamdError(Exception):
    """clamd stopped answering, or answered something that is not a scan's answer."""


@dataclass(frozen=True)
class Verdict:
    """clamd's answer for one file: the signature it found, or why it did not scan the file."""

    signature: str | None = None
    not_scanned: str | None = None


class Clamd:
    """The daemon at `path`: one connection per command (clamd serves each on a thread of its pool,
    so several callers may scan at once). Blocking.

    Connecting raises OSError (no socket, refused, not permitted) when no clamd answers there.
    """

    def __init__(self, path: str, timeout: float = ANSWER_S) -> None:
        self.path = path
        self.timeout = timeout

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.path)
        except BaseException:
            sock.close()
            raise
        return sock

    def command(self, name: str) -> str:
        """clamd's answer to a command without data (``PING``: ``PONG``; ``VERSION``)."""
        with self._connect() as sock:
            sock.sendall(f"z{name}\0".encode())
            return _answer(sock)

    def version(self) -> tuple[str, str | None]:
        """(engine version, signature database version and date or None): ``VERSION`` answers
        ``ClamAV 1.4.6/27450/Mon Nov 24 08:31:23 2026`` (only ``ClamAV 1.4.6`` when it has no
        official database, just databases of one's own)."""
        said = self.command("VERSION")
        engine, _, database = said.removeprefix("ClamAV ").partition("/")
        return engine, database or None

    def scan(self, fd: int) -> Verdict:
        """Stream what is left to read of `fd` (not closed here) to clamd.

        Raises:
            ClamdError: the connection failed mid-way or clamd's answer is not a scan's.
            OSError: no clamd answers at the socket.
        """
        with self._connect() as sock:
            try:
                sock.sendall(b"zINSTREAM\0")
                unread = _send_file(sock, fd)
            except (BrokenPipeError, ConnectionResetError):
                unread = None  # clamd stopped reading (past its StreamMaxLength): its answer says why
            if unread is not None:
                return Verdict(not_scanned=f"could not be read: {unread}")
            try:
                said = _answer(sock)
            except OSError as exc:
                raise ClamdError(f"clamd did not answer: {exc.strerror or exc}") from None
        return _verdict(said)


def _send_file(sock: socket.socket, fd: int) -> str | None:
    """Send the file's bytes as INSTREAM chunks, then the end; or the reason it could not be read
    (the connection is then dropped unfinished: clamd scans nothing of it)."""
    while True:
        try:
            data = os.read(fd, CHUNK)
        except OSError as exc:
            return exc.strerror or str(exc)
        if not data:
            sock.sendall(_END)
            return None
        sock.sendall(struct.pack("!I", len(data)) + data)


def _answer(sock: socket.socket) -> str:
    """One answer: the bytes up to clamd's NUL (the ``z`` commands' delimiter) or its close."""
    said = b""
    while not said.endswith(b"\0"):
        more = sock.recv(4096)
        if not more:
            break
        said += more
    if not said:
        raise ClamdError("clamd closed the connection without an answer")
    return said.rstrip(b"\0").decode("utf-8", "replace").strip()


def _verdict(said: str) -> Verdict:
    if said.startswith(_SIZE_LIMIT):
        return Verdict(not_scanned="larger than clamd's StreamMaxLength")
    if said.endswith(" ERROR"):
        return Verdict(not_scanned=f"clamd: {said.removesuffix(' ERROR')}")
    if not said.startswith(_STREAM):
        raise ClamdError(f"clamd answered {said[:200]!r}")
    found = said.removeprefix(_STREAM)
    if found == "OK":
        return Verdict()
    if found.endswith(_FOUND):
        return Verdict(signature=found.removesuffix(_FOUND))
    raise ClamdError(f"clamd answered {said[:200]!r}")
