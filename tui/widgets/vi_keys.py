"""The vi keys every scrolling list and text view takes beside its arrows and Home/End: k j
(up, down), g G (top, bottom). Defined once here; each widget binds them to its own actions."""

from __future__ import annotations

from textual.binding import Binding


def vi_keys(*, up: str, down: str, top: str | None = None, bottom: str | None = None) -> list[Binding]:
    """Hidden bindings of k, j and (when given) g, G to a widget's own actions.

    Args:
        up: the action k runs (a line up).
        down: the action j runs (a line down).
        top: the action g runs (the first line), if the widget has one.
        bottom: the action G runs (the last line), if the widget has one.
    """
    keys = [("k", up, "Up"), ("j", down, "Down"), ("g", top, "Top"), ("G", bottom, "End")]
    return [Binding(key, action, description, show=False) for key, action, description in keys if action]
