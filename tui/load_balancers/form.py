"""`n` and `e`: a load balancer's definition in a form; saving it sends it to the control plane.

New: name, node (a full server of the org), engine, port (443 turns TLS on and asks for the
hostname of the certificate), algorithm, health check, and the backends picked among the org's
servers with their ports and weight. A backend is a (server, port) pair: several ports of one
server (`8080, 8081`) add one backend each. Edit: the same, the backends ticked being ADDED to the
pool, and the port of each backend in the pool editable (the pool table drains, reweights and
removes them); the engine and the node are shown locked, as the control plane refuses to change
them.

The request is sent from here, so what the control plane refuses is shown in the form, which
stays open with what was typed.

Edit starts from the definition as the control plane has it when the form opens (read again, not
the screen's list, which may be older), and saves only over that revision (`if_revision`): a
definition changed meanwhile is not overwritten; `LbConflictDialog` shows theirs beside mine and
offers to reload theirs, to send mine over theirs, or to go back to the form.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ValidationError
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Input, Label, Select, Static

from api_client import Server
from api_client import errors as api_errors
from contract.job_kinds.lb import LbHealthCheck
from contract.load_balancers import (
    ALGORITHM_NAMES,
    DEFAULT_BACKEND_PORT,
    ENGINE_NAMES,
    Backend,
    BackendCreate,
    BackendPatch,
    HealthCheckPatch,
    LoadBalancer,
    LoadBalancerCreate,
    LoadBalancerPatch,
)
from tui.load_balancers.conflict import Difference, LbConflictChoice, LbConflictDialog
from tui.screen import SUBMITTING
from tui.text import load_tcss, printable
from tui.widgets.dialogs import Dialog
from tui.widgets.select import FormSelect
from tui.widgets.toggles import Checkbox

M = TypeVar("M", bound=BaseModel)

ENGINES = [(name, engine) for engine, name in ENGINE_NAMES.items()]
PORTS = [("80 (HTTP)", 80), ("443 (HTTPS, a certificate from ACME)", 443)]
ALGORITHMS = [(name, algorithm) for algorithm, name in ALGORITHM_NAMES.items()]
PORTS_TYPED = r"[0-9, ]*"  # a backend's ports as they are typed: `8080, 8081`


class Invalid(ValueError):
    """What the user typed cannot be sent; the message says what to fix."""


@dataclass(frozen=True)
class Step:
    """One request of an edit's save (`call(*args, if_revision=...)`); `backend_id`: the backend
    of the pool it changes, if any."""

    call: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...]
    backend_id: str | None = None


class ChangedMeanwhile(Exception):
    """A step of the save was refused: the definition is no longer at the revision it was sent
    over. `current` is the definition now; `unsent`, the steps not saved."""

    def __init__(self, current: LoadBalancer, unsent: list[Step]) -> None:
        super().__init__(f"{current.name} was changed meanwhile (now revision {current.revision})")
        self.current = current
        self.unsent = unsent


class LbFormDialog(Dialog[LoadBalancer | None]):
    """Create (no `lb`) or edit `lb`; dismissed with what the control plane saved."""

    DEFAULT_CSS = load_tcss(__file__)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "save", "Save"),
    ]

    AUTO_FOCUS = None  # the name field, once the form is ready (`_ready`)

    def __init__(self, servers: Sequence[Server], lb: LoadBalancer | None = None) -> None:
        super().__init__()
        self.servers = sorted(servers, key=lambda s: s.name.casefold())
        self.lb = lb
        self.saving = False
        self.loaded = lb is None
        """False while an edit reads the definition from the control plane."""

    # --- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        lb = self.lb
        check = lb.health_check if lb is not None else LbHealthCheck()
        title = f"Edit the load balancer {lb.name}" if lb is not None else "New load balancer"
        full = [(printable(s.name), s.id) for s in self.servers if s.kind == "full"]
        with Vertical(id="lb-form-box", classes="dialog -wide -tall"):
            yield Static(printable(title), classes="dialog--title", markup=False)
            with VerticalScroll(id="lb-form-fields"):
                yield from _row(
                    "Name", Input(lb.name if lb else "", placeholder="web (a-z, 0-9, -)", id="lb-name", compact=True)
                )
                locked = lb is not None
                yield from _row(
                    "Node" + (" 🔒" if locked else ""),
                    FormSelect(
                        full,
                        value=lb.node_server_id if lb else Select.NULL,
                        id="lb-node",
                        disabled=locked,
                        prompt="pick a full server",
                        compact=True,
                    ),
                )
                yield from _row(
                    "Engine" + (" 🔒" if locked else ""),
                    FormSelect(ENGINES, value=lb.engine if lb else "nginx", allow_blank=False, id="lb-engine",
                               disabled=locked, compact=True),
                )  # fmt: skip
                yield from _row(
                    "Port",
                    FormSelect(PORTS, value=lb.port if lb else 80, allow_blank=False, id="lb-port", compact=True),
                )
                yield from _row(
                    "Hostname",
                    Input(
                        (lb.hostname or "") if lb else "",
                        placeholder="www.example.com (the certificate's name)",
                        id="lb-hostname",
                        disabled=not (lb and lb.tls),
                        compact=True,
                    ),
                )
                yield from _row(
                    "Algorithm",
                    FormSelect(
                        ALGORITHMS,
                        value=lb.algorithm if lb else "round_robin",
                        allow_blank=False,
                        id="lb-algo",
                        compact=True,
                    ),
                )
                yield from _row("Check path", Input(check.path, id="lb-check-path", compact=True))
                yield from _row(
                    "Every (s)", Input(str(check.interval_s), type="integer", id="lb-check-interval", compact=True)
                )
                if lb is not None and lb.backends:
                    yield Static("In the pool: the port of each backend", classes="lb-form--section")
                    for backend in lb.backends:
                        yield from self._pool_row(backend)
                section = (
                    "Backends: tick the servers; their ports (8080, 8081: one each), weight"
                    if lb is None
                    else "Add backends: tick the servers; their ports (8080, 8081: one each), weight"
                )
                yield Static(section, classes="lb-form--section")
                for server in self.servers:
                    yield from self._backend_row(server)
            yield Static("", id="status")
            yield Static("Tab: next field · Space: tick · ctrl+s: save · Esc: cancel", classes="dialog--hint")
            with Horizontal(classes="dialog--buttons"):
                yield Button("Save", variant="primary", id="lb-form-save", compact=True)
                yield Button("Cancel", id="lb-form-cancel", compact=True)

    def _backend_row(self, server: Server) -> ComposeResult:
        label = printable(f"{server.name} ({server.address or 'no address'})")
        with Horizontal(classes="lb-form--backend"):
            yield Checkbox(label, id=f"pick-{server.id}", compact=True)
            yield Input(str(DEFAULT_BACKEND_PORT), restrict=PORTS_TYPED, id=f"port-{server.id}", compact=True)
            yield Input("1", type="integer", id=f"weight-{server.id}", classes="-weight", compact=True)

    def _pool_row(self, backend: Backend) -> ComposeResult:
        with Horizontal(classes="lb-form--backend -pool"):
            yield Label(printable(self._backend_name(backend)), classes="lb-form--pool-name")
            yield Input(str(backend.port), type="integer", id=f"be-port-{backend.id}", compact=True)

    def _backend_name(self, backend: Backend) -> str:
        """`server:port`, as the pool names it."""
        server = next((s for s in self.servers if s.id == backend.server_id), None)
        return f"{server.name if server is not None else backend.server_id[:8]}:{backend.port}"

    def on_mount(self) -> None:
        if self.lb is None:
            self._ready()
            return
        self.hold_keys()  # what is typed meanwhile edits the definition as it is now, once it is in
        self.query_one("#lb-form-fields").disabled = True
        self.set_status(f"Reading {printable(self.lb.name)} from the control plane…")
        self.bridge.run(self, self.client.load_balancers.get, self.lb.id, on_done=self._read, on_error=self._unread)

    def _read(self, current: LoadBalancer) -> None:
        listed, self.lb = self.lb, current
        if listed is not None and current.revision == listed.revision:  # health may differ, not the definition
            self._ready()
            return
        self.call_later(self._refill)  # changed since the list was read: the form shows it as it is now

    async def _refill(self) -> None:
        await self.recompose()
        self._ready()

    def _unread(self, exc: BaseException) -> None:
        self.show_error(exc)
        self.release_keys()

    def _ready(self) -> None:
        """The fields show the definition: typing may start (keys typed meanwhile waited)."""
        self.loaded = True
        self.query_one("#lb-form-fields").disabled = False
        self.set_status("")
        self.query_one("#lb-name", Input).focus()
        self.release_keys()

    @on(Select.Changed, "#lb-port")
    def _port_changed(self, event: Select.Changed) -> None:
        self.query_one("#lb-hostname", Input).disabled = event.value != 443

    # --- saving -------------------------------------------------------------------------------

    @on(Button.Pressed, "#lb-form-save")
    def _save_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_save()

    @on(Button.Pressed, "#lb-form-cancel")
    def _cancel_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_cancel()

    @on(Input.Submitted)
    @on(FormSelect.Submitted)
    def _submitted(self, event: Input.Submitted | FormSelect.Submitted) -> None:
        event.stop()
        self.action_save()

    def action_save(self) -> None:
        if self.saving or not self.loaded:
            return
        try:
            if self.lb is None:
                self._send(self.client.load_balancers.create, self.creation())
            else:
                patch, moved, added = self.patch(self.lb), self.moved_backends(self.lb), self.picked_backends()
                if not patch.model_fields_set and not moved and not added:
                    self.notify("Nothing changed.")
                    self.finish(None)
                    return
                steps = self.edit_steps(self.lb.id, patch, moved, added)
                self._send(self._save_edit, self.lb.id, self.lb.revision, steps)
        except Invalid as exc:
            self.set_status(str(exc), error=True)

    def edit_steps(
        self, lb_id: str, patch: LoadBalancerPatch, moved: dict[str, BackendPatch], added: list[BackendCreate]
    ) -> list[Step]:
        """The changed fields, each backend's new port, then each added backend (each a mutation of
        its own: a port given up first may be taken by an added one)."""
        api = self.client.load_balancers
        steps = [Step(api.update, (lb_id, patch))] if patch.model_fields_set else []
        steps += [Step(api.update_backend, (lb_id, bid, port), backend_id=bid) for bid, port in moved.items()]
        steps += [Step(api.add_backend, (lb_id, backend)) for backend in added]
        return steps

    async def _save_edit(self, lb_id: str, revision: int, steps: list[Step]) -> LoadBalancer:
        """`steps`, the first over `revision` (each accepted one moves it on by one), then the
        result.

        Raises:
            ChangedMeanwhile: the load balancer was changed by someone else since `revision`;
                nothing of the step refused (and after it) was saved.
        """
        api = self.client.load_balancers
        for index, step in enumerate(steps):
            try:
                await step.call(*step.args, if_revision=revision + index)
            except api_errors.Conflict as exc:
                if "revision" not in exc.details:
                    raise  # a name or a port taken: the form says it
                raise ChangedMeanwhile(await api.get(lb_id), steps[index:]) from exc
        return await api.get(lb_id)

    def _send(self, call: Any, *args: Any) -> None:
        """Send the save; the keys typed meanwhile wait for its answer (`ctrl+s o` in one go: the
        `o` is the conflict dialog's, never a letter in the focused field)."""
        self.saving = True
        self.hold_keys(SUBMITTING)
        self.query_one("#lb-form-save", Button).disabled = True
        self.set_status("Saving…")
        self.bridge.run(self, call, *args, on_done=self.finish, on_error=self._refused)

    def _refused(self, exc: BaseException) -> None:
        self.saving = False
        self.query_one("#lb-form-save", Button).disabled = False
        if isinstance(exc, ChangedMeanwhile) and self.lb is not None:
            self.set_status(f"{printable(self.lb.name)} was changed meanwhile: nothing was saved over it.", error=True)
            dialog = LbConflictDialog(
                self.lb.name, self.lb.revision, exc.current.revision, self.differences(exc.current)
            )
            self.app.push_screen(dialog, lambda choice: self._resolve_conflict(exc, choice))
        else:
            self.show_error(exc)
        self.release_keys(SUBMITTING)  # for the conflict dialog, or the form that stays open

    def _resolve_conflict(self, conflict: ChangedMeanwhile, choice: LbConflictChoice | None) -> None:
        current = conflict.current
        if choice == "reload":
            self.lb = current  # what the form shows and saves over from now on: theirs
            self.loaded = False
            self.hold_keys()  # what is typed meanwhile edits theirs, once it is shown
            self.call_later(self._refill)
        elif choice == "overwrite":
            pool = {backend.id for backend in current.backends}
            unsent = [step for step in conflict.unsent if step.backend_id is None or step.backend_id in pool]
            self._send(self._save_edit, current.id, current.revision, unsent)

    # --- theirs beside mine ---------------------------------------------------------------------

    def differences(self, current: LoadBalancer) -> list[Difference]:
        """The fields whose value on the server is not the form's, as the form shows them."""
        theirs, yours = self._described(current), self._described_form()
        return [Difference(field, theirs[field], yours[field]) for field in theirs if theirs[field] != yours[field]]

    def _described(self, lb: LoadBalancer) -> dict[str, str]:
        return {
            "Name": lb.name,
            "Port": _endpoint(lb.port, lb.hostname if lb.tls else None),
            "Algorithm": ALGORITHM_NAMES[lb.algorithm],
            "Check path": lb.health_check.path,
            "Every (s)": str(lb.health_check.interval_s),
            "Pool": ", ".join(self._backend_name(backend) for backend in lb.backends) or "(empty)",
        }

    def _described_form(self) -> dict[str, str]:
        """What the form shows, as typed (it may not be valid)."""
        port = self._select("lb-port")
        algorithm = self._select("lb-algo")
        pool = []
        if self.lb is not None:
            for backend in self.lb.backends:
                typed = self._text(f"be-port-{backend.id}")
                pool.append(self._backend_name(backend.model_copy(update={"port": int(typed)})) if typed.isdigit()
                            else f"{self._backend_name(backend)} → {typed}")  # fmt: skip
        for server in self.servers:
            if self.query_one(f"#pick-{server.id}", Checkbox).value:
                pool += [f"{server.name}:{port}" for port in self._text(f"port-{server.id}").replace(",", " ").split()]
        return {
            "Name": self._text("lb-name"),
            "Port": _endpoint(port, self._text("lb-hostname") or None if port == 443 else None),
            "Algorithm": ALGORITHM_NAMES.get(algorithm, str(algorithm)),
            "Check path": self._text("lb-check-path"),
            "Every (s)": self._text("lb-check-interval"),
            "Pool": ", ".join(pool) or "(empty)",
        }

    # --- reading the fields -------------------------------------------------------------------

    def _text(self, widget_id: str) -> str:
        return self.query_one(f"#{widget_id}", Input).value.strip()

    def _number(self, widget_id: str, what: str) -> int:
        try:
            return int(self._text(widget_id))
        except ValueError:
            raise Invalid(f"{what}: a whole number, please.") from None

    def _select(self, widget_id: str) -> Any:
        value = self.query_one(f"#{widget_id}", Select).value
        return None if value is Select.NULL else value

    def _health_check(self) -> LbHealthCheck:
        return _checked(
            LbHealthCheck,
            path=self._text("lb-check-path") or "/",
            interval_s=self._number("lb-check-interval", "The check interval"),
        )

    def _port_and_hostname(self) -> dict[str, Any]:
        port = self._select("lb-port")
        hostname = self._text("lb-hostname") or None
        return {"port": port, "tls": port == 443, "hostname": hostname if port == 443 else None}

    def creation(self) -> LoadBalancerCreate:
        if self._select("lb-node") is None:
            raise Invalid("Pick the node: the full server that runs the load balancer.")
        return _checked(
            LoadBalancerCreate,
            name=self._text("lb-name"),
            node_server_id=self._select("lb-node"),
            engine=self._select("lb-engine"),
            algorithm=self._select("lb-algo"),
            health_check=self._health_check(),
            backends=self.picked_backends(),
            **self._port_and_hostname(),
        )

    def _ports(self, widget_id: str, what: str) -> list[int]:
        """`8080, 8081` (commas or spaces): each port once, in the order typed."""
        words = self._text(widget_id).replace(",", " ").split()
        if not words or not all(word.isdigit() for word in words):
            raise Invalid(f"{what}: one or more port numbers (8080, 8081), please.")
        return list(dict.fromkeys(int(word) for word in words))

    def picked_backends(self) -> list[BackendCreate]:
        """A backend per port of each ticked server."""
        return [
            _checked(
                BackendCreate,
                server_id=server.id,
                port=port,
                weight=self._number(f"weight-{server.id}", f"The weight of {server.name}"),
            )
            for server in self.servers
            if self.query_one(f"#pick-{server.id}", Checkbox).value
            for port in self._ports(f"port-{server.id}", f"The ports of {server.name}")
        ]

    def moved_backends(self, lb: LoadBalancer) -> dict[str, BackendPatch]:
        """The backends of the pool whose port was changed: their new port, by backend id."""
        moved = {}
        for backend in lb.backends:
            port = self._number(f"be-port-{backend.id}", f"The port of {self._backend_name(backend)}")
            if port != backend.port:
                moved[backend.id] = _checked(BackendPatch, port=port)
        return moved

    def patch(self, lb: LoadBalancer) -> LoadBalancerPatch:
        """Only what changed: an untouched field is not sent."""
        changes: dict[str, Any] = {}
        name, algorithm = self._text("lb-name"), self._select("lb-algo")
        if name != lb.name:
            changes["name"] = name
        if algorithm != lb.algorithm:
            changes["algorithm"] = algorithm
        endpoint = self._port_and_hostname()
        if (endpoint["port"], endpoint["hostname"]) != (lb.port, lb.hostname if lb.tls else None):
            changes.update(endpoint)
        check = self._health_check()
        check_changes = {
            field: getattr(check, field)
            for field in ("path", "interval_s")
            if getattr(check, field) != getattr(lb.health_check, field)
        }
        if check_changes:
            changes["health_check"] = _checked(HealthCheckPatch, **check_changes)
        return _checked(LoadBalancerPatch, **changes)


def _endpoint(port: int | None, hostname: str | None) -> str:
    return f"{port} ({hostname})" if hostname else str(port)


def _row(label: str, control: Any) -> ComposeResult:
    with Horizontal(classes="lb-form--row"):
        yield Label(label, classes="lb-form--label")
        yield control


def _checked(model: type[M], **values: Any) -> M:
    """`model(**values)`, its first complaint turned into a sentence for the status line."""
    try:
        return model(**values)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "the form"
        raise Invalid(f"{where}: {error['msg']}") from None
