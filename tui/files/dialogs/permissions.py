"""Permissions of one or more paths: a 3x3 grid (owner, group, other by read, write, execute)
kept in step with an octal field, recursive with files-only or folders-only; the dialog runs
the chmod itself. setuid, setgid and sticky are refused here as on the server.

The mode it starts from is the first path's as the server has it when the dialog opens (`fs/stat`),
not the panel's listing, which may be older than a change made outside: Enter without an edit
must never put an old mode back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical
from textual.widgets import Button, Input, Label, RadioSet, Static

from api_client import PATHS_PER_BATCH, BatchInterrupted, Entry, Scope, Server
from tui.errors import unwrap
from tui.files.dialogs.base import describe_items, gone_meanwhile, octal, permission_string, plural
from tui.files.dialogs.bulk import describe_bulk_error
from tui.screen import SUBMITTING
from tui.text import load_tcss, printable
from tui.widgets.dialogs import Dialog
from tui.widgets.toggles import Checkbox, RadioButton

WHO = ("owner", "group", "other")
WHAT = ("read", "write", "execute")
# The bit of each checkbox: owner read = 0o400 … other execute = 0o001.
BITS = {f"{who}-{what}": 1 << (8 - 3 * row - col) for row, who in enumerate(WHO) for col, what in enumerate(WHAT)}

ApplyTo = Literal["all", "files", "dirs"]


def parse_mode(text: str) -> int | str:
    """The mode typed in the octal field, or why it is refused."""
    text = text.strip()
    if not text:
        return "Type an octal mode such as 644 or 755."
    try:
        mode = int(text, 8)
    except ValueError:
        return "An octal mode has only the digits 0 to 7."
    if mode > 0o777:
        return "setuid, setgid and sticky bits cannot be set here: use three digits (e.g. 755)."
    return mode


class PermissionsDialog(Dialog[int | None]):
    """Enter (or ctrl+s, or Apply) changes the mode; the result is how many paths changed.

    It opens "Reading…", with nothing focused and Apply refused, until the server said the first
    path's mode and owner; the field is focused only then, so keys typed meanwhile wait for it."""

    DEFAULT_CSS = load_tcss(__file__)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "apply", "Apply"),
    ]

    AUTO_FOCUS = None  # the field takes the focus once the mode is read (`_loaded`)

    def __init__(self, server: Server, scope: Scope, paths: Sequence[str], has_dirs: bool) -> None:
        super().__init__()
        self.server = server
        self.scope = scope
        self.paths = list(paths)
        self.current: Entry | None = None
        """The first path as the server had it when the dialog opened; None while it is read."""
        self.has_dirs = has_dirs
        self.applying = False
        self.stopping = False

    def compose(self) -> ComposeResult:
        mode = 0
        with Vertical(id="permissions-box", classes="dialog"):
            yield Static(
                printable(f"Permissions of {describe_items(self.paths)}"), classes="dialog--title", markup=False
            )
            with Grid(id="permissions-grid"):
                yield Label("")
                for what in WHAT:
                    yield Label(what.capitalize(), classes="permissions--head")
                for who in WHO:
                    yield Label(who.capitalize(), classes="permissions--who")
                    for what in WHAT:
                        key = f"{who}-{what}"
                        yield Checkbox("", bool(mode & BITS[key]), id=f"bit-{key}", compact=True, disabled=True)
            with Horizontal(classes="dialog--row"):
                yield Label("Octal ", classes="permissions--who")
                yield Input(
                    "", id="permissions-octal", restrict=r"[0-7]{0,4}", max_length=4, compact=True, disabled=True
                )
                yield Static("", id="permissions-symbolic", markup=False)
                yield Static("", id="permissions-owner", markup=False)
            if self.has_dirs:
                with Horizontal(classes="dialog--row"):
                    yield Checkbox("Recursive", False, id="permissions-recursive", compact=True)
                    with RadioSet(id="permissions-apply-to", disabled=True, compact=True):
                        yield RadioButton("all", True, id="apply-all", compact=True)
                        yield RadioButton("files only", id="apply-files", compact=True)
                        yield RadioButton("folders only", id="apply-dirs", compact=True)
            yield Static(f"Reading the permissions of {describe_items(self.paths[:1])}…", id="status", markup=False)
            with Horizontal(classes="dialog--buttons"):
                yield Button("Apply", id="permissions-apply", variant="primary", compact=True)
                yield Button("Cancel", id="permissions-cancel", compact=True)
            yield Static("Enter/ctrl+s: apply · Tab: grid · Space: tick · Esc: cancel", classes="dialog--hint")

    def on_mount(self) -> None:
        self._read()

    def _read(self) -> None:
        self.hold_keys()  # what is typed meanwhile edits the server's mode, once it is in
        self.bridge.run(
            self,
            self.client.files.stat,
            self.server.id,
            self.scope,
            self.paths[0],
            on_done=self._loaded,
            on_error=self._unreadable,
        )

    def _unreadable(self, exc: BaseException) -> None:
        """Said on the status line; an offline agent's mode is read once it is back. The keys
        typed meanwhile go to the dialog as it is (Esc closes it)."""
        gone = gone_meanwhile(exc, self.paths[0])
        if gone is not None:
            self.set_status(gone, error=True)
        elif not self.again_when_agent_back(exc, self.server.id, self._read):
            self.show_error(exc, path=f"/{self.paths[0]}")
        self.release_keys()

    def _loaded(self, entry: Entry) -> None:
        """The server's mode in the field and the grid; the dialog is ready from here."""
        self.current = entry
        mode = entry.mode & 0o777
        for widget in (self.octal_field, *self.query("#permissions-grid Checkbox").results(Checkbox)):
            widget.disabled = False
        with self.prevent(Input.Changed):
            self.octal_field.value = octal(mode)[1:]
        self.show_in_grid(mode)
        self.query_one("#permissions-owner", Static).update(printable(f" · owner {entry.owner}:{entry.group}"))
        note = ""
        if entry.mode & 0o7000:
            note = f"Now {octal(entry.mode)}: applying clears setuid, setgid and sticky."
        self.set_status(note)
        self.octal_field.focus()
        self.release_keys()

    # --- the grid and the field stay in step ---------------------------------------------------
    # Each side is written only in answer to the user editing the other, with the echo prevented,
    # and from the other's current value (never the value a queued message carried): a burst of
    # keys in the field cannot have the grid write an older mode back into it. The field is
    # never rewritten while it has focus.

    @property
    def octal_field(self) -> Input:
        return self.query_one("#permissions-octal", Input)

    def grid_mode(self) -> int:
        mode = 0
        for key, bit in BITS.items():
            if self.query_one(f"#bit-{key}", Checkbox).value:
                mode |= bit
        return mode

    def show_in_grid(self, mode: int) -> None:
        with self.prevent(Checkbox.Changed):
            for key, bit in BITS.items():
                self.query_one(f"#bit-{key}", Checkbox).value = bool(mode & bit)
        self.query_one("#permissions-symbolic", Static).update(permission_string(mode))

    @on(Checkbox.Changed, "#permissions-grid Checkbox")
    def _bit_changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        mode = self.grid_mode()
        field = self.octal_field
        if not field.has_focus and parse_mode(field.value) != mode:
            with self.prevent(Input.Changed):
                field.value = octal(mode)[1:]
            self.set_status("")
        self.query_one("#permissions-symbolic", Static).update(permission_string(mode))

    @on(Input.Changed, "#permissions-octal")
    def _octal_changed(self, event: Input.Changed) -> None:
        event.stop()
        text = self.octal_field.value
        mode = parse_mode(text)
        if isinstance(mode, str):
            self.set_status(mode, error=bool(text))
            return
        self.set_status("")
        self.show_in_grid(mode)

    @on(Checkbox.Changed, "#permissions-recursive")
    def _recursive_changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        self.query_one("#permissions-apply-to", RadioSet).disabled = not event.value

    # --- applying -----------------------------------------------------------------------------

    @property
    def recursive(self) -> bool:
        return self.has_dirs and self.query_one("#permissions-recursive", Checkbox).value

    @property
    def apply_to(self) -> ApplyTo:
        if not self.recursive:
            return "all"
        pressed = self.query_one("#permissions-apply-to", RadioSet).pressed_button
        choice = (pressed.id if pressed is not None else None) or "apply-all"
        return "files" if choice == "apply-files" else "dirs" if choice == "apply-dirs" else "all"

    @on(Input.Submitted, "#permissions-octal")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_apply()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "permissions-apply":
            self.action_apply()
        else:
            self.action_cancel()

    def action_apply(self) -> None:
        """Applies the mode the field shows (the grid is brought in step with it first)."""
        if self.applying or self.current is None:
            return
        mode = parse_mode(self.octal_field.value)
        if isinstance(mode, str):
            self.set_status(mode, error=True)
            return
        self.show_in_grid(mode)
        only = {"all": None, "files": "files", "dirs": "dirs"}[self.apply_to]
        self.applying = True
        if len(self.paths) <= PATHS_PER_BATCH:  # (more: Esc stops it, and must not wait)
            self.hold_keys(SUBMITTING)  # typed meanwhile: for the panel, once the mode is set
        self.set_status(f"Setting {octal(mode)} on {describe_items(self.paths)}…")
        self.bridge.run(
            self,
            self._chmod,
            mode,
            self.recursive,
            only,
            on_done=self._applied,
            on_error=self._failed,
        )

    async def _chmod(self, mode: int, recursive: bool, only: Literal["files", "dirs"] | None) -> int:
        def progress(done: int, total: int) -> None:
            self.report(self.set_status, f"Setting {octal(mode)}: {done:,} of {plural(total, 'item')}… (Esc: stop)")

        return await self.client.files.chmod(
            self.server.id,
            self.scope,
            self.paths,
            mode,
            recursive=recursive,
            only=only,
            progress=progress,
            keep_going=lambda: not self.stopping,
        )

    def _applied(self, changed: int) -> None:
        self.applying = False
        self.notify(f"Permissions changed on {plural(changed, 'item')}.")
        self.finish(changed)

    def _failed(self, exc: BaseException) -> None:
        self.applying = False
        self.release_keys(SUBMITTING)
        message = describe_bulk_error(exc, "Changed", server=self.server.name)
        if isinstance(unwrap(exc), BatchInterrupted):  # part of the paths changed: say so, then close
            self.notify(message, severity="error" if not self.stopping else "information", timeout=8)
            self.finish(None)
            return
        self.show_error(exc)

    def action_cancel(self) -> None:
        """Esc: closes; while a chmod of several batches runs, stops it after the batch in flight."""
        if self.applying and len(self.paths) > PATHS_PER_BATCH and not self.stopping:
            self.stopping = True
            self.set_status("Stopping after the batch in flight…")
            return
        super().action_cancel()
