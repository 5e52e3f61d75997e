"""Finding text in files: the `Needle` content search (``fs.search``) and ``fs.find`` match with,
and ``fs.find`` itself, the viewer's ``/`` and go-to-line in one file of any size.

A file is read through the jail's descriptor (`read.open_regular`), a block of `SEARCH_BLOCK`
bytes at a time with ``pread``: nothing is decoded unless the needle is not ASCII, so a 1 GiB log
is searched at about the speed of its reading. Line numbers count newlines from the file's start,
as content search numbers its lines; `LINE_MARKS` keeps where the last answers were, so the next
search of the same file (`n` in the viewer) counts from there, not from the file's start.
"""

from __future__ import annotations

import bisect
import os
import re
import threading
from collections import OrderedDict
from typing import Any

from agent.files.fdops import CancelToken
from agent.files.jail import Jail
from agent.files.read import open_regular

SEARCH_BLOCK = 1024 * 1024  # what one read takes: larger blocks were slower here (the CPU's caches)
MAX_UTF8_BYTES = 4


class Needle:
    """What is searched for, in the bytes of a text file: case-insensitive unless `case_sensitive`.

    An ASCII needle (or a case-sensitive one) is found in the bytes as they are (lowered: ASCII
    letters only, which no byte of a multi-byte UTF-8 character is); another is matched in the
    block decoded, UTF-8 with the bytes that are not UTF-8 kept as they are, so every index maps
    back to a byte of the file."""

    def __init__(self, query: str, *, case_sensitive: bool = False) -> None:
        self.query = query
        self._lower = not case_sensitive and query.isascii()
        self._regex = None if case_sensitive or query.isascii() else re.compile(re.escape(query), re.IGNORECASE)
        self._bytes = (query.lower() if self._lower else query).encode("utf-8")
        # The most bytes a match spans: a block overlaps the next by one less, so no match is cut.
        self.width = len(query) * MAX_UTF8_BYTES if self._regex is not None else len(self._bytes)

    def find(self, block: bytes, end: int | None = None) -> int:
        """The index of the first match in `block` (starting before `end`, if given), or -1."""
        if self._regex is None:
            haystack = block.lower() if self._lower else block
            stop = len(block) if end is None else min(len(block), end + len(self._bytes) - 1)
            return haystack.find(self._bytes, 0, stop)
        text = _decoded(block)
        match = self._regex.search(text)
        if match is None:
            return -1
        at = _byte_index(text, match.start())
        return at if end is None or at < end else -1

    def rfind(self, block: bytes, end: int) -> int:
        """The index of the last match in `block` starting before `end`, or -1."""
        if self._regex is None:
            haystack = block.lower() if self._lower else block
            return haystack.rfind(self._bytes, 0, min(len(block), end + len(self._bytes) - 1))
        text = _decoded(block)
        starts = [_byte_index(text, match.start()) for match in self._regex.finditer(text)]
        return max((at for at in starts if at < end), default=-1)

    def in_line(self, line: str) -> bool:
        """Whether a decoded line holds the needle (content search's lines)."""
        if self._regex is not None:
            return self._regex.search(line) is not None
        return self.query.lower() in line.lower() if self._lower else self.query in line


def _decoded(block: bytes) -> str:
    return block.decode("utf-8", "surrogateescape")


def _byte_index(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8", "surrogateescape"))


class LineMarks:
    """Offsets of recently searched files with the newlines before each, to count a line number
    from the nearest one. Keyed by the file's (device, inode), valid while its size, mtime and
    ctime are those seen (a log written since is counted afresh); bounded in files and marks."""

    MAX_FILES = 16
    MAX_MARKS = 256

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: OrderedDict[tuple[int, int], tuple[tuple[int, int, int], list[tuple[int, int]]]] = OrderedDict()

    def nearest(self, st: os.stat_result, offset: int) -> tuple[int, int]:
        """The known (offset, newlines before it) nearest to `offset`; (0, 0) at worst."""
        with self._lock:
            marks = self._marks(st)
            at = bisect.bisect_left(marks, (offset, -1))
            near = [(0, 0), *marks[max(0, at - 1) : at + 1]]
            return min(near, key=lambda mark: abs(mark[0] - offset))

    def add(self, st: os.stat_result, offset: int, newlines: int) -> None:
        with self._lock:
            marks = self._marks(st)
            bisect.insort(marks, (offset, newlines))
            if len(marks) > self.MAX_MARKS:
                del marks[len(marks) // 2]  # the first and last stay: the file's two ends
            self._files[(st.st_dev, st.st_ino)] = ((st.st_size, st.st_mtime_ns, st.st_ctime_ns), marks)
            self._files.move_to_end((st.st_dev, st.st_ino))
            while len(self._files) > self.MAX_FILES:
                self._files.popitem(last=False)

    def _marks(self, st: os.stat_result) -> list[tuple[int, int]]:
        known = self._files.get((st.st_dev, st.st_ino))
        if known is None or known[0] != (st.st_size, st.st_mtime_ns, st.st_ctime_ns):
            return []
        return known[1]


LINE_MARKS = LineMarks()


def find(
    jail: Jail,
    path: str,
    *,
    query: str | None,
    line: int | None,
    offset: int,
    backward: bool,
    case_sensitive: bool,
    token: CancelToken,
) -> dict[str, Any]:
    """``fs.find``: ``{offset, line, size}``. With `query`, its first match at or after `offset`
    (`backward`: the last one starting before `offset`); with `line`, where that line starts (the
    last line's start when the file has fewer). ``offset`` and ``line`` are null when nothing
    matches.

    Raises:
        RpcError: ``validation_error`` for what is not a regular file; the jail's refusals.
        OperationCancelled: the call was cancelled (checked between blocks).
    """
    fd, st = open_regular(jail, path)
    try:
        size = st.st_size
        if line is not None:
            at, number = _line_start(fd, line, size, token)
            LINE_MARKS.add(st, at, number - 1)
            return {"offset": at, "line": number, "size": size}
        assert query is not None  # the params give one of them
        needle = Needle(query, case_sensitive=case_sensitive)
        if backward:
            found = _last_match(fd, needle, min(offset, size), token)
            if found is None:
                return {"offset": None, "line": None, "size": size}
            newlines = _newlines_before(fd, st, found, token)
        else:
            matched = _first_match(fd, needle, offset, token)
            if matched is None:
                return {"offset": None, "line": None, "size": size}
            found, between = matched
            newlines = _newlines_before(fd, st, offset, token) + between
            LINE_MARKS.add(st, found, newlines)
        return {"offset": found, "line": newlines + 1, "size": size}
    finally:
        os.close(fd)


def _first_match(fd: int, needle: Needle, start: int, token: CancelToken) -> tuple[int, int] | None:
    """The first match at or after `start`, and the newlines between `start` and it (counted on the
    way: the blocks are read once)."""
    overlap = needle.width - 1
    pos, newlines = start, 0
    while True:
        token.check()
        block = os.pread(fd, SEARCH_BLOCK + overlap, pos)
        last = len(block) < SEARCH_BLOCK + overlap  # the file ends in it: it is searched whole
        found = needle.find(block, None if last else SEARCH_BLOCK)
        if found >= 0:
            return pos + found, newlines + block.count(b"\n", 0, found)
        if last:
            return None
        newlines += block.count(b"\n", 0, SEARCH_BLOCK)
        pos += SEARCH_BLOCK


def _last_match(fd: int, needle: Needle, before: int, token: CancelToken) -> int | None:
    """The last match starting before `before`, read block by block towards the file's start."""
    end = before
    while end > 0:
        token.check()
        low = max(0, end - SEARCH_BLOCK)
        block = os.pread(fd, end - low + needle.width - 1, low)
        found = needle.rfind(block, end - low)
        if found >= 0:
            return low + found
        end = low
    return None


def _newlines_before(fd: int, st: os.stat_result, offset: int, token: CancelToken) -> int:
    """The newlines in the file before `offset`, counted from the nearest of `LINE_MARKS`."""
    mark, newlines = LINE_MARKS.nearest(st, offset)
    counted = _newlines(fd, min(mark, offset), max(mark, offset), token)
    newlines += counted if mark <= offset else -counted
    LINE_MARKS.add(st, offset, newlines)
    return newlines


def _newlines(fd: int, start: int, end: int, token: CancelToken) -> int:
    count = 0
    for pos in range(start, end, SEARCH_BLOCK):
        token.check()
        count += os.pread(fd, min(SEARCH_BLOCK, end - pos), pos).count(b"\n")
    return count


def _line_start(fd: int, line: int, size: int, token: CancelToken) -> tuple[int, int]:
    """Where line `line` (1: the first) starts, and its number: the last line's when the file has
    fewer (a newline at the file's end starts no line, as `wc -l` counts)."""
    pos, number, start, previous = 0, 1, 0, 0  # line `number` starts at `start`, the one before at `previous`
    while number < line:
        token.check()
        block = os.pread(fd, SEARCH_BLOCK, pos)
        if not block:
            break
        newlines = block.count(b"\n")
        if number + newlines < line:  # it starts past this block: only its last two newlines matter
            if newlines:
                last = block.rindex(b"\n")
                before = block.rfind(b"\n", 0, last)
                previous = pos + before + 1 if before >= 0 else start
                start = pos + last + 1
            number += newlines
            pos += len(block)
            continue
        at = before = -1
        for _ in range(line - number):
            before, at = at, block.index(b"\n", at + 1)
        previous = pos + before + 1 if before >= 0 else start
        start, number = pos + at + 1, line
    if start >= size and number > 1:  # past the last newline: the line before it is the last
        return previous, number - 1
    return start, number
