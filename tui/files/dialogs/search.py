"""Search a folder of the server by name or by content; Enter on a result returns its path (and
keeps the match it picked: a content match opens the viewer at its line)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from api_client import Scope, Server
from contract.models import FsSearchMatch, FsSearchResult
from tui.bridge import TaskHandle
from tui.files.dialogs.base import plural
from tui.text import load_tcss, printable
from tui.widgets.dialogs import Dialog
from tui.widgets.toggles import Checkbox

SEARCH_LIMIT = 500


def match_prompt(match: FsSearchMatch) -> Text:
    """`public_html/index.php` (a folder ends with `/`); a content match adds `:12  the line`."""
    entry = match.entry
    path = printable(entry.path) + ("/" if entry.type == "dir" else "")
    prompt = Text(path, style="bold")
    if match.line is not None:
        prompt.append(f":{match.line}", style="dim")
        prompt.append("  " + printable((match.text or "").strip()))
    prompt.no_wrap = True
    prompt.overflow = "ellipsis"
    return prompt


class SearchDialog(Dialog[str | None]):
    """Enter in the query searches; ↓ goes to the results; Enter on one picks it; Esc cancels."""

    DEFAULT_CSS = load_tcss(__file__)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+t", "toggle_content", "Content"),
    ]

    def __init__(self, server: Server, scope: Scope, directory: str) -> None:
        super().__init__()
        self.server = server
        self.scope = scope
        self.directory = directory.strip("/")
        self.matches: list[FsSearchMatch] = []
        self.searched_for = ""  # the query of `matches`
        self._query = ""  # of the search running
        self.picked: FsSearchMatch | None = None
        self.truncated = False
        self.searching = False
        self._search_task: TaskHandle | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="search-box", classes="dialog -wide -tall"):
            yield Static(printable(f"Search in /{self.directory}"), classes="dialog--title", markup=False)
            with Horizontal(classes="dialog--row"):
                yield Input(placeholder="part of a name (or of a line, with content)", id="search-query", compact=True)
                yield Checkbox("in content (ctrl+t)", False, id="search-content", compact=True)
            yield OptionList(id="search-results")
            yield Static("", id="status", markup=False)
            yield Static(
                "Enter: search, then pick · ↓: results · ctrl+t: content · Esc: cancel", classes="dialog--hint"
            )

    def on_mount(self) -> None:
        self.query_one("#search-query", Input).focus()

    def action_toggle_content(self) -> None:
        box = self.query_one("#search-content", Checkbox)
        box.value = not box.value

    @on(Checkbox.Changed, "#search-content")
    def _content_changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        if self.query_one("#search-query", Input).value.strip():
            self.search()

    @on(Input.Submitted, "#search-query")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.search()

    def on_key(self, event: events.Key) -> None:
        if event.key == "down" and self.focused is self.query_one("#search-query", Input) and self.matches:
            event.stop()
            results = self.query_one("#search-results", OptionList)
            results.focus()
            results.highlighted = 0

    def search(self) -> None:
        query = self.query_one("#search-query", Input).value.strip()
        if not query:
            self.set_status("Type what to look for.", error=True)
            return
        content = self.query_one("#search-content", Checkbox).value
        if self._search_task is not None:
            self._search_task.cancel()  # a newer query wins
        self.searching = True
        self.hold_keys()  # typed meanwhile (↓ Enter): for the results, once listed
        self._query = query
        self.set_status(f"Searching {'the content of files' if content else 'names'} for {query!r}…")
        self._search_task = self.bridge.run(
            self,
            self._search,
            query,
            content,
            on_done=self._show,
            on_error=self._failed,
        )

    async def _search(self, query: str, content: bool) -> FsSearchResult:
        return await self.client.files.search(
            self.server.id, self.scope, self.directory, query, content=content, limit=SEARCH_LIMIT
        )

    def _show(self, answer: FsSearchResult) -> None:
        self.searching = False
        self.release_keys()
        self.searched_for = self._query
        self.matches = answer.matches
        self.truncated = answer.truncated
        results = self.query_one("#search-results", OptionList)
        results.clear_options()
        results.add_options(Option(match_prompt(match)) for match in self.matches)
        if not self.matches:
            self.set_status("Nothing found.")
            return
        results.highlighted = 0
        found = plural(len(self.matches), "match", "matches")
        if self.truncated:
            self.set_status(f"Truncated: only the first {found} are shown; narrow the search.", error=True)
        else:
            self.set_status(f"{found}. Enter on one picks it.")

    def _failed(self, exc: BaseException) -> None:
        self.searching = False
        self.release_keys()
        self.show_error(exc)

    @on(OptionList.OptionSelected, "#search-results")
    def _picked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if 0 <= event.option_index < len(self.matches):
            self.picked = self.matches[event.option_index]
            self.finish(self.picked.entry.path)
