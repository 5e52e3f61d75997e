"""The footer of every screen, fitted to the width of the terminal."""

from __future__ import annotations

from textual import events
from textual.widgets import Footer

# Below this many columns the footer drops its padding and the `^p palette` key (F1's help names
# ctrl+p): at 80 columns that is room for eight more cells of bindings, so the most used keys,
# listed first by each screen, and F1 Help and F10 Quit after them, are not cut.
ROOMY_WIDTH = 100


class FleetFooter(Footer):
    """Textual's Footer, compact and without the palette key on a narrow terminal."""

    def __init__(self) -> None:
        super().__init__()
        self._narrow: bool | None = None

    def on_resize(self, event: events.Resize) -> None:
        narrow = self.app.size.width < ROOMY_WIDTH
        if narrow != self._narrow:
            self._narrow = narrow
            self.compact = narrow
            self.show_command_palette = not narrow
            self.call_after_refresh(self.recompose)
