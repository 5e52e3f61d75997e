"""The viewer (F3): any file, of any size, paged with ranged reads as `less` pages it.

Only a few windows of the file are ever held (see `Pager`): a 100 MB log opens at its end with one
or two reads. Text is shown line by line, cut at the screen's edge and scrolled sideways as `less
-S` does (wrap with `w`), binaries as `hexdump -C` rows (`h` switches); `/` and `?` search forward
and backward through the whole file on its server, `n` and `N` repeat; F5 goes to a line, a byte
offset or a percentage of the file (mc's viewer's Goto; `:` stays the command line of every screen).

It follows its server's agent (presence, from `tui.monitor`, as the files panels do): opened while
the agent is offline, or when a read fails because it went offline, the viewer stays and says so,
and reads the file again once the agent is back, where it was (the same byte offset, the same
search and its last match, wrap and hex as they were).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from itertools import accumulate
from typing import Any, ClassVar, Literal

from pygments.lexer import Lexer
from pygments.lexers.php import PhpLexer
from rich.style import Style
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Input, Static

from api_client import Scope, Server
from api_client import errors as api_errors
from contract.models import FileWindow, FsFound, PresenceEvent
from tui.bridge import TaskHandle
from tui.errors import format_size, unwrap
from tui.files.highlight import LEXER_OPTIONS, LazyHighlighter, lexer_for_path, themed_segments
from tui.files.pager import Found, Page, Pager, is_log
from tui.screen import FleetScreen
from tui.text import load_tcss, printable
from tui.widgets.footer import FleetFooter
from tui.widgets.header import SafeHeader
from tui.widgets.vi_keys import vi_keys

GO_TO_HINT = "Go to: a line (1234), a byte offset (@4096 or @0x1000) or a percentage (50%)"


def go_to_target(text: str, size: int) -> dict[str, int] | None:
    """What F5's prompt was given, as `Pager.go_to`'s arguments: ``1234`` a line, ``@4096`` (``@0x1000``)
    a byte offset, ``50%`` that much of `size` as an offset; None for anything else."""
    text = text.strip().replace(",", "").replace("_", "")
    try:
        if text.startswith("@"):
            offset = int(text[1:], 16) if text[1:].lower().startswith("0x") else int(text[1:])
            return {"offset": offset} if offset >= 0 else None
        if text.endswith("%"):
            percent = float(text[:-1])
            return {"offset": int(size * percent / 100)} if 0 <= percent <= 100 else None
        line = int(text)
    except ValueError:
        return None
    return {"line": line} if line >= 1 else None


class PageView(Widget):
    """The rows of one `Page`, scrolled sideways when not wrapped, with the search's matches marked.

    Text is highlighted for the language of the file's name, a screenful at a time (lexed from
    the screen's first line, so a construct opened above it may start in the wrong colour)."""

    can_focus = True

    class Resized(Message):
        """The rows it can show changed (the terminal, or the search line taking one)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.page: Page | None = None
        self.pattern = ""
        self.scroll_column = 0
        self.lexer: Lexer | None = None
        self.message = ""  # shown while there is no page (the file could not be read yet)

    @property
    def language(self) -> str:
        return str(self.lexer.name) if self.lexer is not None else ""

    def show(self, page: Page, path: str) -> None:
        self.page = page
        if page.wrap or page.mode == "hex":
            self.scroll_column = 0
        if self.lexer is None and page.mode == "text" and page.rows:
            self.lexer = lexer_for_path(path, page.rows[0].text if page.top == 0 else "")
        self.refresh()

    def on_resize(self, _event: events.Resize) -> None:
        self.post_message(self.Resized())

    @property
    def lines(self) -> list[str]:
        """The text of the rows on screen, as drawn (for the tests and the search's marks)."""
        if self.page is None:
            return []
        return [row.text[self.scroll_column :] for row in self.page.rows]

    def render(self) -> Text:
        if self.page is None:
            return Text(self.message)
        rows = self._highlighted_rows() if self.page is not None and self.page.mode == "text" else None
        text = Text("\n", end="").join(rows) if rows is not None else Text("\n".join(self.lines), end="")
        text.no_wrap, text.overflow = True, "crop"
        if self.pattern:
            case_sensitive = self.pattern != self.pattern.lower()
            text.highlight_words([self.pattern], Style(reverse=True), case_sensitive=case_sensitive)
        return text

    def _highlighted_rows(self) -> list[Text] | None:
        """The rows, coloured: the rows of one line (wrapped) are lexed as that one line."""
        if self.page is None or self.lexer is None:
            return None
        pieces: dict[int, list[str]] = {}
        for row in self.page.rows:
            pieces.setdefault(row.offset, []).append(row.text)
        lexer = self.lexer
        if isinstance(lexer, PhpLexer) and self.page.top > 0:
            lexer = PhpLexer(startinline=True, **LEXER_OPTIONS)  # mid-file: most PHP is code
        highlighter = LazyHighlighter(["".join(parts) for parts in pieces.values()], lexer)
        rows: list[Text] = []
        for index, parts in enumerate(pieces.values()):
            segments = themed_segments(self, highlighter.tokens(index))
            line = Text.assemble(*((segment.text, segment.style or "") for segment in segments))
            if len(parts) == 1:
                rows.append(line[self.scroll_column :])
                continue
            cuts = list(accumulate(len(part) for part in parts[:-1]))
            rows.extend(line.divide(cuts))
        return rows


class ViewerScreen(FleetScreen):
    """A file paged from the server; Escape (or q, F3) goes back to the directory."""

    HELP_TITLE = "Viewer"

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,f3", "close", "Back"),
        Binding("slash,f7", "search(True)", "Search", key_display="/"),
        Binding("question_mark", "search(False)", "Search back", key_display="?", show=False),
        Binding("n", "next_match(True)", "Next"),
        Binding("f5", "go_to", "Go to", key_display="F5"),
        Binding("N", "next_match(False)", "Previous", key_display="N", show=False),
        Binding("w", "toggle_wrap", "Wrap"),
        Binding("h", "toggle_hex", "Hex"),
        Binding("end", "move('end')", "End", key_display="G"),
        Binding("home", "move('home')", "Top", show=False),
        Binding("down,enter", "move('down')", "Down", show=False),
        Binding("up", "move('up')", "Up", show=False),
        *vi_keys(up="move('up')", down="move('down')", top="move('home')", bottom="move('end')"),
        Binding("pagedown,space,f", "move('page_down')", "Page down", show=False),
        Binding("pageup,b", "move('page_up')", "Page up", show=False),
        Binding("right,l", "sideways(8)", "Right", show=False),
        Binding("left", "sideways(-8)", "Left", show=False),
    ]

    def __init__(self, server: Server, scope: Scope, path: str, *, line: int | None = None, pattern: str = "") -> None:
        """`line`: open there (a content search's hit), with its `pattern` marked and `n` going on."""
        super().__init__()
        self.server = server
        self.title = server.name
        self.scope = scope
        self.path = path
        self.pager = Pager(self._fetch, self._find_in_file)
        self._open_at_line = line
        self._opening_pattern = pattern
        self.page: Page | None = None
        self.match: int | None = None  # where the last match found starts
        self._opened = False
        self._pending: deque[Callable[[], TaskHandle]] = deque()
        self._current: TaskHandle | None = None
        self._searching: TaskHandle | None = None
        self._search_forward = True
        self._prompt: Literal["search", "go_to"] = "search"
        self._line_note = ""  # the line a search or a go-to found, until the next move
        self._note = "opening…"
        self._waiting_for_agent = False  # a read failed because the agent is offline: again once back

    async def _fetch(self, offset: int, length: int) -> FileWindow:
        return await self.client.files.read_window(self.server.id, self.scope, self.path, offset, length)

    async def _find_in_file(
        self,
        *,
        query: str | None = None,
        line: int | None = None,
        offset: int = 0,
        backward: bool = False,
        case_sensitive: bool = False,
    ) -> FsFound:
        return await self.client.files.find(
            self.server.id,
            self.scope,
            self.path,
            query=query,
            line=line,
            offset=offset,
            backward=backward,
            case_sensitive=case_sensitive,
        )

    def compose(self) -> ComposeResult:
        yield SafeHeader()
        yield Static("", id="viewer-bar", markup=False)
        yield PageView(id="page")
        yield Input(placeholder="Search (Enter: find, Esc: cancel)", id="viewer-search", compact=True)
        yield FleetFooter()

    @property
    def view(self) -> PageView:
        return self.query_one(PageView)

    def on_mount(self) -> None:
        if self.dismissed:
            return
        self.view.focus()
        self.view.pattern = self._opening_pattern
        self._update_bar()
        self.monitor.presence.subscribe(self, self._presence_changed)

    @on(PageView.Resized)
    def _resized(self) -> None:
        """The first layout opens the file (at its end for a log); later ones redraw the page."""
        size = self.view.size
        if not self._opened:
            self._opened = True
            self.pager.width, self.pager.height = max(1, size.width), max(1, size.height)
            self._open()
        else:
            self._ask(self.pager.show, size.width, size.height)

    def _open(self) -> None:
        """The file's first page (its end for a log; the line of a content search's hit)."""
        at_line = self._open_at_line
        at_end = at_line is None and (is_log(self.path) or self.scope.read_only)  # a logs scope's files are logs
        self._ask(self.pager.open, at_end=at_end)
        if at_line is not None:
            self._ask(self.pager.go_to, line=at_line, on_done=self._went)

    # --- the agent ------------------------------------------------------------------------

    def _presence_changed(self, event: PresenceEvent) -> None:
        if event.server_id != self.server.id:
            return
        if not event.online:
            self._wait_for_agent()
        elif self._waiting_for_agent:
            self._waiting_for_agent = False
            if not self._opened:
                return  # its first layout opens it
            self._note = "reading again…"
            self._update_bar()
            if self.page is None:
                self._open()
            else:
                self._ask(self.pager.reload)

    def _wait_for_agent(self) -> None:
        """The agent is offline: what is shown stays, and is read again once it is back."""
        self._waiting_for_agent = True
        self._note = ""
        self.view.message = f"The agent of {printable(self.server.name)} is offline: the file opens once it is back."
        self.view.refresh()
        self._update_bar()

    # --- pages ----------------------------------------------------------------------------

    def _ask(
        self,
        move: Callable[..., Awaitable[Any]],
        *args: Any,
        on_done: Callable[[Any], None] | None = None,
        **kwargs: Any,
    ) -> None:
        """Run a `Pager` call in trio; its page is shown when it comes (by `on_done`, given one)."""
        call, done = partial(move, *args, **kwargs), on_done or self._moved
        self._queue(lambda: self.bridge.run(self, call, on_done=done, on_error=self._move_failed, name="page"))

    def _queue(self, start: Callable[[], TaskHandle]) -> None:
        """Calls run one at a time, in the order of the keys: `g` then `G` ends at the end."""
        self._pending.append(start)
        self._next()

    def _next(self) -> None:
        if self._current is None and self._pending:
            self._current = self._pending.popleft()()

    def _finished(self) -> None:
        self._current = None
        self._next()

    def _moved(self, page: Page) -> None:
        self._show(page)
        self._finished()

    def _went(self, found: Found) -> None:
        """A go-to-line (or offset) arrived: its page, and the line it went to in the bar."""
        self._line_note = f"line {found.line:,}" if found.line is not None else ""
        hit, self._open_at_line = self._open_at_line is not None, None
        self.match = None  # `n` searches from the new screen
        if hit and self.view.pattern:  # a content search's hit: `n` goes on past its line
            later = [row.offset for row in found.page.rows if row.offset > found.page.top]
            self.match = (later[0] if later else found.page.bottom) - 1
        self._show(found.page)
        self._finished()

    def _move_failed(self, exc: BaseException) -> None:
        self._failed(exc)
        self._finished()

    def _show(self, page: Page) -> None:
        self.page = page
        self._note = ""
        self.view.show(page, self.path)
        self._update_bar()

    def _failed(self, exc: BaseException) -> None:
        if isinstance(unwrap(exc), api_errors.AgentOffline):
            if self.page is None:
                self._pending.clear()  # `_open` asks for them again
            self._wait_for_agent()
            return
        self.show_error(exc, server=self.server.name, path=self.path.rpartition("/")[2] or self.path)
        if self.page is None:  # it could not be opened (gone, not a file)
            self._pending.clear()
            self.dismiss()
            return
        self._note = "read failed"
        self._update_bar()

    def _update_bar(self) -> None:
        """Where the screen is: the byte offset of its first row, of the size, and how far that is."""
        details = [f"/{self.path.lstrip('/')}"]
        if self._waiting_for_agent:  # first: the bar is cut at the screen's edge
            details.insert(0, f"○ agent offline · {'opens' if self.page is None else 'reads again'} once it is back")
        page = self.page
        if page is not None:
            percent = 100 if page.at_end else page.bottom * 100 // max(1, page.size)
            details.append(f"{page.top:,}/{page.size:,} bytes ({format_size(page.size)}) {percent}%")
            details.append("hex" if page.mode == "hex" else "wrap" if page.wrap else "text")
        if self._line_note:
            details.append(self._line_note)
        if self._note:
            details.append(self._note)
        self.query_one("#viewer-bar", Static).update(printable(" · ".join(details)))

    def action_move(self, how: Literal["up", "down", "page_up", "page_down", "home", "end"]) -> None:
        self._line_note = ""
        self._ask(self.pager.move, how)

    def action_sideways(self, columns: int) -> None:
        if self.page is None or self.page.wrap or self.page.mode == "hex":
            return
        longest = max((len(row.text) for row in self.page.rows), default=0)
        self.view.scroll_column = max(0, min(self.view.scroll_column + columns, longest - 1))
        self.view.refresh()

    def action_toggle_wrap(self) -> None:
        if self.page is not None and self.page.mode == "text":
            self._ask(self.pager.show, *self.view.size, wrap=not self.page.wrap)

    def action_toggle_hex(self) -> None:
        if self.page is not None:
            self._ask(self.pager.show, *self.view.size, mode="text" if self.page.mode == "hex" else "hex")

    # --- search ---------------------------------------------------------------------------

    def action_search(self, forward: bool) -> None:
        self._search_forward = forward
        self._open_prompt("search", f"Search {'forward' if forward else 'backward'} (Enter: find, Esc: cancel)")

    def action_go_to(self) -> None:
        self._open_prompt("go_to", GO_TO_HINT)

    def _open_prompt(self, prompt: Literal["search", "go_to"], placeholder: str) -> None:
        """The line at the bottom takes a search or a go-to (one at a time, as in `less`)."""
        self._prompt = prompt
        search = self.query_one("#viewer-search", Input)
        search.placeholder = placeholder
        search.display = True
        search.focus()

    @on(Input.Submitted, "#viewer-search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        self._close_search_input()
        if self._prompt == "go_to":
            self._go_to(event.value)
        elif event.value:
            self.view.pattern = event.value
            self.match = None
            self._find(self._search_forward)

    def _go_to(self, text: str) -> None:
        target = go_to_target(text, self.pager.size)
        if target is None:
            if text.strip():
                self.notify(GO_TO_HINT, severity="warning")
            return
        self._ask(self.pager.go_to, on_done=self._went, **target)

    def action_next_match(self, same_way: bool) -> None:
        if self.view.pattern:
            self._find(same_way == self._search_forward)

    def _find(self, forward: bool) -> None:
        self._queue(partial(self._start_search, self.view.pattern, forward))

    def _start_search(self, pattern: str, forward: bool) -> TaskHandle:
        """Search from the last match (or the top of the screen) on the server, Escape stops it;
        the bar says the line of the match."""
        top = self.page.top if self.page is not None else 0
        at = self.match if self.match is not None else top
        start = at + 1 if forward and self.match is not None else at

        def found(result: Found | None) -> None:
            self._search_ended("")
            if result is None:
                self.notify(f"Not found: {printable(pattern)}", severity="warning")
            else:
                self.match = result.offset
                self._line_note = f"match on line {result.line:,}" if result.line is not None else ""
                self._show(result.page)

        def failed(exc: BaseException) -> None:
            self._search_ended("")
            self._failed(exc)

        self._note = "searching… Esc stops"
        self._update_bar()
        search = partial(self.pager.search, pattern, start=start, forward=forward)
        self._searching = self.bridge.run(self, search, on_done=found, on_error=failed, name="search")
        return self._searching

    def _search_ended(self, note: str) -> None:
        """The search found, did not find, failed or was stopped: the calls queued behind it run."""
        if self._searching is None:
            return
        self._searching.cancel()  # a no-op once it has finished
        self._searching = None
        self._note = note
        self._update_bar()
        self._finished()

    def _close_search_input(self) -> None:
        search = self.query_one("#viewer-search", Input)
        search.display = False
        search.value = ""
        self.view.focus()

    def action_close(self) -> None:
        if self.query_one("#viewer-search", Input).has_focus:
            self._close_search_input()
        elif self._searching is not None:
            self._search_ended("search stopped")
        else:
            self.dismiss()
