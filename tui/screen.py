"""What every fleetdeck screen shares: access to the API client and the trio bridge."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, cast

from textual.screen import ModalScreen, Screen

from api_client import Client
from tui.bridge import BridgedMixin, TrioBridge
from tui.errors import describe_error
from tui.text import load_tcss

if TYPE_CHECKING:
    from textual.message_pump import MessagePump

    from tui.app import FleetdeckApp
    from tui.monitor import ConnectionMonitor

T = TypeVar("T")

SUBMITTING = "submitting"
"""What holds a modal's keys while what it submitted is on its way (`FleetModal.dismiss_submitted`)."""


class FleetAccess:
    """The app's API client and trio bridge, for screens and modal screens alike."""

    @property
    def fleet(self) -> FleetdeckApp:
        return cast("FleetdeckApp", cast("Screen[Any]", self).app)

    @property
    def client(self) -> Client:
        return self.fleet.client

    @property
    def bridge(self) -> TrioBridge:
        return self.fleet.bridge

    @property
    def monitor(self) -> ConnectionMonitor:
        """Whether the control plane answers, and the agents' presence (set once connected)."""
        monitor = self.fleet.monitor
        if monitor is None:
            raise RuntimeError("not connected yet")
        return monitor


class KeepsEarlyKeys(Screen[Any]):
    """A screen that may ask for the keys typed meanwhile to wait (`tui.keys` routes them).

    Keys typed while a screen is being mounted already wait for it (the app's `KeyQueue`), and
    reach the widget its `on_mount` focused, in order. A screen that is not ready once mounted
    (its fields show what it still loads from the server) calls `hold_keys()` in `on_mount` and
    `release_keys()` once its fields are filled and focused (or on error: the keys then go to
    what it shows). So does a screen whose action loads what it will open (`n` while the job
    catalog loads): the keys typed meanwhile go to what it opens, or to it if the load fails.
    """

    _key_holders: frozenset[object] = frozenset()

    @property
    def holding_keys(self) -> bool:
        """True while anything holds the keys (`hold_keys`): the keys typed meanwhile wait."""
        return bool(self._key_holders)

    def hold_keys(self, holder: object | None = None) -> None:
        """Keep the keys typed from now on waiting, until `release_keys(holder)`. `holder` (the
        screen by default): what waits for something, such as each of two panels listing a folder."""
        self._key_holders |= {self if holder is None else holder}

    def release_keys(self, holder: object | None = None, *, after: MessagePump | None = None) -> None:
        """Let the keys waiting go once no holder is left: to the screen on top then, once it is
        ready. Through the app's queue, so a `focus()` asked for just before (also queued there)
        is done first. With `after`, once `after` has also run the callbacks queued next on it (a
        dismissed dialog's result reaches the screen that opened it that way: what that result
        opens gets the keys)."""
        holders = self._key_holders - {self if holder is None else holder}
        if holders == self._key_holders:
            return
        self._key_holders = holders
        keys = getattr(self.app, "keys", None)
        if keys is not None and not holders:
            if after is None:
                self.app.call_later(keys.pump)
            else:
                after.call_next(self.app.call_later, keys.pump)


class FleetScreen(FleetAccess, KeepsEarlyKeys, BridgedMixin, Screen[None]):
    """A screen whose trio tasks are cancelled when it is dismissed (see `BridgedMixin`)."""

    DEFAULT_CSS = load_tcss(__file__)

    @property
    def dismissed(self) -> bool:
        """True once the screen left the stack: even before its `on_mount` ran (Enter, Escape fast)."""
        return self not in self.app.screen_stack

    def unsaved_changes(self) -> str | None:
        """What closing this screen now would lose, in a few words (None: nothing). The app asks
        before quitting or leaving while any screen on the stack has some."""
        return None

    def show_error(self, exc: BaseException, *, server: str | None = None, path: str | None = None) -> None:
        """An error as a notification, worded for humans."""
        self.notify(describe_error(exc, server=server, path=path), severity="error", timeout=8)


class FleetModal(FleetAccess, KeepsEarlyKeys, BridgedMixin, ModalScreen[T]):
    """A modal screen that may submit trio work (cancelled when it closes).

    While what it submitted is on its way, it holds the keys typed meanwhile (`SUBMITTING`);
    `dismiss_submitted` then gives them to what its result opens (the editor after a new file,
    the job's run screen after its form), not to the modal nor the screen under it.
    """

    def dismiss_submitted(self, result: T) -> None:
        """Dismiss with `result`; the keys held while it was submitted go once the result's
        callback has run (queued on the screen that pushed this one)."""
        opener = self._result_callbacks[-1].requester if self._result_callbacks else None
        self.dismiss(result)
        self.release_keys(SUBMITTING, after=opener)
