"""Paging through a file of any size with ranged reads: the viewer's model, with no widget in it.

The file is never loaded whole. `WindowCache` keeps the few chunks around what is on screen and
reads others as they are needed; `Pager` knows where the screen starts (a byte offset: the start
of a line, or of a 16-byte row in hex) and computes the rows of a screen and the moves. Searches
and go-to-line run on the server (`fs/find`: the file is read there, not through windows). Lines
are cut from bytes before they are decoded, so a character split across two windows is decoded
whole. It runs in trio (the API client's side of the bridge); the screen gets `Page`s back.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import trio
from rich.cells import chop_cells

from contract.models import FileWindow, FsFound
from tui.text import printable_line

CHUNK = 256 * 1024  # one cached window: the end of a log is one small read
KEEP_CHUNKS = 8  # at most 2 MiB of the file in memory
MAX_LINE = 16 * 1024  # a longer line (minified code, a line-less file) is shown in pieces
HEX_WIDTH = 16  # bytes a hex row shows, as `hexdump -C`
SNIFF = 8192
ROTATED_LOG = re.compile(r"\.log(\.\d+)?$")  # access.log, access.log.1 (not catalog.json, not a .logo)

Fetch = Callable[[int, int], Awaitable[FileWindow]]


class Find(Protocol):
    """`client.files.find` on the viewer's file: a match or a line's start, found on the server."""

    def __call__(
        self, *, query: str | None = None, line: int | None = None, offset: int = 0, backward: bool = False,
        case_sensitive: bool = False,
    ) -> Awaitable[FsFound]: ...  # fmt: skip


@dataclass(frozen=True)
class Found:
    """Where a search or a go-to-line took the screen: the page, the byte it found and its line."""

    page: Page
    offset: int
    line: int | None


Mode = Literal["text", "hex"]


def looks_binary(head: bytes) -> bool:
    """A NUL byte or bytes that are not UTF-8 in the first 8 KiB (a character cut at its end is fine)."""
    sample = head[:SNIFF]
    if b"\0" in sample:
        return True
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        return not (len(sample) == SNIFF and exc.start >= len(sample) - 3 and exc.reason == "unexpected end of data")
    return False


def is_log(path: str) -> bool:
    """Logs open at their end: `*.log` (and rotated `*.log.1`), or any file under a `logs` folder."""
    parts = path.strip("/").split("/")
    return ROTATED_LOG.search(parts[-1]) is not None or "logs" in parts[:-1]


def hex_row(offset: int, data: bytes) -> str:
    """One row as `hexdump -C` prints it: offset, two groups of eight bytes, the printable ASCII."""
    cells = [f"{b:02x}" for b in data] + ["  "] * (HEX_WIDTH - len(data))
    ascii_column = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in data)
    return f"{offset:08x}  {' '.join(cells[:8])}  {' '.join(cells[8:])}  |{ascii_column}|"


def _skip_continuation(data: bytes, at: int) -> int:
    """`at` moved forward past UTF-8 continuation bytes (at most three): a cut there splits no character."""
    for _ in range(3):
        if at < len(data) and data[at] & 0xC0 == 0x80:
            at += 1
    return at


class WindowCache:
    """The file's bytes, read in chunks of `CHUNK` on demand, the last `KEEP_CHUNKS` kept."""

    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self._chunks: OrderedDict[int, bytes] = OrderedDict()
        self.size = 0

    async def chunk(self, index: int) -> bytes:
        if index in self._chunks:
            self._chunks.move_to_end(index)
            return self._chunks[index]
        window = await self._fetch(index * CHUNK, CHUNK)
        self.size = max(window.size, index * CHUNK + window.length)  # a log grows while it is read
        self._chunks[index] = data = window.data
        while len(self._chunks) > KEEP_CHUNKS:
            self._chunks.popitem(last=False)
        return data

    async def read(self, start: int, end: int) -> bytes:
        """The bytes in [start, end), as far as the file goes."""
        start, end = max(0, start), min(end, self.size)
        if start >= end:
            return b""
        first, last = start // CHUNK, (end - 1) // CHUNK
        data = b"".join([await self.chunk(index) for index in range(first, last + 1)])
        return data[start - first * CHUNK : end - first * CHUNK]

    async def read_again(self) -> None:
        """Forget the chunks and read the file's size again (it may have changed while its agent
        was away); kept as they were when that read fails."""
        window = await self._fetch(0, SNIFF)
        self._chunks.clear()
        self.size = window.size

    async def window(self, offset: int, length: int) -> bytes:
        """A read that bypasses the cache (a search reads far more than the screen shows)."""
        window = await self._fetch(offset, length)
        self.size = max(self.size, window.size)
        return window.data


@dataclass(frozen=True)
class Row:
    offset: int  # where in the file the row's line (or hex row) starts
    text: str


@dataclass(frozen=True)
class Page:
    """What one screen shows: its rows, the byte range they come from, and the file's size."""

    rows: list[Row]
    top: int
    bottom: int
    size: int
    mode: Mode
    wrap: bool

    @property
    def at_end(self) -> bool:
        return self.bottom >= self.size


class Pager:
    """Where the screen is in the file, and how it moves. Moves run one at a time (a lock), in
    the order the keys came; each answers the new `Page`."""

    def __init__(self, fetch: Fetch, find: Find | None = None) -> None:
        """`find`: how it searches and goes to a line (without it, it only pages)."""
        self.cache = WindowCache(fetch)
        self._find = find
        self.mode: Mode = "text"
        self.wrap = False
        self.top = 0
        self.hidden = 0  # rows of the top line above the screen: a wrapped last screen ends full
        self.width, self.height = 80, 20
        self._lock = trio.Lock()

    @property
    def size(self) -> int:
        return self.cache.size

    async def open(self, *, at_end: bool) -> Page:
        """Read the head (its size, whether it is binary: then hex), then show the top or the end."""
        async with self._lock:
            head = await self.cache.window(0, SNIFF)  # the size, and text or binary: one small read
            self.mode = "hex" if looks_binary(head) else "text"
            if at_end:
                await self._end()
            return await self._page()

    async def reload(self) -> Page:
        """The screen read again from the server where it was (its byte offset; hex or text,
        wrapped or not, as it was); a file that shrank past it shows its end."""
        async with self._lock:
            await self.cache.read_again()
            top = self.top
            if top >= self.size:
                await self._end()
            else:
                self.top = await self._align(top)
                self.hidden = self.hidden if self.top == top else 0
            return await self._page()

    async def show(self, width: int, height: int, *, mode: Mode | None = None, wrap: bool | None = None) -> Page:
        """The page for a screen of `width` x `height` (after a resize, a wrap or a mode switch)."""
        async with self._lock:
            at_end = (await self._page()).at_end
            self.hidden = 0
            self.width, self.height = max(1, width), max(1, height)
            if mode is not None and mode != self.mode:
                self.mode = mode
                self.top = await self._align(self.top)
            if wrap is not None:
                self.wrap = wrap
            if at_end:
                await self._end()  # the end of a log stays in sight
            return await self._page()

    async def move(self, how: str) -> Page:
        """`up`, `down`, `page_up`, `page_down`, `home` or `end`."""
        async with self._lock:
            page = await self._page()
            if how in ("down", "page_down") and page.at_end:
                return page  # at the end it stays there
            if how == "up" and self.hidden:
                self.hidden -= 1  # the top line's hidden rows come back one by one
                return await self._page()
            self.hidden = 0
            if how == "home":
                self.top = 0
            elif how == "end":
                await self._end()
            elif how == "up":
                self.top = await self._up(self.top, 1)
            elif how == "page_up":
                self.top = await self._up(self.top, self.height)
            else:
                self.top = page.bottom if how == "page_down" else await self._down(self.top)
                if (await self._page()).at_end:
                    await self._end()  # the last screen is shown full, as `less` does
            return await self._page()

    async def search(self, pattern: str, *, start: int, forward: bool) -> Found | None:
        """The first match of `pattern` at or after `start` (before it, backward), found on the
        server: the page showing it, or None. Case-insensitive unless the pattern has a capital (as
        `less -i`); cancel the task to stop it."""
        case_sensitive = pattern != pattern.lower()
        async with self._lock:
            found = await self._finder()(
                query=pattern, offset=start, backward=not forward, case_sensitive=case_sensitive
            )
            return None if found.offset is None else await self._go(found.offset, found)

    async def go_to(self, *, line: int | None = None, offset: int = 0) -> Found:
        """The page starting at line `line` (its start found on the server; the last line when the
        file has fewer), or else at the line (hex: the row) holding byte `offset`."""
        async with self._lock:
            if line is None:
                return await self._go(min(offset, max(0, self.size - 1)), None)
            found = await self._finder()(line=line)
            return await self._go(found.offset or 0, found)

    async def _go(self, offset: int, found: FsFound | None) -> Found:
        if found is not None:
            self.cache.size = max(self.cache.size, found.size)  # a log grows
        self.hidden = 0
        self.top = await self._align(offset)
        if (await self._page()).at_end:
            await self._end()  # the last screen is shown full, as `less` does
        return Found(await self._page(), offset, found.line if found is not None else None)

    def _finder(self) -> Find:
        if self._find is None:
            raise RuntimeError("this pager was given no find")
        return self._find

    # --- text lines ---------------------------------------------------------------------

    async def _line_end(self, start: int) -> int:
        """Where the line starting at `start` ends (past its newline); a long line is cut at `MAX_LINE`."""
        data = await self.cache.read(start, start + MAX_LINE + 4)
        newline = data.find(b"\n", 0, MAX_LINE)
        if newline >= 0:
            return start + newline + 1
        if len(data) <= MAX_LINE:
            return start + len(data)
        return start + _skip_continuation(data, MAX_LINE)

    async def _line_start(self, pos: int) -> int:
        """The start of the line holding the byte at `pos`."""
        low = max(0, pos - MAX_LINE)
        data = await self.cache.read(low, pos)
        newline = data.rfind(b"\n")
        if newline >= 0:
            return low + newline + 1
        return 0 if low == 0 else low + _skip_continuation(data, 0)

    async def _line_rows(self, start: int, end: int) -> list[str]:
        line = (await self.cache.read(start, end)).decode("utf-8", "replace").rstrip("\n").rstrip("\r")
        text = printable_line(line)
        return chop_cells(text, self.width) if self.wrap and text else [text]

    # --- moves ----------------------------------------------------------------------------

    async def _align(self, pos: int) -> int:
        return await self._line_start(pos) if self.mode == "text" else pos - pos % HEX_WIDTH

    async def _down(self, top: int) -> int:
        return top + HEX_WIDTH if self.mode == "hex" else await self._line_end(top)

    async def _up(self, top: int, lines: int) -> int:
        if self.mode == "hex":
            return max(0, top - lines * HEX_WIDTH)
        for _ in range(lines):
            if top == 0:
                break
            top = await self._line_start(top - 1)
        return top

    async def _end(self) -> None:
        """The last screenful: the file's last rows end at the bottom of the screen (wrapped, the
        top line's first rows may be `hidden` above it, as `less` does)."""
        if self.mode == "hex":
            rows = -(-self.size // HEX_WIDTH)
            self.top = max(0, rows - self.height) * HEX_WIDTH
            return
        top, shown = self.size, 0
        while top > 0 and shown < self.height:
            start = await self._line_start(top - 1)
            shown += len(await self._line_rows(start, top))
            top = start
        self.top, self.hidden = top, max(0, shown - self.height)

    async def _page(self) -> Page:
        rows: list[Row] = []
        pos = self.top
        if self.mode == "hex":
            data = await self.cache.read(pos, pos + self.height * HEX_WIDTH)
            for at in range(0, len(data), HEX_WIDTH):
                rows.append(Row(pos + at, hex_row(pos + at, data[at : at + HEX_WIDTH])))
            pos += len(data)
        else:
            while len(rows) < self.hidden + self.height and pos < self.size:
                end = await self._line_end(pos)
                rows.extend(Row(pos, piece) for piece in await self._line_rows(pos, end))
                pos = end
            rows = rows[self.hidden :]
        return Page(rows[: self.height], self.top, pos, self.size, self.mode, self.wrap)
