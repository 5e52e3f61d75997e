"""What every file dialog shares: the modal frame, its CSS, small formatting helpers and a way to
report progress from trio.

A dialog is a `FleetModal`: its trio tasks are cancelled when it closes. Its layout is one box
(`.file-dialog`) with a title, the body, a status line (errors, progress words), a hint line with
the keys, and the buttons; it fits 80x24.
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from textual import events
from textual.binding import Binding, BindingType
from textual.widgets import Static

from tui.errors import describe_error
from tui.screen import FleetModal
from tui.text import load_tcss, printable

T = TypeVar("T")

# Names the agent refuses anyway; refusing them here says why before a round trip.
MAX_NAME_BYTES = 255


class FileDialog(FleetModal[T]):
    """A file dialog: Esc cancels (`cancel_result`), errors go to the status line and a notification."""

    DEFAULT_CSS = load_tcss(__file__)
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    _pending_result: tuple[T] | None = None

    def cancel_result(self) -> T:
        """What Esc dismisses with (None for most dialogs)."""
        return None  # type: ignore[return-value]

    def action_cancel(self) -> None:
        self.finish(self.cancel_result())

    @property
    def closed(self) -> bool:
        """True once the dialog left the screen stack (a late trio answer must not dismiss twice)."""
        return self not in self.app.screen_stack

    def finish(self, result: T) -> None:
        """Dismiss with `result`, once. Under another screen (a confirmation, a notification
        screen pushed over it), the dialog closes as soon as it is on top again."""
        if self.closed:
            return
        if self.app.screen is self:
            self.dismiss(result)
        else:
            self._pending_result = (result,)

    def on_screen_resume(self) -> None:
        pending = self._pending_result
        if pending is not None:
            self._pending_result = None
            self.call_later(self.finish, pending[0])

    def set_status(self, text: str, *, error: bool = False) -> None:
        """The status line of the dialog (`#status`, when it has one)."""
        for line in self.query("#status").results(Static):
            line.update(printable(text))
            line.set_class(error, "-error")

    def show_error(self, exc: BaseException, *, path: str | None = None) -> str:
        """`exc` in words, on the status line and as a notification; the words are returned."""
        server = getattr(getattr(self, "server", None), "name", None)
        message = describe_error(exc, server=server, path=path)
        self.set_status(message, error=True)
        self.notify(message, severity="error", timeout=8)
        return message

    def report(self, callback: Callable[..., Any], *args: Any) -> None:
        """From trio: run `callback(*args)` on this dialog's message queue (the bridge's own way back).

        For progress that arrives many times during one task; trio code never touches a widget,
        it only posts a message. Dropped once the dialog is gone.
        """
        if not self.closed:
            self.post_message(events.Callback(callback=lambda: callback(*args)))


# --- formatting -------------------------------------------------------------------------------


def permission_string(mode: int) -> str:
    """`0o755` → `rwxr-xr-x` (setuid, setgid and sticky shown the `ls` way)."""
    return stat.filemode((mode & 0o7777) | stat.S_IFREG)[1:]


def octal(mode: int) -> str:
    """`0o755` → `0755`; the special bits, when present, make it `4755`."""
    return f"{mode & 0o7777:04o}"


def plural(count: int, word: str, words: str | None = None) -> str:
    return f"{count:,} {word if count == 1 else (words or word + 's')}"


def describe_items(names: Sequence[str]) -> str:
    """`index.php` for one name, `3 items` for more."""
    if len(names) == 1:
        return printable(names[0].rstrip("/").rpartition("/")[2] or names[0])
    return plural(len(names), "item")


def name_problem(name: str) -> str | None:
    """Why `name` cannot be the name of a file or folder, or None when it can."""
    if not name or not name.strip():
        return "The name is empty."
    if name in (".", ".."):
        return f"{name!r} is not a name a file can have."
    if "/" in name:
        return "A name cannot contain '/'."
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        return "A name cannot contain control characters."
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        return f"The name is longer than {MAX_NAME_BYTES} bytes."
    return None


def folder_path_problem(path: str) -> str | None:
    """Why `path` (`a/b`: folders to make, each level checked as a name) cannot be made, or None."""
    parts = path.strip("/").split("/")
    if not path.strip("/"):
        return "The name is empty."
    if "" in parts:
        return "A path cannot contain '//'."
    return next(filter(None, map(name_problem, parts)), None)


def format_duration(seconds: float) -> str:
    """`75` → `1:15`, `3725` → `1:02:05`."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
