"""Textual's Header, made safe against a screen dismissed while it is still being mounted, and
naming the control plane the TUI is on with the state of the connection (`tui.monitor`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.css.query import NoMatches
from textual.dom import NoScreen
from textual.events import Mount
from textual.widget import Widget
from textual.widgets import Header
from textual.widgets._header import HeaderIcon, HeaderTitle

from tui.text import load_tcss

if TYPE_CHECKING:  # the monitor imports trio and the API client: not before the first frame
    from tui.monitor import ConnectionMonitor, LinkState


class ConnectionBadge(Widget):
    """`local ● connected`, `example.net ○ lost · retry in 3 s`: where the TUI is, and whether it
    can reach it. Empty until connected (the starting screen). Styled by the header's CSS."""

    def on_mount(self) -> None:
        monitor = self.monitor
        if monitor is not None:
            monitor.changed.subscribe(self, self._changed)
            self._changed(monitor.state)
        self.set_interval(1.0, self._tick)  # the retry countdown

    @property
    def monitor(self) -> ConnectionMonitor | None:
        return getattr(self.app, "monitor", None)

    def _changed(self, state: LinkState) -> None:
        self.set_class(not state.connected, "-lost")
        self.refresh(layout=True)

    def _tick(self) -> None:
        if self.has_class("-lost"):
            self.refresh(layout=True)

    def render(self) -> Text:
        monitor = self.monitor
        if monitor is None:
            return Text("")
        state = monitor.state
        return Text.assemble((monitor.name, "bold"), " ● " if state.connected else " ○ ", state.describe())


class SafeHeader(Header):
    """A Header whose title watchers tolerate an already-removed title.

    Textual's Header updates its title from watchers registered on mount. When a screen is popped
    right after it was pushed (Enter then Escape within a frame), those watchers can run after
    the header's children are gone and raise `NoMatches`, which would end the app.
    """

    DEFAULT_CSS = load_tcss(__file__)

    def compose(self) -> ComposeResult:
        yield HeaderIcon().data_bind(Header.icon)
        yield HeaderTitle()
        yield ConnectionBadge()  # where Header keeps a clock's space: fleetdeck shows no clock

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
