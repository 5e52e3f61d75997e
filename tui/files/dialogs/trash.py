"""The trash of a scope: what is in it (opening it purges items older than 30 days), restore
(asks before overwriting what took an item's place) and empty (asks first)."""

from __future__ import annotations

from datetime import UTC
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static
from textual.widgets.selection_list import Selection

from api_client import Scope, Server
from api_client import errors as api_errors
from contract.models import TrashItem
from tui.errors import format_size
from tui.files.dialogs.base import plural
from tui.text import load_tcss, printable
from tui.widgets.dialogs import ConfirmDialog, Dialog
from tui.widgets.toggles import SelectionList


def item_prompt(item: TrashItem, name_width: int, path_width: int) -> Text:
    """`name  original/path  2026-11-22 10:00  1.2 KiB` in fixed columns."""
    deleted = item.deleted_at if item.deleted_at.tzinfo else item.deleted_at.replace(tzinfo=UTC)
    name = printable(item.name) + ("/" if item.type == "dir" else "")
    prompt = Text(no_wrap=True, overflow="ellipsis")
    prompt.append(_fit(name, name_width), style="bold")
    prompt.append("  " + _fit("/" + printable(item.original_path), path_width), style="dim")
    prompt.append(f"  {deleted.astimezone():%Y-%m-%d %H:%M}")
    prompt.append(f"  {format_size(item.size):>7}")
    return prompt


def _fit(text: str, width: int) -> str:
    return text.ljust(width) if len(text) <= width else text[: width - 1] + "…"


class TrashDialog(Dialog[list[str]]):
    """Space ticks items; r restores the ticked (or the highlighted) ones; e empties the trash;
    Esc closes and returns the restored paths."""

    DEFAULT_CSS = load_tcss(__file__)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Close"),
        Binding("r", "restore", "Restore"),
        Binding("e", "empty", "Empty trash"),
        Binding("a", "select_all", "All"),
    ]

    def __init__(self, server: Server, scope: Scope) -> None:
        super().__init__()
        self.server = server
        self.scope = scope
        self.items: list[TrashItem] = []
        self.purged: int | None = None
        self.restored: list[str] = []
        self.busy = False

    def cancel_result(self) -> list[str]:
        return list(self.restored)

    def compose(self) -> ComposeResult:
        with Vertical(id="trash-box", classes="dialog -wide -tall"):
            label = self.scope.domain or "/home"
            yield Static(printable(f"Trash of {label}"), classes="dialog--title", markup=False)
            yield SelectionList[str](id="trash-items", compact=True)
            yield Static("Opening the trash…", id="status", markup=False)
            with Horizontal(classes="dialog--buttons"):
                yield Button("Restore (r)", id="trash-restore", variant="primary", compact=True)
                yield Button("Empty trash (e)", id="trash-empty", variant="error", compact=True)
                yield Button("Close (Esc)", id="trash-close", compact=True)
            yield Static("Space: tick · a: tick all · r: restore · e: empty · Esc: close", classes="dialog--hint")

    def on_mount(self) -> None:
        self.query_one("#trash-items", SelectionList).focus()
        self.hold_keys()  # typed while it opens: for the items it lists (Space, r), once listed
        self.load(first=True)

    def load(self, *, first: bool = False) -> None:
        self.busy = True
        self.bridge.run(
            self,
            self.client.files.trash,
            self.server.id,
            self.scope,
            on_done=lambda answer: self._show(*answer, first=first),
            on_error=lambda exc: self._failed(exc, first=first),
        )

    def _show(self, items: list[TrashItem], purged: int, *, first: bool) -> None:
        self.busy = False
        self.items = sorted(items, key=lambda item: item.deleted_at, reverse=True)
        if first:
            self.purged = purged
        listing = self.query_one("#trash-items", SelectionList)
        listing.clear_options()
        width = max(20, listing.size.width or 70) - 8  # the tick box, padding and a scrollbar
        fixed = 2 + 16 + 2 + 7
        name_width = max(8, min(28, (width - fixed) // 2))
        path_width = max(8, width - fixed - name_width)
        listing.add_options(Selection(item_prompt(item, name_width, path_width), item.id) for item in self.items)
        if self.items:
            listing.highlighted = 0
        words = [plural(len(self.items), "item") + " in the trash" if self.items else "The trash is empty."]
        if self.purged:
            words.append(f"Opening it removed {plural(self.purged, 'item')} older than 30 days.")
        self.set_status(" ".join(words))
        self.release_keys()

    def _failed(self, exc: BaseException, *, first: bool = False) -> None:
        self.busy = False
        if not self.again_when_agent_back(exc, self.server.id, lambda: self.load(first=first)):
            self.show_error(exc)
        self.release_keys()

    # --- actions ------------------------------------------------------------------------------

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        action = {"trash-restore": self.action_restore, "trash-empty": self.action_empty}.get(event.button.id or "")
        (action or self.action_cancel)()

    def action_select_all(self) -> None:
        self.query_one("#trash-items", SelectionList).select_all()

    def chosen(self) -> list[str]:
        """The ticked items, else the highlighted one."""
        listing: SelectionList[str] = self.query_one("#trash-items", SelectionList)
        if listing.selected:
            return list(listing.selected)
        if listing.highlighted is not None and self.items:
            return [self.items[listing.highlighted].id]
        return []

    def action_restore(self) -> None:
        ids = self.chosen()
        if self.busy or not ids:
            return
        self._restore(ids, overwrite=False)

    def _restore(self, ids: list[str], *, overwrite: bool) -> None:
        self.busy = True
        self.set_status(f"Restoring {plural(len(ids), 'item')}…")
        self.bridge.run(
            self,
            self._restore_call,
            ids,
            overwrite,
            on_done=self._restored,
            on_error=lambda exc: self._restore_failed(exc, ids),
        )

    async def _restore_call(self, ids: list[str], overwrite: bool) -> list[str]:
        return await self.client.files.restore(self.server.id, self.scope, ids, overwrite=overwrite)

    def _restored(self, paths: list[str]) -> None:
        self.restored.extend(paths)
        self.notify(f"Restored {plural(len(paths), 'item')}.")
        self.load()

    def _restore_failed(self, exc: BaseException, ids: list[str]) -> None:
        self.busy = False
        if not isinstance(exc, api_errors.Conflict):
            self.show_error(exc)
            return
        where = exc.details.get("path")
        taken = f"/{where} is taken" if isinstance(where, str) else "Something is already where they were"

        def answered(overwrite: bool | None) -> None:
            if overwrite:
                self._restore(ids, overwrite=True)
            else:
                self.set_status("Nothing restored.")

        self.app.push_screen(
            ConfirmDialog(
                "Overwrite on restore?",
                printable(f"{taken}. Restoring replaces what is there now, which cannot be undone."),
                confirm_label="Overwrite",
            ),
            answered,
        )

    def action_empty(self) -> None:
        if self.busy:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.busy = True
                self.set_status("Emptying the trash…")
                self.bridge.run(
                    self,
                    self.client.files.empty_trash,
                    self.server.id,
                    self.scope,
                    on_done=self._emptied,
                    on_error=self._failed,
                )

        count = plural(len(self.items), "item") if self.items else "everything"
        self.app.push_screen(
            ConfirmDialog("Empty the trash?", f"This deletes {count} for good.", confirm_label="Empty trash"),
            answered,
        )

    def _emptied(self, removed: int) -> None:
        self.notify(f"Emptied the trash: {plural(removed, 'item')} deleted for good.")
        self.load()
