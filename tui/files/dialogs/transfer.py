"""Downloads and uploads with a progress bar, speed, time left and Cancel; and the small dialog
that asks for the local path.

A download is written to a temporary file next to the target and renamed at the end, so a
cancelled or failed download leaves nothing behind; an upload that stops leaves nothing on the
server (the agent keeps the bytes aside until the last one has arrived). Local files are read
and written in worker threads, in big chunks.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import deque
from collections.abc import AsyncGenerator
from contextlib import aclosing
from functools import partial
from pathlib import Path
from typing import BinaryIO, ClassVar, Literal, cast

import trio
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, ProgressBar, Static

from api_client import Scope, Server
from api_client import errors as api_errors
from tui.errors import format_size
from tui.files.dialogs.base import format_duration
from tui.text import PRINTABLE, load_tcss, printable
from tui.widgets.dialogs import ConfirmDialog, Dialog

Direction = Literal["download", "upload"]

READ_CHUNK = 1024 * 1024  # one upload frame
WRITE_CHUNK = 4 * 1024 * 1024  # downloaded bytes are written to disk in blocks this big
REPORT_EVERY_S = 0.1  # progress reaches the screen at most ten times a second
SPEED_WINDOW_S = 3.0  # the speed shown is the average over the last seconds


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# A download gets the mode any new file of this user gets (mkstemp would leave it 0600).
NEW_FILE_MODE = 0o666 & ~_read_umask()


def temp_name(target: Path) -> str:
    """The prefix of the temporary file a download goes to, next to its target."""
    return f".{target.name}."


class RemoteExists(Exception):
    """The upload's target exists on the server (asked before sending: a 409 that the server
    gives while the body is still being sent can reach the client as a dropped connection)."""


class SpeedMeter:
    """Bytes per second over a sliding window: steady enough to read, quick to follow a change."""

    def __init__(self, window: float = SPEED_WINDOW_S) -> None:
        self.window = window
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, at: float, done: int) -> None:
        self.samples.append((at, done))
        while len(self.samples) > 2 and at - self.samples[0][0] > self.window:
            self.samples.popleft()

    @property
    def speed(self) -> float | None:
        if len(self.samples) < 2:
            return None
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else None


class TransferDialog(Dialog[bool]):
    """A download or an upload running: Esc or c cancels it; the result says if it completed."""

    DEFAULT_CSS = load_tcss(__file__)
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,c", "cancel", "Cancel")]

    def __init__(self, server: Server, scope: Scope, direction: Direction, remote_path: str, local_path: Path) -> None:
        super().__init__()
        self.server = server
        self.scope = scope
        self.direction = direction
        self.remote_path = remote_path.strip("/")
        self.local_path = Path(local_path)
        self.total: int | None = None
        self.done = 0
        self.meter = SpeedMeter()
        self.started_at = time.monotonic()
        self.running = False
        self.cancelling = False
        self.failed = False
        # trio side: the scope of the running transfer, and a cancel that came before it.
        self._scope: trio.CancelScope | None = None
        self._cancel_requested = False

    @classmethod
    def download(cls, server: Server, scope: Scope, remote_path: str, local_path: Path) -> TransferDialog:
        return cls(server, scope, "download", remote_path, local_path)

    @classmethod
    def upload(cls, server: Server, scope: Scope, local_path: Path, remote_path: str) -> TransferDialog:
        return cls(server, scope, "upload", remote_path, local_path)

    def cancel_result(self) -> bool:
        return False

    # --- the screen ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        remote = f"{self.server.name}:/{self.remote_path}"
        local = str(self.local_path)
        title = f"Download {remote} → {local}" if self.direction == "download" else f"Upload {local} → {remote}"
        with Vertical(id="transfer-box", classes="dialog"):
            yield Static(printable(title), classes="dialog--title", markup=False)
            yield ProgressBar(total=None, show_eta=False, id="transfer-bar")
            yield Static("", id="transfer-numbers", markup=False)
            yield Static("Starting…", id="status", markup=False)
            with Horizontal(classes="dialog--buttons"):
                yield Button("Cancel (c)", id="transfer-cancel", variant="error", compact=True)
            yield Static("Esc/c: cancel (nothing partial is kept)", classes="dialog--hint")

    def on_mount(self) -> None:
        self.query_one("#transfer-cancel", Button).focus()
        self.start(overwrite=False)

    def start(self, *, overwrite: bool) -> None:
        self.running = True
        self.started_at = time.monotonic()
        run = self._download if self.direction == "download" else self._upload
        self.bridge.run(self, run, overwrite, on_done=self._ended, on_error=self._failed)

    @on(Button.Pressed, "#transfer-cancel")
    def _cancel_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_cancel()

    def action_cancel(self) -> None:
        if not self.running or self.cancelling:
            self.finish(False)  # finished, failed, or a second Esc: close now
            return
        self.cancelling = True
        self.set_status("Cancelling…")
        self.bridge.run(self, self._cancel_in_trio)

    def progress(self, done: int, total: int | None) -> None:
        """From trio, through `report`: bytes so far (and the total, once known)."""
        now = time.monotonic()
        self.done = done
        if total is not None and total != self.total:
            self.total = total
            self.query_one("#transfer-bar", ProgressBar).update(total=max(total, 1))
        self.meter.add(now, done)
        self.query_one("#transfer-bar", ProgressBar).update(progress=done if self.total else 0)
        self.query_one("#transfer-numbers", Static).update(self.numbers())
        if not self.cancelling:
            verb = "Downloading" if self.direction == "download" else "Uploading"
            self.set_status(f"{verb}…")

    def numbers(self) -> str:
        """`12 MiB of 100 MiB · 4.5 MiB/s · 0:02 left`."""
        parts = [format_size(self.done) + (f" of {format_size(self.total)}" if self.total is not None else "")]
        speed = self.meter.speed
        if speed is not None:
            parts.append(f"{format_size(int(speed))}/s")
            if self.total is not None and speed > 0:
                parts.append(f"{format_duration((self.total - self.done) / speed)} left")
        return " · ".join(parts)

    def _ended(self, completed: bool) -> None:
        self.running = False
        if not completed:
            self.notify("Cancelled: " + ("nothing was saved." if self.direction == "download" else "nothing was kept."))
            self.finish(False)
            return
        took = max(time.monotonic() - self.started_at, 1e-6)
        where = str(self.local_path) if self.direction == "download" else f"/{self.remote_path}"
        average = f"{format_size(int(self.done / took))}/s"
        self.notify(printable(f"Saved {where}: {format_size(self.done)} in {format_duration(took)} ({average})."))
        self.finish(True)

    def _failed(self, exc: BaseException) -> None:
        self.running = False
        if isinstance(exc, RemoteExists | api_errors.Conflict) and self.direction == "upload":
            self._ask_overwrite()
            return
        self.failed = True
        self.show_error(exc, path=f"/{self.remote_path}")
        button = self.query_one("#transfer-cancel", Button)
        button.label = "Close"
        button.variant = "default"

    def _ask_overwrite(self) -> None:
        def answered(overwrite: bool | None) -> None:
            if overwrite:
                self.start(overwrite=True)
            else:
                self.finish(False)

        self.set_status(f"/{self.remote_path} exists on the server.")
        self.app.push_screen(
            ConfirmDialog(
                "Replace the file on the server?",
                printable(f"/{self.remote_path} already exists. The upload replaces it."),
                confirm_label="Replace",
            ),
            answered,
        )

    # --- trio side ----------------------------------------------------------------------------

    async def _cancel_in_trio(self) -> None:
        self._cancel_requested = True
        if self._scope is not None:
            self._scope.cancel()

    async def _download(self, overwrite: bool) -> bool:
        """True when the whole file arrived; False when cancelled (the temporary file is gone)."""
        del overwrite  # the local path was confirmed before
        with trio.CancelScope() as scope:
            self._scope = scope
            if self._cancel_requested:
                scope.cancel()
            entry = await self.client.files.stat(self.server.id, self.scope, self.remote_path)
            self.report(self.progress, 0, entry.size)
            await self._receive(entry.size)
            return True
        return False

    async def _receive(self, size: int) -> None:
        target = self.local_path
        make_temp = partial(tempfile.mkstemp, dir=target.parent, prefix=temp_name(target), suffix=".part")
        fd, temp = await trio.to_thread.run_sync(make_temp)
        placed = False
        try:
            os.fchmod(fd, NEW_FILE_MODE)
            with os.fdopen(fd, "wb") as out:
                done = await self._write_chunks(out, size)
                await trio.to_thread.run_sync(out.flush)
            await trio.to_thread.run_sync(os.replace, temp, target)
            placed = True
            self.report(self.progress, done, size)
        finally:
            if not placed:
                try:
                    os.unlink(temp)  # quick, and must happen even while cancelled
                except FileNotFoundError:
                    pass

    async def _write_chunks(self, out: BinaryIO, size: int) -> int:
        buffer = bytearray()
        done = 0
        reported = time.monotonic()
        chunks = cast(
            AsyncGenerator[bytes, None], self.client.files.download(self.server.id, self.scope, self.remote_path)
        )
        async with aclosing(chunks):
            async for chunk in chunks:
                buffer += chunk
                done += len(chunk)
                if len(buffer) >= WRITE_CHUNK:
                    await trio.to_thread.run_sync(out.write, bytes(buffer))
                    buffer.clear()
                if time.monotonic() - reported >= REPORT_EVERY_S:
                    reported = time.monotonic()
                    self.report(self.progress, done, size)
        if buffer:
            await trio.to_thread.run_sync(out.write, bytes(buffer))
        return done

    async def _upload(self, overwrite: bool) -> bool:
        """True when the server has the whole file; False when cancelled (the server keeps nothing)."""
        with trio.CancelScope() as scope:
            self._scope = scope
            if self._cancel_requested:
                scope.cancel()
            if not overwrite and await self._remote_exists():
                raise RemoteExists(self.remote_path)
            size = (await trio.to_thread.run_sync(self.local_path.stat)).st_size
            self.report(self.progress, 0, size)
            source = await trio.to_thread.run_sync(partial(open, self.local_path, "rb"))
            try:
                chunks = self._read_chunks(cast(BinaryIO, source), size)
                async with aclosing(chunks):
                    await self.client.files.upload(
                        self.server.id, self.scope, self.remote_path, chunks, size=size, overwrite=overwrite
                    )
            finally:
                source.close()
            self.report(self.progress, size, size)
            return True
        return False

    async def _remote_exists(self) -> bool:
        try:
            await self.client.files.stat(self.server.id, self.scope, self.remote_path)
        except api_errors.NotFound:
            return False
        return True

    async def _read_chunks(self, source: BinaryIO, size: int) -> AsyncGenerator[bytes, None]:
        sent = 0
        reported = time.monotonic()
        while chunk := await trio.to_thread.run_sync(source.read, READ_CHUNK):
            sent += len(chunk)
            if time.monotonic() - reported >= REPORT_EVERY_S:
                reported = time.monotonic()
                self.report(self.progress, sent, size)
            yield chunk


# --- the local path ---------------------------------------------------------------------------

PathMode = Literal["save", "open"]


def local_path_problem(text: str, mode: PathMode) -> tuple[Path | None, str | None]:
    """The path typed (with `~` expanded) and why it cannot be used, if it cannot."""
    if not text.strip():
        return None, "Type a path."
    path = Path(text.strip()).expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    if mode == "open":
        if not path.exists():
            return path, f"{path} does not exist."
        if not path.is_file():
            return path, f"{path} is not a file."
        if not os.access(path, os.R_OK):
            return path, f"{path} cannot be read."
        return path, None
    if path.is_dir():
        return path, f"{path} is a folder: add a file name."
    if not path.parent.is_dir():
        return path, f"The folder {path.parent} does not exist."
    if not os.access(path.parent, os.W_OK):
        return path, f"The folder {path.parent} cannot be written."
    return path, None


class LocalPathDialog(Dialog[Path | None]):
    """A path on this computer: where to save (`mode="save"`, the default: its folder must exist;
    an existing file needs a second Enter) or what to upload (`mode="open"`: it must exist)."""

    def __init__(self, title: str, initial: str, *, mode: PathMode = "save") -> None:
        super().__init__()
        self.title_text = title
        self.initial = initial
        self.mode = mode
        self._confirmed_replace: Path | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="local-path-box", classes="dialog"):
            yield Static(printable(self.title_text), classes="dialog--title", markup=False)
            yield Input(
                self.initial,
                placeholder="a path on this computer (~ works)",
                id="local-path",
                compact=True,
                highlighter=PRINTABLE,
            )
            yield Static("", id="status", markup=False)
            yield Static("Enter: OK · Esc: cancel", classes="dialog--hint")

    def on_mount(self) -> None:
        self.query_one("#local-path", Input).focus()

    @on(Input.Changed, "#local-path")
    def _changed(self, event: Input.Changed) -> None:
        event.stop()
        self._confirmed_replace = None
        self.set_status("")

    @on(Input.Submitted, "#local-path")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        path, problem = local_path_problem(event.value, self.mode)
        if problem or path is None:
            self.set_status(problem or "Type a path.", error=True)
            return
        if self.mode == "save" and path.exists() and self._confirmed_replace != path:
            self._confirmed_replace = path
            self.set_status(f"{path} exists: Enter again to replace it.", error=True)
            return
        self.finish(path)
