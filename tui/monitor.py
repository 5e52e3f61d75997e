"""Whether the control plane answers, watched in one place: screens subscribe, none polls.

What tells: the presence stream (`GET /v1/servers/events`) breaks at once when the control
plane's process dies, but on a silent network it would only notice at its keep-alive, every 15 s.
So a cheap probe of `GET /v1/health` runs every `PROBE_INTERVAL_S`: a refused connection is a loss
at once, and so is `SILENCE_LIMIT_S` without an answer (a black hole), so a loss is seen within
`SILENCE_LIMIT_S` (under 5 s) whatever the cause, while a control plane slow to answer on a busy
machine is not taken for a lost one. Then the monitor
probes again after a full-jitter backoff (`contract.backoff`, so a fleet of TUIs does not come
back in lockstep) until the control plane answers, and says so: the screens refresh what they show.

The monitor also follows the presence stream for the whole app, so that the server list and the
files panels share one stream: `presence` publishes each change, `online(server_id)` answers from
what it heard (None: nothing heard, or the connection is lost, so nobody knows). The same stream
carries the agents' pulses: `pulses_of(server_id)` holds the last `PULSES_HELD` of each server
(for the server list's sparklines), and `pulse` says whose changed.

Its trio side runs as one task of the bridge; what it learns reaches Textual as Callback messages
on the app, where it is published with Textual signals (a screen subscribes on mount and is
dropped when it leaves).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

import trio
from textual import events
from textual.signal import Signal

from api_client import errors as api_errors
from contract.backoff import full_jitter
from contract.models import PresenceEvent, PulseEvent, PulseSample

if TYPE_CHECKING:
    from textual.app import App

    from api_client import Client
    from tui.bridge import TrioBridge

PROBE_INTERVAL_S = 1.5
SILENCE_LIMIT_S = 4.5  # since the last answer
RECONNECT_PROBE_TIMEOUT_S = 5.0
# Reconnect attempts wait full_jitter(attempt, RETRY_BASE_S, RETRY_CAP_S): at most 10 s apart.
RETRY_BASE_S = 0.5
RETRY_CAP_S = 10.0
PULSES_HELD = 60  # a server's pulses kept for its sparklines: as many as the control plane holds

Status = Literal["connected", "reconnecting"]


@dataclass(frozen=True)
class LinkState:
    """The connection as the header shows it; `retry_at` (monotonic) is the next attempt's time
    while reconnecting, None while an attempt is under way; `away` names what the control plane
    said it is missing ("database", "bus": it answers, but cannot serve), None when it did not answer."""

    status: Status
    retry_at: float | None = None
    away: str | None = None

    @property
    def connected(self) -> bool:
        return self.status == "connected"

    def describe(self) -> str:
        """`connected`, `lost · retry in 3 s`, `lost · reconnecting…`, `database away · retrying…`."""
        if self.connected:
            return "connected"
        lost = "lost" if self.away is None else f"{self.away} away"
        if self.retry_at is None:
            return f"{lost} · {'reconnecting' if self.away is None else 'retrying'}…"
        return f"{lost} · retry in {max(1, round(self.retry_at - time.monotonic()))} s"


def control_plane_name(base_url: str, *, local: bool) -> str:
    """What the header calls the control plane: `local` for the embedded one, else its host."""
    if local:
        return "local"
    return urlsplit(base_url).hostname or base_url


class ConnectionMonitor:
    """The app's one watcher of the control plane. Textual side: `state`, `name`, the signals
    `changed` (a `LinkState`) and `presence` (a `PresenceEvent`), and `online(server_id)`."""

    def __init__(self, app: App[None], client: Client, bridge: TrioBridge, name: str) -> None:
        self.app = app
        self.name = name
        self.state = LinkState("connected")
        self.live_presence = True  # False once the control plane refused the presence stream
        self.changed: Signal[LinkState] = Signal(app, "connection-changed")
        self.presence: Signal[PresenceEvent] = Signal(app, "presence")
        self.pulse: Signal[str] = Signal(app, "pulse")  # the id of a server with new pulses
        self._client = client
        self._bridge = bridge
        self._online: dict[str, bool] = {}
        self._pulses: dict[str, deque[PulseSample]] = {}
        self._presence_id: str | None = None  # where the next presence stream resumes
        self._away: str | None = None  # what the control plane last said it is missing (its 503)

    def start(self) -> None:
        self._bridge.run(self.app, self._watch, name="connection monitor")

    def online(self, server_id: str) -> bool | None:
        """Whether the agent of `server_id` is online, by the presence stream; None when unknown."""
        if not self.state.connected:
            return None
        return self._online.get(server_id)

    def pulses_of(self, server_id: str) -> list[PulseSample]:
        """The last pulses heard of `server_id`'s agent, oldest first (none while it is offline)."""
        return list(self._pulses.get(server_id, ()))

    def remember(self, server_id: str, online: bool) -> None:
        """What a listing said of an agent (the stream only says what changes)."""
        self._online[server_id] = online

    # --- Textual side: what the trio side hands over ------------------------------------------

    def _set_state(self, state: LinkState) -> None:
        self.state = state
        self.changed.publish(state)

    def _heard(self, event: PresenceEvent | PulseEvent) -> None:
        if isinstance(event, PulseEvent):
            self._heard_pulses(event)
            return
        self._online[event.server_id] = event.online
        if not event.online and event.server_id in self._pulses:
            del self._pulses[event.server_id]
            self.pulse.publish(event.server_id)
        self.presence.publish(event)

    def _heard_pulses(self, event: PulseEvent) -> None:
        """Keep the samples newer than those held: a stream that opens again sends what it holds."""
        held = self._pulses.setdefault(event.server_id, deque(maxlen=PULSES_HELD))
        newer = [sample for sample in event.samples if not held or sample.at > held[-1].at]
        held.extend(newer)
        if newer:
            self.pulse.publish(event.server_id)

    def _presence_refused(self) -> None:
        if not self.live_presence:
            return  # said once, not after every reconnect
        self.live_presence = False
        self.changed.publish(self.state)
        self.app.notify("Live agent status is not available on this control plane.", severity="warning")

    def _post(self, callback: Callable[..., None], *args: object) -> None:
        """From trio: run `callback(*args)` in Textual context, on the app's queue."""
        self.app.post_message(events.Callback(callback=lambda: callback(*args)))

    # --- trio side ----------------------------------------------------------------------------

    async def _watch(self) -> None:
        """Connected until a probe or the presence stream fails; then reconnect; forever."""
        while True:
            await self._until_lost()
            self._post(self._set_state, LinkState("reconnecting", time.monotonic(), self._away))
            await self._reconnect()
            self._post(self._set_state, LinkState("connected"))

    async def _until_lost(self) -> None:
        async with trio.open_nursery() as nursery:

            async def until_fails(watch: Callable[[], Awaitable[None]]) -> None:
                try:
                    await watch()
                except (api_errors.FleetdeckError, trio.TooSlowError) as exc:  # a proxy's 502 counts too
                    self._away = _away(exc)
                nursery.cancel_scope.cancel()

            nursery.start_soon(until_fails, self._follow_presence)
            nursery.start_soon(until_fails, self._keep_probing)

    async def _follow_presence(self) -> None:
        """The presence stream, resumed after a loss with Last-Event-ID: what changed meanwhile
        comes first (a restarted control plane, with other ids, sends what it holds)."""
        stream = self._client.servers.events(last_event_id=self._presence_id)
        try:
            async for event in stream:
                self._post(self._heard, event)
        except api_errors.ApiError:
            # Refused (no such stream here, no right): the probe alone watches the connection.
            self._post(self._presence_refused)
            await trio.sleep_forever()
        finally:
            self._presence_id = stream.last_event_id
        raise api_errors.TransportError("the presence stream ended")

    async def _keep_probing(self) -> None:
        answered = trio.current_time()
        while True:
            await trio.sleep(PROBE_INTERVAL_S)
            with trio.fail_at(answered + SILENCE_LIMIT_S):
                await self._client.health()
            answered = trio.current_time()

    async def _reconnect(self) -> None:
        attempt = 0
        while True:
            delay = full_jitter(attempt, base=RETRY_BASE_S, cap=RETRY_CAP_S)
            self._post(self._set_state, LinkState("reconnecting", time.monotonic() + delay, self._away))
            await trio.sleep(delay)
            self._post(self._set_state, LinkState("reconnecting", away=self._away))
            try:
                with trio.fail_after(RECONNECT_PROBE_TIMEOUT_S):
                    await self._client.health()
                self._away = None
                return
            except (api_errors.FleetdeckError, trio.TooSlowError) as exc:
                self._away = _away(exc)
                attempt += 1


def _away(exc: BaseException) -> str | None:
    """What a control plane that answered 503 `unavailable` said it is missing (None: another failure)."""
    if isinstance(exc, api_errors.Unavailable):
        part = exc.details.get("part")
        return part if part in ("database", "bus") else "service"
    return None
