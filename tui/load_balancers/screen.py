"""The org's load balancers and, below them, the pool of the highlighted one, live (keys as in hatop).

The list is polled (`GET /v1/load-balancers`, every 2 s; faster while a change is being applied)
and drawn in place. Pool keys act on the pool's highlighted backend whatever table has the focus:

* `d` drain / undrain (a drain first says how many healthy backends stay in rotation, and the
  last healthy one needs a second yes); `+` `-` weight ±1, `ctrl+↑` `ctrl+↓` (`]` `[`) ±10,
  within 1-256; `r` back to the weight the backend had when the screen opened;
* `a` re-apply, `n` new, `e` edit the highlighted load balancer; Delete removes the highlighted
  backend (pool focused) or load balancer (load balancers focused), once confirmed;
* Enter: the same actions in a menu, for the row under the cursor.

A weight change shows at once (in italics until the control plane has it); quick presses are
sent one after the other, the last one winning. A poll answer that raced a change is dropped, so
a stale list never flashes the old value back. The pool keys act on what is shown: each change is
sent over the revision shown (`if_revision`; a drain or removal, over the one its confirmation
showed), so when the load balancer changed meanwhile nothing is done, and the screen says so and
shows it as it is now.

The pool's figures are the node's own (tables.py); a backend whose engine differs from its
definition (a weight set on HAProxy's socket behind the product's back) shows `≠` and the status
line says how, until `a` applies the definition again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, ClassVar

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.timer import Timer
from textual.widgets import DataTable, Static

from api_client import Server
from api_client import errors as api_errors
from contract.load_balancers import MAX_WEIGHT, MIN_WEIGHT, Backend, BackendPatch, LoadBalancer, LoadBalancerList
from tui.bridge import TaskHandle
from tui.load_balancers.form import LbFormDialog
from tui.load_balancers.menu import ActionMenu, MenuItem
from tui.load_balancers.tables import (
    LbTable,
    PoolRow,
    PoolTable,
    Traffic,
    backend_cells,
    backend_name,
    lb_cells,
    listen_port,
    one_line,
)
from tui.screen import FleetScreen
from tui.text import load_tcss, printable
from tui.widgets.dialogs import ConfirmDialog
from tui.widgets.filter_line import FilteredList, FilterLine, filter_rows
from tui.widgets.footer import FleetFooter
from tui.widgets.header import SafeHeader

# How often the list is polled; faster while a load balancer waits for its node to apply a change.
POLL_S = 2.0
POLL_PENDING_S = 0.5
SERVERS = "servers"
"""What holds the keys while the org's servers are read (`n` and `e` offer them in the form)."""

LB_ACTIONS = [
    MenuItem("apply", "Re-apply", "a"),
    MenuItem("edit", "Edit", "e"),
    MenuItem("new", "New load balancer", "n"),
    MenuItem("remove_lb", "Delete this load balancer", "Del"),
]


def backend_actions(backend: Backend) -> list[MenuItem]:
    return [
        MenuItem("drain", "Undrain: back into rotation" if backend.drained else "Drain", "d"),
        MenuItem("weight(1)", "Weight +1", "+"),
        MenuItem("weight(-1)", "Weight -1", "-"),
        MenuItem("weight(10)", "Weight +10", "ctrl+↑ ]"),
        MenuItem("weight(-10)", "Weight -10", "ctrl+↓ ["),
        MenuItem("restore", "Restore the initial weight", "r"),
        MenuItem("remove_backend", "Remove from the pool", "Del"),
    ]


class LoadBalancersScreen(FilteredList, FleetScreen):
    """Load balancers, their pools, live; hatop's keys."""

    HELP_TITLE = "Load balancers"

    DEFAULT_CSS = load_tcss(__file__)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Servers", show=False),
        Binding("d", "drain", "Drain"),
        Binding("plus", "weight(1)", "Weight +1", key_display="+"),
        Binding("minus", "weight(-1)", "Weight -1", key_display="-", show=False),
        Binding("ctrl+up,right_square_bracket", "weight(10)", "Weight +10", show=False),
        Binding("ctrl+down,left_square_bracket", "weight(-10)", "Weight -10", show=False),
        Binding("r", "restore", "Restore the initial weight", show=False),
        Binding("a", "apply", "Re-apply", show=False),
        Binding("n", "new", "New"),
        Binding("e", "edit", "Edit"),
        Binding("delete", "remove", "Remove", key_display="Del"),
        Binding("slash", "filter", "Filter the load balancers", key_display="/", show=False),
    ]
    HELP_KEYS: ClassVar[list[tuple[str, str]]] = [
        ("Tab", "Between the load balancers and the pool"),
        ("Enter", "The actions of the row under the cursor"),
    ]

    AUTO_FOCUS = "#lb-table"

    def __init__(self) -> None:
        super().__init__()
        self.title = "Load balancers"
        self.lbs: dict[str, LoadBalancer] = {}
        self.traffic: dict[str, Traffic] = {}  # by backend id: its request rate and errors over time
        self.servers: dict[str, Server] = {}
        self.loaded = False
        self._initial_weights: dict[str, int] = {}
        self._wanted_weights: dict[str, int] = {}  # asked for, not yet in a listing
        self._sending: set[str] = set()  # backends with a weight change on its way
        self._resend: set[str] = set()  # ... and a newer one to send after it
        self._epoch = 0  # grows when a change starts or ends: older poll answers are dropped
        self._changing = 0
        self._list_task: TaskHandle | None = None
        self._poll_timer: Timer | None = None
        self._list_failing = False
        self._servers_asked = False
        self._summary = ""

    def compose(self) -> ComposeResult:
        yield SafeHeader()
        yield Static("Loading the load balancers…", id="lb-summary", markup=False)
        yield LbTable(id="lb-table", cursor_type="row", zebra_stripes=True)
        yield FilterLine(id="lb-filter")
        yield Static("", id="lb-pool-bar", markup=False)
        yield PoolTable(id="lb-pool", cursor_type="row", zebra_stripes=True)
        yield Static("", id="lb-status", markup=False)
        yield FleetFooter()

    def on_mount(self) -> None:
        if self.dismissed:
            return
        self._load_servers()
        self.poll()

    # --- data ---------------------------------------------------------------------------------

    def _load_servers(self) -> None:
        self._servers_asked = True
        self.hold_keys(SERVERS)  # `n` typed meanwhile: its form offers them, once they are in
        self.bridge.run(self, self.client.servers.list, on_done=self._show_servers, on_error=self._no_servers)

    def _show_servers(self, servers: list[Server]) -> None:
        self.servers = {server.id: server for server in servers}
        self._draw()
        self.release_keys(SERVERS)

    def _no_servers(self, exc: BaseException) -> None:
        self.show_error(exc)
        self.release_keys(SERVERS)

    def poll(self) -> None:
        """Ask for the list now (unless an answer is on its way)."""
        if self._poll_timer is not None:
            self._poll_timer.stop()
            self._poll_timer = None
        if self._list_task is not None and not self._list_task.finished:
            return
        self._list_task = self.bridge.run(
            self,
            self.client.load_balancers.list,
            on_done=partial(self._listed, self._epoch),
            on_error=self._list_failed,
        )

    def _listed(self, epoch: int, listing: LoadBalancerList) -> None:
        self._list_task = None
        if epoch != self._epoch or self._changing:
            self._schedule(POLL_PENDING_S)  # it raced a change: ask again, the answer is stale
            return
        self._list_failing = False
        self.loaded = True
        self.lbs = {lb.id: lb for lb in sorted(listing.load_balancers, key=lambda lb: lb.name)}
        self._sample_traffic()
        for lb in self.lbs.values():
            for backend in lb.backends:
                self._initial_weights.setdefault(backend.id, backend.weight)
                if self._wanted_weights.get(backend.id) == backend.weight and backend.id not in self._sending:
                    del self._wanted_weights[backend.id]
        if not self._servers_asked and self._unknown_servers():
            self._load_servers()
        self._servers_asked = False
        self._draw(listing)
        pending = any(lb.state == "pending_apply" for lb in self.lbs.values())
        self._schedule(POLL_PENDING_S if pending else POLL_S)

    def _sample_traffic(self) -> None:
        """A sample per backend and report of its node; the backends gone take theirs with them."""
        backends = {backend.id: backend for lb in self.lbs.values() for backend in lb.backends}
        self.traffic = {key: self.traffic.get(key) or Traffic() for key in backends}
        for key, backend in backends.items():
            self.traffic[key].add(backend)

    def _unknown_servers(self) -> bool:
        ids = {lb.node_server_id for lb in self.lbs.values()}
        ids.update(b.server_id for lb in self.lbs.values() for b in lb.backends)
        return bool(ids - self.servers.keys())

    def _list_failed(self, exc: BaseException) -> None:
        self._list_task = None
        if not self._list_failing:  # once, not every two seconds
            self._list_failing = True
            self.show_error(exc)
        self._update_summary()
        self._schedule(POLL_S)

    def _schedule(self, seconds: float) -> None:
        if self._poll_timer is not None:
            self._poll_timer.stop()
        self._poll_timer = self.set_timer(seconds, self.poll)

    def _server_name(self, server_id: str) -> str:
        server = self.servers.get(server_id)
        return server.name if server is not None else server_id[:8]

    def _backend_name(self, backend: Backend) -> str:
        return backend_name(backend, self._server_name)

    # --- what is highlighted ------------------------------------------------------------------

    @property
    def highlighted_lb(self) -> LoadBalancer | None:
        key = self.query_one(LbTable).cursor_key
        return self.lbs.get(key) if key is not None else None

    @property
    def highlighted_backend(self) -> Backend | None:
        lb = self.highlighted_lb
        key = self.query_one(PoolTable).cursor_key
        if lb is None or key is None:
            return None
        return next((b for b in lb.backends if b.id == key), None)

    def weight_of(self, backend: Backend) -> int:
        """The weight shown: the one asked for while it travels, else the control plane's."""
        return self._wanted_weights.get(backend.id, backend.weight)

    # --- drawing ------------------------------------------------------------------------------

    def _draw(self, listing: LoadBalancerList | None = None) -> None:
        if not self.loaded:
            return
        table = self.query_one(LbTable)
        rows = {lb.id: lb_cells(lb, self._server_name) for lb in self.lbs.values()}
        table.set_rows(filter_rows(rows, self.filter_pattern), self._room(table))
        self._draw_pool()
        self._update_summary(listing)

    def _draw_pool(self) -> None:
        lb = self.highlighted_lb
        pool = self.query_one(PoolTable)
        backends = lb.backends if lb is not None else []
        rows = {
            b.id: backend_cells(PoolRow(b, self._backend_name(b), self.weight_of(b), traffic=self.traffic.get(b.id)))
            for b in backends
        }
        pool.set_rows(rows, self._room(pool))
        self._update_pool_bar(lb)
        self._update_status(lb)

    def _room(self, table: DataTable[Any]) -> int:
        return (table.size.width or self.size.width) - 1  # the vertical scrollbar

    def _update_summary(self, listing: LoadBalancerList | None = None) -> None:
        bar = self.query_one("#lb-summary", Static)
        if not self.loaded:
            bar.update("Could not load the load balancers · retrying" if self._list_failing else "Loading…")
            return
        if listing is not None:
            s = listing.summary
            self._summary = (
                f"{s.total} load balancer{'' if s.total == 1 else 's'} · {s.applied}/{s.total} applied · "
                f"{s.healthy_backends}/{s.total_backends} backends healthy"
            )
        bar.update(self._summary + (" · connection lost, retrying" if self._list_failing else ""))

    def _update_pool_bar(self, lb: LoadBalancer | None) -> None:
        bar = self.query_one("#lb-pool-bar", Static)
        if lb is None:
            bar.update("No load balancer yet · n: create one" if not self.lbs else "")
            return
        check = lb.health_check
        healthy = sum(b.health == "healthy" for b in lb.backends)
        port = listen_port(lb)
        mapped = f" (its {lb.port}, mapped)" if port != lb.port else ""
        bar.update(
            printable(
                f"Pool of {lb.name} · port {port}{mapped} · {healthy}/{len(lb.backends)} healthy"
                f" · {lb.algorithm.replace('_', ' ')} · check {check.path} every {check.interval_s}s"
            )
        )

    def _update_status(self, lb: LoadBalancer | None) -> None:
        """The keys; or what is wrong: the node's error when degraded, a line on drift (both, each
        on its line, when both: the table's state column cuts the error)."""
        line = self.query_one("#lb-status", Static)
        problems = []
        if lb is not None and lb.state == "degraded":
            problems.append(f"{lb.name} degraded: {one_line(lb.state_error or 'no detail from the node')}")
        drifted = [b for b in lb.backends if b.runtime is not None and b.runtime.drift] if lb is not None else []
        if drifted:
            first = drifted[0]
            more = f" (+{len(drifted) - 1})" if len(drifted) > 1 else ""
            drift = one_line(first.runtime.drift or "") if first.runtime is not None else ""
            problems.append(printable(f"≠ drift {self._backend_name(first)}: {drift}{more} · a restores it"))
        line.set_class(bool(problems), "-error")
        if problems:
            line.update("\n".join(problems))
        elif lb is not None and not lb.backends:
            line.update("An empty pool: Enter on the load balancer, or n, to add backends")
        else:
            line.update("d drain · +/- weight · ]/[ ±10 · r restore · Enter: actions · F1: keys")

    def on_resize(self, _event: events.Resize) -> None:
        self._draw()

    def on_filter_line_pattern_changed(self, event: FilterLine.PatternChanged) -> None:
        event.stop()
        self._draw()

    def on_filter_line_closed(self, event: FilterLine.Closed) -> None:
        event.stop()
        self.query_one(LbTable).focus()

    @on(DataTable.RowHighlighted, "#lb-table")
    def _lb_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._draw_pool()

    # --- changes ------------------------------------------------------------------------------

    def _change(
        self,
        call: Callable[..., Awaitable[Any]],
        *args: Any,
        on_done: Callable[[Any], object] | None = None,
        on_error: Callable[[BaseException], object] | None = None,
    ) -> None:
        """Send one change; the list is asked for again once it is done (or refused)."""
        self._epoch += 1
        self._changing += 1

        def ended() -> None:
            self._epoch += 1
            self._changing -= 1
            self.poll()

        def done(result: Any) -> None:
            ended()
            if on_done is not None:
                on_done(result)

        def failed(exc: BaseException) -> None:
            ended()
            (on_error or self.show_error)(exc)

        self.bridge.run(self, call, *args, on_done=done, on_error=failed)

    def _change_over(
        self,
        lb_id: str,
        call: Callable[..., Awaitable[Any]],
        *args: Any,
        seen: LoadBalancer | None = None,
        on_done: Callable[[Any], object] | None = None,
        on_error: Callable[[BaseException], object] | None = None,
    ) -> None:
        """`_change` of a load balancer as the screen shows it (or showed it, `seen`, when a
        confirmation was asked): sent over that revision (`if_revision`), so a key never acts on a
        stale row. Refused as the load balancer changed meanwhile, the screen says so and shows
        it anew. `on_error` undoes what the screen showed in advance; the error is said here."""
        lb = seen or self.lbs.get(lb_id)
        if lb is None:
            return
        revision = lb.revision

        def done(result: Any) -> None:
            shown = self.lbs.get(lb_id)
            if shown is not None and shown.revision == revision:  # this change made the next one
                self.lbs[lb_id] = shown.model_copy(update={"revision": revision + 1})
            if on_done is not None:
                on_done(result)

        def failed(exc: BaseException) -> None:
            if on_error is not None:
                on_error(exc)
            if isinstance(exc, api_errors.Conflict) and "revision" in exc.details:
                self.notify(
                    printable(
                        f"{lb.name} was changed meanwhile (revision {revision}, now {exc.details['revision']}): "
                        "nothing was done. The pool shows it as it is now: look, then press again."
                    ),
                    severity="warning",
                    timeout=8,
                )
            else:
                self.show_error(exc)

        self._change(partial(call, if_revision=revision), *args, on_done=done, on_error=failed)

    def _target(self) -> tuple[LoadBalancer, Backend] | None:
        lb, backend = self.highlighted_lb, self.highlighted_backend
        if lb is None or backend is None:
            self.notify("No backend to act on: pick one in the pool.", severity="warning")
            return None
        return lb, backend

    def action_weight(self, delta: int) -> None:
        if (target := self._target()) is None:
            return
        lb, backend = target
        current = self.weight_of(backend)
        wanted = max(MIN_WEIGHT, min(MAX_WEIGHT, current + delta))
        if wanted == current:
            self.notify(f"The weight is already {current} (it goes from {MIN_WEIGHT} to {MAX_WEIGHT}).")
            return
        self._set_weight(lb, backend, wanted)

    def action_restore(self) -> None:
        if (target := self._target()) is None:
            return
        lb, backend = target
        initial = self._initial_weights.get(backend.id, backend.weight)
        if initial == self.weight_of(backend):
            self.notify(f"The weight is already {initial}, as when this screen opened.")
            return
        self._set_weight(lb, backend, initial)

    def _set_weight(self, lb: LoadBalancer, backend: Backend, weight: int) -> None:
        self._wanted_weights[backend.id] = weight
        self._draw_pool()
        self._send_weight(lb.id, backend.id)

    def _send_weight(self, lb_id: str, backend_id: str) -> None:
        """One weight change at a time per load balancer (each is made over the revision the one
        before made); presses meanwhile are sent after it, merged per backend."""
        if backend_id in self._sending or self._sending_to(lb_id):
            self._resend.add(backend_id)
            return
        weight = self._wanted_weights.get(backend_id)
        if weight is None:
            return
        self._sending.add(backend_id)
        self._change_over(
            lb_id,
            self.client.load_balancers.update_backend,
            lb_id,
            backend_id,
            BackendPatch(weight=weight),
            on_done=partial(self._weight_sent, lb_id),
            on_error=partial(self._weight_failed, lb_id, backend_id),
        )

    def _pool_of(self, lb_id: str) -> list[str]:
        lb = self.lbs.get(lb_id)
        return [backend.id for backend in lb.backends] if lb is not None else []

    def _sending_to(self, lb_id: str) -> bool:
        return any(backend_id in self._sending for backend_id in self._pool_of(lb_id))

    def _weight_sent(self, lb_id: str, backend: Backend) -> None:
        self._sending.discard(backend.id)
        self._replace_backend(lb_id, backend)
        if backend.id not in self._resend and self._wanted_weights.get(backend.id) == backend.weight:
            del self._wanted_weights[backend.id]
        waiting = [backend_id for backend_id in self._pool_of(lb_id) if backend_id in self._resend]
        if waiting:
            self._resend.discard(waiting[0])
            self._send_weight(lb_id, waiting[0])
        self._draw_pool()

    def _weight_failed(self, lb_id: str, backend_id: str, _exc: BaseException) -> None:
        """Refused: the weights of this load balancer asked for and not sent yet are dropped too
        (a refusal as it changed meanwhile holds for them as well)."""
        for dropped in {backend_id, *self._pool_of(lb_id)}:
            self._sending.discard(dropped)
            self._resend.discard(dropped)
            self._wanted_weights.pop(dropped, None)
        self._draw_pool()

    def _replace_backend(self, lb_id: str, backend: Backend) -> None:
        lb = self.lbs.get(lb_id)
        if lb is not None:
            backends = [backend if b.id == backend.id else b for b in lb.backends]
            self.lbs[lb_id] = lb.model_copy(update={"backends": backends})

    def _backend_changed(self, lb_id: str, backend: Backend) -> None:
        self._replace_backend(lb_id, backend)
        self._draw_pool()

    # --- drain --------------------------------------------------------------------------------

    def action_drain(self) -> None:
        if (target := self._target()) is None:
            return
        lb, backend = target
        name = self._backend_name(backend)
        if backend.drained:
            self._set_drained(lb, backend, False)
            self.notify(f"Undraining {name}: it goes back into rotation.")
            return
        staying = [
            self._backend_name(b) for b in lb.backends if b.id != backend.id and b.health == "healthy" and not b.drained
        ]
        last_healthy = not staying and backend.health == "healthy"

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            if last_healthy:
                self.app.push_screen(
                    ConfirmDialog(
                        f"Really drain the last healthy backend of {lb.name}?",
                        "No healthy backend would be left to take new requests: the endpoint stops answering.",
                        confirm_label="Drain anyway",
                    ),
                    partial(self._drain_if, lb, backend),
                )
            else:
                self._set_drained(lb, backend, True)

        self.app.push_screen(
            ConfirmDialog(
                f"Drain {name} from {lb.name}?", drain_preview(name, backend, staying), confirm_label="Drain"
            ),
            answered,
        )

    def _drain_if(self, lb: LoadBalancer, backend: Backend, yes: bool | None) -> None:
        if yes:
            self._set_drained(lb, backend, True)

    def _set_drained(self, lb: LoadBalancer, backend: Backend, drained: bool) -> None:
        self._change_over(
            lb.id,
            self.client.load_balancers.update_backend,
            lb.id,
            backend.id,
            BackendPatch(drained=drained),
            seen=lb,
            on_done=partial(self._backend_changed, lb.id),
        )

    # --- the load balancer itself -------------------------------------------------------------

    def _picked_lb(self) -> LoadBalancer | None:
        lb = self.highlighted_lb
        if lb is None:
            self.notify("No load balancer yet: n creates one.", severity="warning")
        return lb

    def action_apply(self) -> None:
        if (lb := self._picked_lb()) is None:
            return
        self._change(
            self.client.load_balancers.apply,
            lb.id,
            on_done=lambda _job_id: self.notify(printable(f"Applying {lb.name} again on its node…")),
        )

    def action_new(self) -> None:
        self.app.push_screen(LbFormDialog(list(self.servers.values())), self._saved)

    def action_edit(self) -> None:
        if (lb := self._picked_lb()) is None:
            return
        self.app.push_screen(LbFormDialog(list(self.servers.values()), lb), self._saved)

    def _saved(self, lb: LoadBalancer | None) -> None:
        if lb is None:
            return
        self.lbs[lb.id] = lb
        for backend in lb.backends:
            self._initial_weights.setdefault(backend.id, backend.weight)
        self._draw()
        table = self.query_one(LbTable)
        if lb.id in self.lbs:
            table.move_cursor(row=table.get_row_index(lb.id), animate=False)
        self._epoch += 1  # what the list said before the save is stale
        self.poll()

    def action_remove(self) -> None:
        """Delete: the backend when the pool has the focus, else the load balancer."""
        if isinstance(self.focused, PoolTable):
            self.remove_backend()
        else:
            self.remove_lb()

    def remove_backend(self) -> None:
        if (target := self._target()) is None:
            return
        lb, backend = target
        name = self._backend_name(backend)

        def answered(yes: bool | None) -> None:
            if yes:
                self._change_over(lb.id, self.client.load_balancers.remove_backend, lb.id, backend.id, seen=lb)

        self.app.push_screen(
            ConfirmDialog(
                f"Remove {name} from {lb.name}?",
                f"{backend.address}:{backend.port} leaves the pool (the server itself is untouched).",
                confirm_label="Remove",
            ),
            answered,
        )

    def remove_lb(self) -> None:
        if (lb := self._picked_lb()) is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._change(self.client.load_balancers.delete, lb.id)

        self.app.push_screen(
            ConfirmDialog(
                f"Delete the load balancer {lb.name}?",
                f"Port {lb.port} on {self._server_name(lb.node_server_id)} stops serving at once. "
                "The backend servers are untouched.",
                confirm_label="Delete",
            ),
            answered,
        )

    # --- the action menu (Enter) --------------------------------------------------------------

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if isinstance(event.data_table, PoolTable):
            backend = self.highlighted_backend
            if backend is not None:
                title = f"{self._backend_name(backend)} ({backend.address}:{backend.port})"
                self.app.push_screen(ActionMenu(title, backend_actions(backend)), self._menu_picked)
        elif (lb := self.highlighted_lb) is not None:
            self.app.push_screen(ActionMenu(lb.name, LB_ACTIONS), self._menu_picked)

    def _menu_picked(self, action: str | None) -> None:
        if action == "remove_backend":
            self.remove_backend()
        elif action == "remove_lb":
            self.remove_lb()
        elif action is not None:
            self.call_later(self.run_action, action)

    def action_back(self) -> None:
        self.dismiss()


def drain_preview(name: str, backend: Backend, staying: list[str]) -> str:
    """What a drain leaves in rotation, in words."""
    keeps = "Its open connections finish; it gets no new ones. "
    if not staying:
        if backend.health == "healthy":
            return keeps + f"{name} is the last healthy backend: no healthy backend stays in rotation."
        return keeps + "No healthy backend stays in rotation (none is healthy now)."
    count = len(staying)
    names = ", ".join(staying[:4]) + (f" and {count - 4} more" if count > 4 else "")
    stay = "healthy backend stays" if count == 1 else "healthy backends stay"
    return keeps + f"{count} {stay} in rotation: {names}."
