"""The footer of every screen, fitted to the width of the terminal."""

from __future__ import annotations

from textual import events
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

# Below this many columns the footer drops its padding and the `^p palette` key (F1's help names
# ctrl+p): at 80 columns that is room for eight more cells of bindings, so the most used keys,
# listed first by each screen, and F1 Help and F10 Quit after them, are not cut.
ROOMY_WIDTH = 100

# Always shown: F1's help lists every key the footer has no room for.
KEPT_ACTIONS = frozenset({"app.help", "app.quit", "help", "quit"})


class FleetFooter(Footer):
    """Textual's Footer, compact and without the palette key on a narrow terminal; a key that
    would not fit whole is not shown (the last ones first, never F1 Help or F10 Quit), so the
    footer is never cut mid-word."""

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
        else:
            self.call_after_refresh(self.fit)

    async def recompose(self) -> None:
        await super().recompose()
        self.call_after_refresh(self.fit)

    def fit(self) -> None:
        """Show the keys, in their order, while they fit whole; F1 and F10 first of all."""
        keys = [child for child in self.children if isinstance(child, FooterKey)]
        width = self.size.width
        room = width - sum(self._width_of(key) for key in keys if key.action in KEPT_ACTIONS)
        full = False
        for key in keys:
            if key.action in KEPT_ACTIONS:
                continue
            needed = self._width_of(key)
            full = full or needed > room
            key.display = not full
            if not full:
                room -= needed

    def _width_of(self, key: FooterKey) -> int:
        margin = key.styles.margin
        return key.get_content_width(self.size, self.app.size) + margin.left + margin.right
