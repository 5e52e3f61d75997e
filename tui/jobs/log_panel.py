"""The live log of a job, built on the Line API: a ring buffer, batched repaints, k9s's keys.

`LogPanel` draws only what is on screen. Lines go into a `deque(maxlen=...)` (100,000 by default:
the oldest fall out), and `append_lines` never repaints by itself: it marks the panel dirty and a
timer repaints at most `MAX_REFRESH_HZ` times a second, however many lines arrive. Filtering keeps
the absolute numbers of the matching lines, updated batch by batch, so narrowing 100,000 lines
costs one pass and later batches only their own lines.

Line 0 of the panel is a sticky status row (follow, wrap, time, the output rate, counts); when the
job has ended, the last row is a sticky banner (exit code, status, duration). The output rate is a
sparkline of lines a second over the last minute, by the time each line was written (`OutputRate`),
shown when the row has room.

`LogView` wraps the panel with its filter input and owns the keys that are not about scrolling:
`s` follow, `w` wrap, `t` timestamps, `f` fullscreen, `/` filter (Esc clears), `ctrl+s` save.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import ClassVar, NamedTuple

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Input

from tui.errors import describe_error
from tui.text import load_tcss, printable_line
from tui.widgets.sparkline import sparkline
from tui.widgets.vi_keys import vi_keys

DEFAULT_MAX_LINES = 100_000
MAX_REFRESH_HZ = 30
# A line longer than this is cut on screen (the saved file keeps it whole): it bounds what one
# visible row may cost to draw, whatever a job prints.
MAX_DRAWN_CHARS = 10_000
STDERR_MARK = "▌"
TIME_WIDTH = 12  # HH:MM:SS.mmm
RATE_SECONDS = 60  # the output rate's sparkline: a bar a second, the last minute (as wide as the row allows)
RATE_NARROWEST = 8  # bars, or no sparkline


class LogLine(NamedTuple):
    """One line of output: its text, whether it came on stderr, and when (RFC 3339, may be "")."""

    text: str
    stderr: bool = False
    at: str = ""


class Banner(NamedTuple):
    """How a job ended, shown on the panel's last row."""

    status: str  # succeeded | failed | interrupted | anything else the server says
    exit_code: int | None
    duration_s: float | None
    note: str | None = None  # said instead, while how it ends is not known (e.g. "connection lost")

    @property
    def text(self) -> str:
        if self.note is not None:
            return f"⚠ {self.note}"
        mark = {"succeeded": "✔", "failed": "✘", "interrupted": "⚠"}.get(self.status, "■")
        parts = [f"{mark} {self.status}"]
        parts.append(f"exit code {self.exit_code}" if self.exit_code is not None else "no exit code")
        if self.duration_s is not None:
            parts.append(format_duration(self.duration_s))
        return " · ".join(parts)


def format_duration(seconds: float) -> str:
    """`8 ms`, `12.3 s`, `4 min 05 s`, `2 h 03 min`."""
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


@lru_cache(maxsize=8192)
def clock_time(rfc3339: str) -> str:
    """`2026-11-22T10:00:01.250Z` → `11:00:01.250` in the local time zone (blank if unreadable)."""
    try:
        moment = datetime.fromisoformat(rfc3339)
    except (TypeError, ValueError):
        return " " * TIME_WIDTH
    if moment.tzinfo is not None:
        moment = moment.astimezone()
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def write_log(path: Path, lines: Sequence[LogLine], *, timestamps: bool = False) -> int:
    """Write `lines` to `path` (UTF-8, one per line, stderr lines unmarked); how many were written."""
    with path.open("w", encoding="utf-8", newline="\n") as out:
        for line in lines:
            if timestamps and line.at:
                out.write(f"{line.at} ")
            out.write(line.text)
            out.write("\n")
    return len(lines)


class OutputRate:
    """Lines a second, by the time each line was written (its ``at``), not by when it arrived: a
    finished job's replay draws the pace it ran at. The seconds count on from the newest line's
    by this machine's monotonic clock, so a clock skew between it and the server moves nothing."""

    def __init__(self) -> None:
        self._counts: deque[tuple[int, int]] = deque(maxlen=RATE_SECONDS)  # (second, lines), in order
        self._stamp, self._second = "", 0  # the last line's time to the second, and that second
        self._heard = 0.0  # time.monotonic() of the newest line

    def add(self, lines: Sequence[LogLine]) -> None:
        for line in lines:
            if line.at[:19] != self._stamp:  # "YYYY-MM-DDTHH:MM:SS": parsed once a second, not once a line
                second = _unix_second(line.at)
                if second is None:
                    continue
                self._stamp, self._second = line.at[:19], second
            if self._counts and self._counts[-1][0] == self._second:
                self._counts[-1] = (self._second, self._counts[-1][1] + 1)
            elif not self._counts or self._second > self._counts[-1][0]:
                self._counts.append((self._second, 1))
            # (a line older than the newest second, from another stream's interleaving: not counted)
        self._heard = time.monotonic()

    @property
    def first(self) -> int:
        """The oldest second held."""
        return self._counts[0][0] if self._counts else 0

    def until(self, live: bool) -> int:
        """The second the sparkline ends on: now while the job runs, else its last line's."""
        newest = self._counts[-1][0] if self._counts else 0
        return newest + int(time.monotonic() - self._heard) if live and self._counts else newest

    def per_second(self, until: int, seconds: int) -> list[float]:
        counts = dict(self._counts)
        return [float(counts.get(second, 0)) for second in range(until - seconds + 1, until + 1)]

    def __bool__(self) -> bool:
        return bool(self._counts)


def _unix_second(rfc3339: str) -> int | None:
    try:
        return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None


def rate_text(per_second: float) -> str:
    """``12/s``, ``3.4k/s``, ``1.2M/s``."""
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if per_second >= size:
            return f"{per_second / size:.1f}{unit}/s"
    return f"{per_second:.0f}/s"


class LogPanel(ScrollView, can_focus=True):
    """A job's output: a bounded buffer drawn line by line, following the end while it grows."""

    DEFAULT_CSS = load_tcss(__file__)

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "log-panel--status",
        "log-panel--status-on",
        "log-panel--stderr",
        "log-panel--time",
        "log-panel--match",
        "log-panel--empty",
        "log-panel--succeeded",
        "log-panel--failed",
        "log-panel--interrupted",
    }

    BINDINGS: ClassVar[list[BindingType]] = [
        *vi_keys(up="scroll_up", down="scroll_down", top="scroll_home", bottom="scroll_end"),
    ]

    def __init__(
        self,
        *,
        max_lines: int = DEFAULT_MAX_LINES,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._lines: deque[LogLine] = deque(maxlen=max_lines)
        self._appended = 0  # every line ever appended: line n (0-based) is _lines[n - first]
        self._widest = 0
        self._follow = True
        self._wrap = False
        self._timestamps = False
        self._filter = ""
        self._matches: deque[int] = deque()  # absolute numbers of the lines matching the filter
        self._banner: Banner | None = None
        self._rate = OutputRate()
        self.placeholder = "Waiting for output…"
        # Batched repaints.
        self._dirty = False
        self._flush_timer: Timer | None = None
        self._last_flush = 0.0
        self.flush_count = 0
        """How many times appended lines were repainted (tests check it stays far below the lines)."""
        self._shift = 0  # rows dropped from the top of the view since the last repaint
        self._frame_key: tuple[object, ...] | None = None
        self._frame: list[Strip] = []

    # --- the buffer -------------------------------------------------------------------------

    @property
    def max_lines(self) -> int:
        return self._lines.maxlen or DEFAULT_MAX_LINES

    @property
    def lines(self) -> list[LogLine]:
        """A copy of the buffer, oldest first."""
        return list(self._lines)

    @property
    def line_count(self) -> int:
        return len(self._lines)

    @property
    def appended(self) -> int:
        """How many lines were appended in all (those past the bound have been dropped)."""
        return self._appended

    @property
    def dropped(self) -> int:
        return self._appended - len(self._lines)

    @property
    def shown_count(self) -> int:
        """Lines in view: the matches when a filter is set, else the whole buffer."""
        self._prune_matches()
        return len(self._matches) if self._filter else len(self._lines)

    def shown_lines(self) -> list[LogLine]:
        """The lines in view, oldest first (the matches when a filter is set)."""
        if not self._filter:
            return list(self._lines)
        self._prune_matches()
        first = self.dropped
        return [self._lines[n - first] for n in self._matches]

    def append_lines(self, lines: Iterable[LogLine]) -> None:
        """Add lines at the end. Cheap: the repaint happens later, at most MAX_REFRESH_HZ times a second."""
        batch = lines if isinstance(lines, list) else list(lines)
        if not batch:
            return
        start = self._appended
        if not self._filter:
            # Lines about to fall out of the buffer: a view that is not following stays on its lines.
            self._shift += max(0, len(self._lines) + len(batch) - self.max_lines)
        self._lines.extend(batch)
        self._rate.add(batch)
        self._appended += len(batch)
        self._widest = max(self._widest, min(MAX_DRAWN_CHARS, max(len(line.text) for line in batch)))
        if self._filter:
            matches = self._matcher()
            self._matches.extend(start + i for i, line in enumerate(batch) if matches(line.text))
        self._schedule_flush()

    def clear(self) -> None:
        self._shift = 0
        self._lines.clear()
        self._matches.clear()
        self._appended = 0
        self._widest = 0
        self._banner = None
        self._rate = OutputRate()
        self._invalidate()

    def set_banner(self, banner: Banner | None) -> None:
        """Show how the job ended on the last row (None removes it)."""
        self._banner = banner
        self._invalidate()

    @property
    def banner(self) -> Banner | None:
        return self._banner

    # --- modes ------------------------------------------------------------------------------

    @property
    def follow(self) -> bool:
        return self._follow

    @follow.setter
    def follow(self, value: bool) -> None:
        self._follow = value
        if value:
            self._scroll_to_end()
        self._invalidate()

    @property
    def wrap(self) -> bool:
        return self._wrap

    @wrap.setter
    def wrap(self, value: bool) -> None:
        self._wrap = value
        self.scroll_to(x=0, animate=False, immediate=True)
        self._invalidate()

    @property
    def timestamps(self) -> bool:
        return self._timestamps

    @timestamps.setter
    def timestamps(self, value: bool) -> None:
        self._timestamps = value
        self._invalidate()

    @property
    def filter(self) -> str:
        return self._filter

    @filter.setter
    def filter(self, query: str) -> None:
        """Show only the lines containing `query` (case-insensitive unless it has capitals)."""
        if query == self._filter:
            return
        self._filter = query
        self._matches.clear()
        self._shift = 0
        if query:
            matches = self._matcher()
            first = self.dropped
            self._matches.extend(first + i for i, line in enumerate(self._lines) if matches(line.text))
        if self._follow:
            self._scroll_to_end()
        else:
            self.scroll_to(y=0, animate=False, immediate=True)
        self._invalidate()

    def _matcher(self) -> Callable[[str], bool]:
        query = self._filter
        if query != query.lower():
            return lambda text: query in text
        return lambda text: query in text.lower()

    def _prune_matches(self) -> None:
        first = self.dropped
        matches = self._matches
        while matches and matches[0] < first:
            matches.popleft()
            self._shift += 1

    # --- repaint scheduling -----------------------------------------------------------------

    def _schedule_flush(self) -> None:
        self._dirty = True
        if self._flush_timer is not None:
            return
        # (Textual timers need a delay above zero.)
        delay = max(0.001, self._last_flush + 1 / MAX_REFRESH_HZ - time.monotonic())
        self._flush_timer = self.set_timer(delay, self._flush, name="log-flush")

    def _flush(self) -> None:
        self._flush_timer = None
        if not self._dirty:
            return
        self._dirty = False
        self._last_flush = time.monotonic()
        self.flush_count += 1
        self._invalidate()

    def flush_now(self) -> None:
        """Repaint the appended lines at once (tests; the timer does it otherwise)."""
        if self._flush_timer is not None:
            self._flush_timer.stop()
            self._flush_timer = None
        self._flush()

    def _invalidate(self) -> None:
        """The content or a mode changed: resize the virtual area, follow the end, repaint."""
        self._prune_matches()
        self._frame_key = None
        content_width = 1 if self._wrap else self._prefix_width() + self._widest
        self.virtual_size = Size(content_width, self.shown_count + self._chrome_rows())
        shift, self._shift = self._shift, 0
        if self._follow:
            self._scroll_to_end()
        elif shift:
            # The oldest lines fell out: scroll back as much, so the same lines stay on screen.
            self.scroll_to(y=max(0, round(self.scroll_y) - shift), animate=False, immediate=True, force=True)
        self.refresh()

    def _scroll_to_end(self) -> None:
        # force: the scrollbars are only updated at the next layout; the new end is known now.
        self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True, force=True)

    # --- keys and mouse: scrolling back stops following, going to the end resumes it ---------

    def action_scroll_up(self) -> None:
        self._stop_following()
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self._stop_following()
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self._stop_following()
        super().action_scroll_home()

    def action_scroll_end(self) -> None:
        self.follow = True

    def on_mouse_scroll_up(self, _event: events.MouseScrollUp) -> None:
        self._stop_following()

    def _stop_following(self) -> None:
        if self._follow:
            self._follow = False
            self._invalidate()

    # --- drawing ----------------------------------------------------------------------------

    def _chrome_rows(self) -> int:
        return 1 + (1 if self._banner is not None else 0)

    def _prefix_width(self) -> int:
        return 1 + (TIME_WIDTH + 1 if self._timestamps else 0)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        height = self.scrollable_content_region.height
        key = (width, height, round(self.scroll_y), round(self.scroll_x), self._frame_key_state())
        if key != self._frame_key or len(self._frame) != height:
            self._frame = self._render_frame(width, height)
            self._frame_key = key
        return self._frame[y] if 0 <= y < len(self._frame) else Strip.blank(width, self.rich_style)

    def _frame_key_state(self) -> tuple[object, ...]:
        rate_until = self._rate.until(live=self._banner is None)
        state = (self._appended, self._follow, self._wrap, self._timestamps, self._filter, self._banner, rate_until)
        return (*state, self.placeholder, self.app.theme)

    def on_mount(self) -> None:
        # While the job runs, its output rate moves on each second, lines or none.
        self.set_interval(1.0, self._tick_rate, name="log-rate")

    def _tick_rate(self) -> None:
        if self._rate and self._banner is None:
            self.refresh()

    def _render_frame(self, width: int, height: int) -> list[Strip]:
        rows = [self._status_strip(width)]
        body_height = max(0, height - self._chrome_rows())
        body = self._body_strips(width, body_height)
        rows.extend(body)
        rows.extend(Strip.blank(width, self.rich_style) for _ in range(body_height - len(body)))
        if self._banner is not None and height > 1:
            rows.append(self._banner_strip(width))
        return rows[:height]

    def _view_line(self, index: int) -> LogLine:
        """The `index`-th line in view (of the matches when filtering)."""
        if self._filter:
            return self._lines[self._matches[index] - self.dropped]
        return self._lines[index]

    def _body_strips(self, width: int, rows: int) -> list[Strip]:
        count = self.shown_count
        if rows <= 0:
            return []
        if count == 0:
            message = self.placeholder
            if self._filter:
                message = f"No line matches “{self._filter}”."
            elif self._banner is not None:
                message = "The job printed nothing."
            return [Strip([Segment(message.center(width)[:width], self._style("empty"))], width)]
        top = round(self.scroll_y)
        if not self._wrap:
            return [self._line_strip(self._view_line(i), width) for i in range(top, min(count, top + rows))]
        if self.scroll_y >= self.max_scroll_y:
            # At the end: the last line sits on the last row, earlier lines above it.
            strips: list[Strip] = []
            index = count - 1
            while index >= 0 and len(strips) < rows:
                strips[:0] = self._wrapped_strips(self._view_line(index), width)
                index -= 1
            return strips[-rows:]
        strips = []
        index = top
        while index < count and len(strips) < rows:
            strips.extend(self._wrapped_strips(self._view_line(index), width))
            index += 1
        return strips[:rows]

    def _prefix_segments(self, line: LogLine) -> list[Segment]:
        """The stderr mark and the time: they stay in place when the text scrolls sideways."""
        base = self._style("stderr") if line.stderr else self.rich_style
        segments = [Segment(STDERR_MARK, base) if line.stderr else Segment(" ", base)]
        if self._timestamps:
            stamp = f"{clock_time(line.at)} " if line.at else " " * (TIME_WIDTH + 1)
            segments.append(Segment(stamp, base + self._style("time")))
        return segments

    def _text_segments(self, line: LogLine) -> list[Segment]:
        base = self._style("stderr") if line.stderr else self.rich_style
        text = line.text if len(line.text) <= MAX_DRAWN_CHARS else line.text[:MAX_DRAWN_CHARS] + "…"
        text = printable_line(text)
        query = self._filter
        if not query:
            return [Segment(text, base)]
        # Highlight what the filter matched.
        haystack = text if query != query.lower() else text.lower()
        match_style = base + self._style("match")
        segments: list[Segment] = []
        start = 0
        while (found := haystack.find(query, start)) >= 0:
            if found > start:
                segments.append(Segment(text[start:found], base))
            end = found + len(query)
            segments.append(Segment(text[found:end], match_style))
            start = end
        if start < len(text):
            segments.append(Segment(text[start:], base))
        return segments

    def _line_strip(self, line: LogLine, width: int) -> Strip:
        prefix = Strip(self._prefix_segments(line))
        scroll_x = round(self.scroll_x)
        text_width = max(0, width - prefix.cell_length)
        text = Strip(self._text_segments(line)).crop_extend(scroll_x, scroll_x + text_width, self.rich_style)
        return Strip.join([prefix, text]).crop_extend(0, width, self.rich_style)

    def _wrapped_strips(self, line: LogLine, width: int) -> list[Strip]:
        """The rows of one wrapped line; the rows after the first are indented past the mark and time."""
        prefix = Strip(self._prefix_segments(line))
        indent = prefix.cell_length
        text = Strip(self._text_segments(line))
        room = width - indent
        length = text.cell_length
        if length <= room or room <= 0:
            return [Strip.join([prefix, text]).crop_extend(0, width, self.rich_style)]
        parts = text.divide([*range(room, length, room), length])
        blank = Strip.blank(indent, self._style("stderr") if line.stderr else self.rich_style)
        return [
            Strip.join([prefix if i == 0 else blank, part]).crop_extend(0, width, self.rich_style)
            for i, part in enumerate(parts)
        ]

    def _status_strip(self, width: int) -> Strip:
        style, on = self._style("status"), self._style("status-on")
        segments = [Segment(" ", style)]
        for label, value in (("Follow", self._follow), ("Wrap", self._wrap), ("Time", self._timestamps)):
            segments.append(Segment(f"{label}:", style))
            segments.append(Segment("on " if value else "off", on if value else style))
            segments.append(Segment("  ", style))
        if self._filter:
            segments.append(Segment("/", on))
            segments.append(Segment(printable_line(self._filter)[:30], on))
            segments.append(Segment("  ", style))
        shown, total = f"{self.shown_count:,}", f"{len(self._lines):,}"
        unit = "line" if len(self._lines) == 1 else "lines"
        counts = f"{shown} of {total} {unit}" if self._filter else f"{total} {unit}"
        # The longest that fits: with the dropped count, without it, the bare number.
        candidates = [counts, shown if self._filter else total]
        if self.dropped:
            candidates.insert(0, f"{counts} ({self.dropped:,} dropped)")
        used = Segment.get_line_length(segments)
        for candidate in candidates:
            if used + cell_len(candidate) + 1 <= width:
                room = width - used - cell_len(candidate) - 1
                rate = self._rate_text(room - 4)  # two blanks either side
                segments.append(Segment(f"{rate + '  ' if rate else '':>{room}}" + candidate + " ", style))
                break
        return Strip(segments).crop_extend(0, width, style)

    def _rate_text(self, room: int) -> str:
        """The output rate's sparkline and its newest figure ("▁▃█▅ 12/s") in at most `room`
        cells, "" when they do not fit or no line had a time."""
        if not self._rate:
            return ""
        live = self._banner is None
        until = self._rate.until(live)
        # The figure: the last whole second while the job runs (the current one is still filling).
        figure = " " + rate_text(self._rate.per_second(until - 1 if live else until, 1)[0])
        bars = min(RATE_SECONDS, room - len(figure), until - self._rate.first + 1)  # none before the first line
        if room - len(figure) < RATE_NARROWEST:
            return ""
        return sparkline(self._rate.per_second(until, bars), bars) + figure

    def _banner_strip(self, width: int) -> Strip:
        assert self._banner is not None
        status = self._banner.status if self._banner.status in ("succeeded", "failed", "interrupted") else "interrupted"
        text = f" {self._banner.text} "
        return Strip([Segment(text.center(width)[:width], self._style(status))], width)

    def _style(self, part: str) -> Style:
        return self.get_component_rich_style(f"log-panel--{part}")


class LogView(Vertical):
    """The log panel with its filter input; owns the keys that are not about scrolling."""

    ALLOW_MAXIMIZE = True

    DEFAULT_CSS = load_tcss(__file__, "log_view")

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "toggle_follow", "Follow"),
        Binding("w", "toggle_wrap", "Wrap"),
        Binding("t", "toggle_timestamps", "Time"),
        Binding("f", "toggle_fullscreen", "Full"),
        Binding("slash", "open_filter", "Filter", key_display="/"),
        Binding("ctrl+s", "save", "Save"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    FILTER_DELAY_S = 0.12  # filter as you type, once typing pauses this long

    def __init__(
        self,
        *,
        max_lines: int = DEFAULT_MAX_LINES,
        save_name: str = "job.log",
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._max_lines = max_lines
        self.save_name = save_name
        """The file name offered by ctrl+s (in the current directory)."""
        self._filter_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield LogPanel(max_lines=self._max_lines, id="log-panel")
        yield Input(
            placeholder="Filter: only lines containing… (Enter keeps it, Esc clears)", id="log-filter", compact=True
        )

    @property
    def panel(self) -> LogPanel:
        return self.query_one(LogPanel)

    @property
    def filter_input(self) -> Input:
        return self.query_one("#log-filter", Input)

    def focus(self, scroll_visible: bool = True) -> LogView:
        self.panel.focus(scroll_visible)
        return self

    # --- actions ----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "clear_filter":
            # Esc means something here only when there is a filter to clear; otherwise it goes
            # on to the screen (back).
            return bool(self.panel.filter) or self.filter_input.display
        return True

    def action_toggle_follow(self) -> None:
        self.panel.follow = not self.panel.follow

    def action_toggle_wrap(self) -> None:
        self.panel.wrap = not self.panel.wrap

    def action_toggle_timestamps(self) -> None:
        self.panel.timestamps = not self.panel.timestamps

    def action_toggle_fullscreen(self) -> None:
        screen = self.screen
        if screen.maximized is self:
            screen.minimize()
        else:
            screen.maximize(self, container=False)
        self.panel.focus()

    def action_open_filter(self) -> None:
        field = self.filter_input
        field.display = True  # inline, at once: the focus can move to it now
        field.value = self.panel.filter
        self._focus_now(field)

    def action_clear_filter(self) -> None:
        self._stop_filter_timer()
        field = self.filter_input
        field.value = ""
        field.display = False
        self.panel.filter = ""
        self._focus_now(self.panel)

    def _focus_now(self, widget: Widget) -> None:
        """Move the focus before the next key is handled (`Widget.focus` waits a turn, and keys
        typed right after `/` or Enter would go to the widget that had it)."""
        self.screen.set_focus(widget)

    @on(Input.Changed, "#log-filter")
    def _filter_typed(self, event: Input.Changed) -> None:
        event.stop()
        self._stop_filter_timer()
        self._filter_timer = self.set_timer(self.FILTER_DELAY_S, self._apply_filter)

    @on(Input.Submitted, "#log-filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._apply_filter()
        if not self.panel.filter:
            self.filter_input.display = False
        self._focus_now(self.panel)

    def _apply_filter(self) -> None:
        self._stop_filter_timer()
        self.panel.filter = self.filter_input.value

    def _stop_filter_timer(self) -> None:
        if self._filter_timer is not None:
            self._filter_timer.stop()
            self._filter_timer = None

    def action_save(self) -> None:
        from tui.jobs.log_save import LogSavePrompt  # a screen: imported when needed

        def chosen(path: str | None) -> None:
            if path:
                self.run_worker(self.save_to(Path(path)), group="log-save", exclusive=False)

        self.app.push_screen(LogSavePrompt(f"./{self.save_name}"), chosen)

    async def save_to(self, path: Path) -> Path | None:
        """Write the whole buffer to `path` (in a thread) and say where it went."""
        panel = self.panel
        lines = panel.lines

        def write() -> tuple[Path, int]:
            target = path.expanduser()
            return target.resolve(), write_log(target, lines, timestamps=panel.timestamps)

        try:
            where, count = await asyncio.to_thread(write)
        except OSError as exc:
            self.notify(f"Could not save the log: {describe_error(exc)}", severity="error", timeout=8)
            return None
        self.notify(f"Saved {count:,} line{'s' if count != 1 else ''} to {where}", title="Log saved")
        return where
