"""Properties of one file or folder: type, size (a folder's is summed on the server), owner,
permissions, modification time, link target; all read from the server when it opens (and again
once the agent is back, when it was offline then)."""

from __future__ import annotations

from datetime import UTC
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from api_client import Entry, Scope, Server
from contract.models import FsDirSize
from tui.bridge import TaskHandle
from tui.errors import format_size
from tui.files.dialogs.base import octal, permission_string, plural
from tui.text import printable
from tui.widgets.dialogs import Dialog

TYPE_NAMES = {"file": "File", "dir": "Folder", "symlink": "Symbolic link", "other": "Special file"}


def size_text(size: int) -> str:
    """`1.5 KiB (1,536 bytes)`: the size as everywhere, then exactly."""
    return format_size(size) + (f" ({plural(size, 'byte')})" if size >= 1000 else "")


class PropertiesDialog(Dialog[None]):
    """What `fs/stat` says about `path`; for a folder, its total size too (Esc or Enter closes,
    which also stops a long folder walk)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,enter,q", "cancel", "Close"),
    ]

    def __init__(self, server: Server, scope: Scope, path: str) -> None:
        super().__init__()
        self.server = server
        self.scope = scope
        self.path = path
        self.entry: Entry | None = None
        self.totals: FsDirSize | None = None
        self._dirsize_task: TaskHandle | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="properties-box", classes="dialog"):
            yield Static(printable(f"Properties of /{self.path}"), classes="dialog--title", markup=False)
            yield Static("", id="properties-table")
            yield Static("Loading…", id="status", markup=False)
            with Horizontal(classes="dialog--buttons"):
                yield Button("Close", id="properties-close", compact=True)
            yield Static("Enter/Esc: close", classes="dialog--hint")

    def on_mount(self) -> None:
        self.query_one("#properties-close", Button).focus()
        self._stat()

    def _stat(self) -> None:
        self.bridge.run(
            self,
            self.client.files.stat,
            self.server.id,
            self.scope,
            self.path,
            on_done=self._show,
            on_error=self._unreadable,
        )

    def _unreadable(self, exc: BaseException) -> None:
        if not self.again_when_agent_back(exc, self.server.id, self._stat):
            self.show_error(exc, path=f"/{self.path}")

    @on(Button.Pressed, "#properties-close")
    def _close(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_cancel()

    def action_cancel(self) -> None:
        if self._dirsize_task is not None:
            self._dirsize_task.cancel()  # a walk of a big tree stops with the dialog
        super().action_cancel()

    def _show(self, entry: Entry) -> None:
        self.entry = entry
        self._render_table()
        if entry.type == "dir":
            self.set_status("Adding up the size of the folder…")
            self._dirsize_task = self.bridge.run(
                self,
                self.client.files.dirsize,
                self.server.id,
                self.scope,
                self.path,
                on_done=self._show_totals,
                on_error=lambda exc: self.show_error(exc, path=f"/{self.path}"),
            )
        else:
            self.set_status("")

    def _show_totals(self, totals: FsDirSize) -> None:
        self.totals = totals
        self._render_table()
        self.set_status("")

    def rows(self) -> list[tuple[str, str]]:
        """The properties as (label, value) pairs, as shown."""
        entry = self.entry
        if entry is None:
            return []
        rows = [("Name", entry.name or "/"), ("Path", f"/{entry.path}")]
        rows.append(("Type", TYPE_NAMES.get(entry.type, entry.type)))
        if entry.type == "dir":
            if self.totals is None:
                rows.append(("Size", "adding up…"))
            else:
                contents = f"{plural(self.totals.files, 'file')}, {plural(self.totals.dirs, 'folder')}"
                rows.append(("Size", f"{size_text(self.totals.bytes)} in {contents}"))
        else:
            rows.append(("Size", size_text(entry.size)))
        rows.append(("Owner", f"{entry.owner}:{entry.group}"))
        rows.append(("Permissions", f"{permission_string(entry.mode)} ({octal(entry.mode)})"))
        mtime = entry.mtime if entry.mtime.tzinfo else entry.mtime.replace(tzinfo=UTC)
        local = mtime.astimezone()
        utc = mtime.astimezone(UTC)
        also_utc = f" ({utc:%H:%M:%S} UTC)" if local.utcoffset() != utc.utcoffset() else ""
        rows.append(("Modified", f"{local:%Y-%m-%d %H:%M:%S %Z}{also_utc}"))
        if entry.link_target is not None:
            rows.append(("Link target", entry.link_target or "(unreadable)"))
        return [(label, printable(value)) for label, value in rows]

    def _render_table(self) -> None:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column(overflow="fold")
        for label, value in self.rows():
            table.add_row(label, Text(value))
        self.query_one("#properties-table", Static).update(table)
