"""Edit one text file of a server: ctrl+s saves it, unless someone else saved it meanwhile.

Every save carries `if_match` = the etag of the last read or save. When the file changed on the
server since, the save fails with `Conflict` and `SaveConflictDialog` offers to reload theirs,
overwrite it with ours, or save ours as a copy (`create_only`, never replacing a file).

It follows its server's agent (presence, from `tui.monitor`): while the agent is offline its bar
says so (a save then fails, and keeps the text). Once the agent is back, a file with no unsaved
edits is read again (the cursor where it was); one with unsaved edits is kept as typed, and it
says that ctrl+s saves now.
"""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Input, Static

from api_client import FileContent, Scope, Server
from api_client import errors as api_errors
from contract.models import FsWriteResult, PresenceEvent
from tui.errors import unwrap
from tui.files.editor import Editor
from tui.files.save_conflict import (
    CloseChoice,
    ConflictChoice,
    CopyNameDialog,
    SaveConflictDialog,
    UnsavedChangesDialog,
    copy_name,
)
from tui.screen import FleetScreen
from tui.text import load_tcss, printable
from tui.widgets.footer import FleetFooter
from tui.widgets.header import SafeHeader

SAVING = "saving"
"""What holds the editor's keys while a save is on its way (`KeepsEarlyKeys.hold_keys`)."""


class EditorScreen(FleetScreen):
    """A file in the editor; ctrl+s saves, ctrl+f searches, Escape closes (asking if unsaved)."""

    HELP_TITLE = "Editor"

    # The editor's own keys (`Editor.KEYS`); letters, `?` and `:` are typed into the text.
    HELP_NAVIGATION_KEYS: ClassVar[list[tuple[str, str]]] = [
        ("↑ ↓ ← →", "Move the cursor"),
        ("PgUp PgDn", "A page up or down"),
        ("Home End", "Start or end of the line"),
        ("ctrl+Home ctrl+End", "First or last line"),
        ("Tab", "Spaces up to the next tab stop"),
        ("ctrl+p", "Command palette: themes, go to servers/files, …"),
    ]

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "save", "Save"),
        Binding("ctrl+f", "find", "Find"),
        Binding("f3", "find_next", "Next", show=False),
        Binding("escape", "close", "Close"),
    ]

    AUTO_FOCUS = "#editor"

    def __init__(self, server: Server, scope: Scope, content: FileContent) -> None:
        super().__init__()
        self.server = server
        self.title = server.name
        self.scope = scope
        self.path = content.path.lstrip("/")
        self.etag = content.etag
        self.content = content
        self.saving = False
        self._close_after_save = False
        self._agent_offline = False  # said by the presence stream, or by a save that failed so

    def compose(self) -> ComposeResult:
        yield SafeHeader()
        yield Static("", id="editor-bar", markup=False)
        yield Editor(id="editor")
        yield Input(placeholder="Find… (Enter/F3: next, Esc: close)", id="editor-search", compact=True)
        yield FleetFooter()

    @property
    def editor(self) -> Editor:
        return self.query_one(Editor)

    def on_mount(self) -> None:
        if self.dismissed:
            return
        self.editor.load(self.content.content, self.path)
        self.editor.focus()
        self.monitor.presence.subscribe(self, self._presence_changed)

    # --- status -----------------------------------------------------------------------------

    @on(Editor.Changed)
    def _editor_changed(self, event: Editor.Changed) -> None:
        event.stop()
        self._update_bar()

    def _update_bar(self) -> None:
        editor = self.editor
        row, col = editor.cursor
        marker = "● " if editor.modified else ""
        state = " · saving…" if self.saving else ""
        if self._agent_offline:  # first: the bar is cut at the screen's edge
            marker = f"○ agent offline, ctrl+s saves once it is back · {marker}"
        text = f"{marker}/{self.path} · {row + 1}:{col + 1} · {editor.line_count:,} lines · {editor.language}{state}"
        self.query_one("#editor-bar", Static).update(printable(text))

    # --- the agent ------------------------------------------------------------------------------

    def _presence_changed(self, event: PresenceEvent) -> None:
        if event.server_id != self.server.id:
            return
        was_offline, self._agent_offline = self._agent_offline, not event.online
        self._update_bar()
        if not event.online or not was_offline:
            return
        if self.editor.modified or self.saving:
            self.notify(printable(f"The agent of {self.server.name} is back: ctrl+s saves /{self.path}."), timeout=5)
        else:
            self._reload(untouched=self.editor.version)

    # --- search -----------------------------------------------------------------------------

    def action_find(self) -> None:
        search = self.query_one("#editor-search", Input)
        search.display = True
        search.focus()

    def action_find_next(self) -> None:
        search = self.query_one("#editor-search", Input)
        query = search.value or self.editor.search_text
        if not query:
            self.action_find()
            return
        if not self.editor.find(query):
            self.notify(printable(f"Not found: {query}"), severity="warning", timeout=3)

    @on(Input.Submitted, "#editor-search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_find_next()

    def _close_search(self) -> None:
        search = self.query_one("#editor-search", Input)
        search.display = False
        self.editor.clear_match()
        self.editor.focus()

    # --- saving -----------------------------------------------------------------------------

    def action_save(self) -> None:
        self._write(self.path, if_match=self.etag)

    def _write(self, path: str, *, if_match: str | None, create_only: bool = False) -> None:
        if self.saving:
            return
        editor = self.editor
        text, version = editor.text, editor.version
        server_id, scope = self.server.id, self.scope
        files = self.client.files

        async def write() -> FsWriteResult:
            return await files.write(server_id, scope, path, text, if_match=if_match, create_only=create_only)

        self.saving = True
        self._update_bar()
        # What is typed meanwhile waits for the answer: Esc then closes the saved file without
        # asking, and a conflict's dialog gets the keys typed for it.
        self.hold_keys(SAVING)
        self.bridge.run(
            self,
            write,
            on_done=lambda result: self._saved(result, path, version, copy=create_only),
            on_error=lambda exc: self._save_failed(exc, path, copy=create_only),
        )

    def _saved(self, result: FsWriteResult, path: str, version: int, *, copy: bool) -> None:
        self.saving = False
        self.path = path
        self.etag = result.etag
        self.editor.mark_saved(version)
        self.notify(printable(f"Saved {'a copy as ' if copy else ''}/{path}"), timeout=3)
        self.release_keys(SAVING)
        if self._close_after_save:
            self.dismiss()

    def _save_failed(self, exc: BaseException, path: str, *, copy: bool) -> None:
        self.saving = False
        self._close_after_save = False
        self._update_bar()
        self.release_keys(SAVING)
        if isinstance(unwrap(exc), api_errors.AgentOffline):
            self._agent_offline = True
            self._update_bar()
        if isinstance(exc, api_errors.Conflict) and not copy:
            self.app.push_screen(SaveConflictDialog(path), self._resolve_conflict)
            return
        if copy and isinstance(exc, api_errors.ApiError) and exc.status == 409:
            self.notify(printable(f"/{path} exists: pick another name."), severity="error", timeout=8)
            return
        self.show_error(exc, server=self.server.name, path=path)

    def _resolve_conflict(self, choice: ConflictChoice | None) -> None:
        if choice == "overwrite":
            self._write(self.path, if_match=None)
        elif choice == "reload":
            self._reload()
        elif choice == "copy":
            self.app.push_screen(CopyNameDialog(copy_name(self.path)), self._save_copy)

    def _save_copy(self, path: str | None) -> None:
        if path:
            self._write(path, if_match=None, create_only=True)

    def _reload(self, *, untouched: int | None = None) -> None:
        """Read the file again; `untouched`: only if the text is still at that version when it
        comes (what was typed meanwhile is never replaced)."""
        self.bridge.run(
            self,
            self.client.files.read,
            self.server.id,
            self.scope,
            self.path,
            on_done=lambda content: self._reloaded(content, untouched),
            on_error=lambda exc: self.show_error(exc, server=self.server.name, path=self.path),
        )

    def _reloaded(self, content: FileContent, untouched: int | None = None) -> None:
        if untouched is not None and (self.editor.version != untouched or self.saving):
            return
        self.content = content
        self.etag = content.etag
        row, col = self.editor.cursor
        self.editor.load(content.content, self.path)
        self.editor.move_to(row, col)
        self.notify(printable(f"Reloaded /{self.path}"), timeout=3)

    # --- closing ----------------------------------------------------------------------------

    def unsaved_changes(self) -> str | None:
        return f"/{self.path}" if self.editor.modified else None

    def action_close(self) -> None:
        if self.query_one("#editor-search", Input).has_focus:
            self._close_search()
            return
        if self.editor.modified:
            self.app.push_screen(UnsavedChangesDialog(self.path), self._close_answered)
            return
        self.dismiss()

    def _close_answered(self, choice: CloseChoice | None) -> None:
        if choice == "discard":
            self.dismiss()
        elif choice == "save":
            self._close_after_save = True
            self.action_save()
