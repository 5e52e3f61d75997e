"""Textual's Header, made safe against a screen dismissed while it is still being mounted."""

from __future__ import annotations

from textual.css.query import NoMatches
from textual.dom import NoScreen
from textual.events import Mount
from textual.widget import Widget
from textual.widgets import Header
from textual.widgets._header import HeaderTitle

from tui.text import load_tcss


class SafeHeader(Header):
    """A Header whose title watchers tolerate an already-removed title.

    Textual's Header updates its title from watchers registered on mount. When a screen is popped
    right after it was pushed (Enter then Escape within a frame), those watchers can run after
    the header's children are gone and raise `NoMatches`, which would end the app.
    """

    DEFAULT_CSS = load_tcss(__file__)

    def _on_mount(self, event: Mount) -> None:
        event.prevent_default()  # replaces Header._on_mount (Widget's own is called below)
        Widget._on_mount(self, event)

        async def set_title() -> None:
            try:
                self.query_one(HeaderTitle).update(self.format_title())
            except (NoMatches, NoScreen):
                pass  # the header is being removed along with its screen

        for node, attribute in ((self.app, "title"), (self.app, "sub_title")):
            self.watch(node, attribute, set_title)
        for attribute in ("title", "sub_title"):
            self.watch(self.screen, attribute, set_title)
