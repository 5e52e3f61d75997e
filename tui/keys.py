"""Keys typed ahead reach what they were typed for, in order (issue 25, point 1).

Textual routes a key to the focused widget when the app reads it from its queue, but what the key
does (its binding's action: push a dialog, move the focus) runs later, once the key has bubbled
back up to the app. Keys that arrive together (a paste, tmux `send-keys`, a fast typist) were all
routed before the first one had acted: `p 7 5 5 Enter` sent `7 5 5 Enter` to the file panel, not
to the permissions dialog `p` opens; the password typed after Tab landed in the field Tab left.

`KeyQueue` routes one key at a time: the next key goes out only once the previous one has been
handled (a `KeyRouted` sent after it to the same widget has come back to the app, twice: messages
keep their order through each queue), once the callbacks its action scheduled have run (a
dialog's result, which opens the next dialog), and only to a screen that is ready for keys:
mounted (its `on_mount` has set the focus) and not holding them (`KeepsEarlyKeys.hold_keys`: while
it loads what its fields show, or while an action of it loads what it will open). The app's
priority bindings (ctrl+q) never wait, and an Esc first in line waits for a screen's hold at most
`ESCAPE_AFTER` seconds (a server that does not answer never keeps a user in a dialog).
Accelerators cannot leak into a field: a dialog's letter (`c` in the save-conflict dialog) has
acted, and the field it opens is focused, before the next key is routed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any
from weakref import WeakSet

from textual import events
from textual.message import Message

if TYPE_CHECKING:
    from textual.app import App
    from textual.message_pump import MessagePump
    from textual.screen import Screen
    from textual.timer import Timer

STUCK_AFTER = 2.0
"""Seconds after which a key whose `KeyRouted` never came back (its widget was removed with the
key still in its queue) no longer holds up the next ones."""


ESCAPE_AFTER = 3.0
"""Seconds an Esc first in line waits behind a screen that holds the keys (a listing, a search, a
save the server is slow to answer) before it goes to that screen anyway: the way out never waits
for the server. The keys typed after it keep waiting for the hold."""


ROUNDS = 2
"""How many times a `KeyRouted` goes to the key's widget and back: the second time behind what the
key made the widget post to itself (Enter in a field: `Input.Submitted`, which the dialog answers)."""


class KeyRouted(Message, bubble=True):
    """Follows a key to the widget it was routed to; back at the app, that key has been handled."""

    def __init__(self, target: MessagePump, rounds: int) -> None:
        super().__init__()
        self.target = target
        self.rounds = rounds


def holds_keys(screen: Screen[Any]) -> bool:
    """True while `screen` asked for the keys typed meanwhile to wait (see `KeepsEarlyKeys`)."""
    return bool(getattr(screen, "holding_keys", False))


class KeyQueue:
    """The app's keys, waiting for the previous key to be handled and the screen to be ready.

    `route` is how the app routes a key (Textual's own routing: priority bindings, then the
    focused widget or the screen).
    """

    def __init__(self, app: App[Any], route: Callable[[events.Key], Awaitable[None]]) -> None:
        self.app = app
        self._route = route
        self.waiting: deque[events.Key] = deque()
        self._in_flight: KeyRouted | None = None
        self._stuck_timer: Timer | None = None
        self._escape_timer: Timer | None = None
        self._mount_waits: dict[Screen[Any], asyncio.Task[None]] = {}
        self._mounted: WeakSet[Screen[Any]] = WeakSet()
        """The screens mounted, their `on_mount`'s focus set: ready for keys unless they hold them."""

    async def arrived(self, key: events.Key) -> None:
        """A key from the terminal: routed now, or once what came before it is done. The app's
        priority bindings (ctrl+q) act at once: quitting never waits for a screen to load."""
        if any(binding.priority for binding in self.app._bindings.key_to_bindings.get(key.key, ())):
            await self._route(key)
            return
        self.waiting.append(key)
        await self.pump()

    async def pump(self) -> None:
        """Route the keys waiting, in order, as far as the previous key and the screen allow."""
        while self.waiting and self._in_flight is None and self._screen_ready():
            await self._route_next()
        if self._escape_timer is None and self._escape_held():
            self._escape_timer = self.app.set_timer(ESCAPE_AFTER, self._escape_now)

    async def _route_next(self) -> None:
        key = self.waiting.popleft()
        if key.key == "escape" and self._escape_timer is not None:
            self._escape_timer.stop()  # it goes now: the next Esc held waits its own time
            self._escape_timer = None
        target = self.app.focused or self.app.screen
        await self._route(key)
        self._follow(target, ROUNDS)

    def _escape_held(self) -> bool:
        """Whether an Esc is next and only a screen's hold keeps it (not a key still in flight,
        not a screen still mounting)."""
        return (
            bool(self.waiting)
            and self.waiting[0].key == "escape"
            and self._in_flight is None
            and bool(self.app.screen_stack)
            and self.app.screen in self._mounted
            and holds_keys(self.app.screen)
        )

    async def _escape_now(self) -> None:
        """`ESCAPE_AFTER` seconds on: an Esc still held goes to the screen that holds it."""
        self._escape_timer = None
        if self._escape_held():
            await self._route_next()
        else:
            await self.pump()

    def _follow(self, target: MessagePump, rounds: int) -> None:
        """Send a `KeyRouted` after what `target` has in its queue (the key, at first)."""
        self._in_flight = sent = KeyRouted(target, rounds)
        target.post_message(sent)
        if self._stuck_timer is not None:
            self._stuck_timer.stop()
        self._stuck_timer = self.app.set_timer(STUCK_AFTER, partial(self._settled, sent))

    def routed(self, message: KeyRouted) -> None:
        """`message` came back: its key has been handled, once it has also gone behind what the key
        made its widget post. The next key then waits for the callbacks the key's action scheduled:
        a dialog's result reaches the screen that opened it through `call_next` on that screen (or
        on the app), and what it does there (open the next dialog: the job form after the kind
        picker) comes before the next key."""
        if message is not self._in_flight:
            return
        if message.rounds > 1 and message.target.is_running:
            self._follow(message.target, message.rounds - 1)
            return
        screen = self.app.screen_stack[-1] if self.app.screen_stack else None
        if screen is not None and screen.is_mounted and screen.is_running:
            screen.call_next(self.app.call_next, self._settled, message)
        else:
            self.app.call_next(self._settled, message)

    async def _settled(self, message: KeyRouted) -> None:
        if message is not self._in_flight:
            return  # the stuck timer let the keys go already
        self._in_flight = None
        if self._stuck_timer is not None:
            self._stuck_timer.stop()
            self._stuck_timer = None
        await self.pump()

    def _screen_ready(self) -> bool:
        if not self.app.screen_stack:
            return False  # the app is closing
        screen = self.app.screen
        if screen not in self._mounted:
            self._pump_once_mounted(screen)
            return False
        return not holds_keys(screen)

    def _pump_once_mounted(self, screen: Screen[Any]) -> None:
        """Pump again once `screen` is mounted, through the app's queue: after the `focus()` its
        `on_mount` asked for, which goes through that queue too (`is_mounted` alone turns true
        before that focus is set: a key then went to the field focused first)."""
        if screen in self._mount_waits:
            return

        async def wait() -> None:
            # Textual's own signal that mounting is over (what `push_screen`'s AwaitMount awaits).
            await screen._mounted_event.wait()
            del self._mount_waits[screen]
            self.app.call_later(self._mounted_now, screen)

        self._mount_waits[screen] = asyncio.create_task(wait())

    async def _mounted_now(self, screen: Screen[Any]) -> None:
        self._mounted.add(screen)
        await self.pump()
