"""What every fleetdeck screen shares: access to the API client and the trio bridge."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, cast

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


class FleetScreen(FleetAccess, BridgedMixin, Screen[None]):
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


class FleetModal(FleetAccess, BridgedMixin, ModalScreen[T]):
    """A modal screen that may submit trio work (cancelled when it closes)."""
