"""The read-only viewer of one text file, highlighted on the fly (see `CodeView`)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from api_client import FileContent, Scope, Server
from tui.errors import format_size
from tui.files.code_view import CodeView
from tui.screen import FleetScreen
from tui.text import load_tcss, printable, short_time
from tui.widgets.footer import FleetFooter
from tui.widgets.header import SafeHeader


class ViewerScreen(FleetScreen):
    """A file's content; Escape (or q) goes back to the directory."""

    HELP_TITLE = "Viewer"

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Back"),
    ]

    def __init__(self, server: Server, scope: Scope, content: FileContent) -> None:
        super().__init__()
        self.server = server
        self.title = server.name
        self.scope = scope
        self.content = content

    def compose(self) -> ComposeResult:
        yield SafeHeader()
        yield Static("", id="viewer-bar", markup=False)
        yield CodeView(id="code")
        yield FleetFooter()

    def on_mount(self) -> None:
        if self.dismissed:
            return
        code = self.query_one(CodeView)
        code.load(self.content.content, self.content.path)
        code.focus()
        lines = f"{code.line_count:,} line" + ("" if code.line_count == 1 else "s")
        details = [
            f"/{self.content.path.lstrip('/')}",
            lines,
            format_size(self.content.size),
            code.language,
            short_time(self.content.mtime.isoformat()),
        ]
        self.query_one("#viewer-bar", Static).update(printable(" · ".join(details)))

    def action_close(self) -> None:
        self.dismiss()
