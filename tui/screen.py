"""What every fleetdeck screen shares: access to the API client and the trio bridge."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, cast

from textual import events, on
from textual.screen import ModalScreen, Screen

from api_client import Client
from tui.bridge import BridgedMixin, TrioBridge
from tui.errors import describe_error
from tui.text import load_tcss

if TYPE_CHECKING:
    from tui.app import FleetdeckApp
    from tui.monitor import ConnectionMonitor

T = TypeVar("T")


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
    """Keys typed before the screen focused its first widget are kept for that widget.

    A screen just pushed (a form, a picker, a dialog) focuses its field once mounted; until then
    the keys reach the screen, which has nothing to give them to, and they were lost (type the
    start of a name right after the key that opens the dialog). The keys bound on the screen or
    the app (Esc, F1) still act at once.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._early_keys: list[events.Key] | None = []
        """None once a widget had the focus. Not `focused is None`: a key the app forwarded
        here before the first focus may be read only once the focus is set."""

    @on(events.Key)
    def _keep_early_key(self, event: events.Key) -> None:
        # Before any focus, the active bindings are the screen's and the app's.
        if self._early_keys is not None and event.key not in self.active_bindings:
            event.stop()
            event.prevent_default()
            self._early_keys.append(events.Key(event.key, event.character))

    @on(events.DescendantFocus)
    def _replay_early_keys(self, _event: events.DescendantFocus) -> None:
        early, self._early_keys = self._early_keys or [], None
        for key in early:  # to the app, as the terminal sent them: on to the focused widget
            self.app.post_message(key)


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
    """A modal screen that may submit trio work (cancelled when it closes)."""
