"""Backend health of the load balancers this node serves, and the `lb.watch` / `lb.health` RPCs.

HAProxy checks its backends itself (``check``, ``inter``, ``rise``, ``fall``, ``option
httpchk``): the monitor reads its stats socket every 2 s at most: ``show stat`` for the status
(UP, DOWN, DRAIN, MAINT, NOLB), its last change, check failures, down count and the real traffic
figures, and ``show servers state`` for what an administrator set at runtime, which it compares
with the definition served (`BackendRuntime.drift`: a weight set on the socket behind the agent's
back). nginx has no active checks: the agent's prober sends ``GET <path>`` to each backend every
``interval_s`` and applies the thresholds (healthy after ``healthy_threshold`` successes in a
row, unhealthy after ``unhealthy_threshold`` failures); its stats are null, and its runtime
figures are the prober's own (no weight, no drift: nginx has no runtime state to ask). A drained
backend reads ``draining`` whatever its checks say.

The monitor runs in the agent's nursery; each load balancer's checker is a child task of it,
restarted when an apply or a removal changes what the node serves.
"""

from __future__ import annotations

import datetime
import itertools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import trio

from agent.link.call import Call, Handler
from agent.load_balancers.haproxy import Haproxy, ServerState, proxy_name
from contract.job_kinds.lb import BackendHealth as BackendHealthName
from contract.job_kinds.lb import (
    BackendReport,
    BackendRuntime,
    BackendStats,
    BackendStatus,
    LbApply,
    LbBackend,
    LbHealthReport,
)
from contract.link.protocol import RpcError

if TYPE_CHECKING:
    from agent.load_balancers.node import LbNode

log = logging.getLogger("fleetdeck.agent.lb")

STATS_EVERY_S = 2.0  # HAProxy's stats are read (and reported when they change) at most this often
PROBE_TIMEOUT_S = 5.0
# HAProxy gives the time since a server's last change in whole seconds: a change time read again
# within this of the one known is the same change (not a new report every poll).
CHANGED_AT_SLACK_S = 2.0


@dataclass
class BackendHealth:
    healthy: bool = True  # a backend starts in rotation, as HAProxy's servers do
    successes: int = 0  # in a row
    failures: int = 0
    last_check_at: datetime.datetime | None = None
    stats: BackendStats | None = None
    runtime: BackendRuntime | None = None  # HAProxy's; nginx's is made from the prober's counts below
    changed_at: datetime.datetime | None = None  # the prober's: when the health last changed
    check_failures: int = 0  # the prober's failed checks
    down_count: int = 0  # the prober's changes from healthy to unhealthy

    def record(self, ok: bool, spec: LbApply, at: datetime.datetime) -> bool:
        """One check's result under the thresholds; whether the health changed (the first check
        counts as a change: until then the health was only assumed)."""
        first, self.last_check_at = self.last_check_at is None, at
        if first:
            self.changed_at = at
        check = spec.health_check
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if not self.healthy and self.successes >= check.healthy_threshold:
                self.healthy, self.changed_at = True, at
                return True
        else:
            self.failures, self.successes = self.failures + 1, 0
            self.check_failures += 1
            if self.healthy and self.failures >= check.unhealthy_threshold:
                self.healthy, self.changed_at = False, at
                self.down_count += 1
                return True
        return first

    def probed_runtime(self, backend: LbBackend) -> BackendRuntime | None:
        """nginx: the prober's own figures (None before its first check, unless drained)."""
        if backend.drained:  # `down` in the file: no new requests
            return BackendRuntime(status="DRAIN", changed_at=self.changed_at)
        if self.last_check_at is None:
            return None
        return BackendRuntime(
            status="UP" if self.healthy else "DOWN",
            changed_at=self.changed_at,
            check_failures=self.check_failures,
            down_count=self.down_count,
        )


@dataclass
class _Watched:
    spec: LbApply
    scope: trio.CancelScope
    version: int  # of its report: from one counter of the monitor, so a new spec is always sent anew
    backends: dict[str, BackendHealth] = field(default_factory=dict)


class HealthMonitor:
    def __init__(self, node: LbNode) -> None:
        self.node = node
        self._watched: dict[str, _Watched] = {}
        self._nursery: trio.Nursery | None = None
        self._changed = trio.Event()
        self._versions = itertools.count(1)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self.refresh()
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    def refresh(self) -> None:
        """Follow what the node serves now: a checker per load balancer, restarted when its spec changed."""
        serving = {lb_id: s.spec for lb_id, s in self.node.served.items() if s.spec is not None}
        before: dict[str, dict[str, BackendHealth]] = {}
        for lb_id in list(self._watched):
            watched = self._watched[lb_id]
            if serving.get(lb_id) != watched.spec:
                watched.scope.cancel()
                before[lb_id] = watched.backends
                del self._watched[lb_id]
        for lb_id, spec in serving.items():
            if lb_id in self._watched:
                continue
            previous = before.get(lb_id, {})
            watched = _Watched(spec, trio.CancelScope(), next(self._versions))
            for backend in spec.backends:  # a backend keeps its health across applies
                watched.backends[backend.id] = previous.get(backend.id, BackendHealth())
            self._watched[lb_id] = watched
            if self._nursery is not None:
                checker = self._haproxy if spec.engine == "haproxy" else self._probe_nginx
                self._nursery.start_soon(self._guarded, checker, watched, name=f"lb health {lb_id}")
        self._publish(None)

    def _publish(self, watched: _Watched | None) -> None:
        if watched is not None:
            watched.version = next(self._versions)
        self._changed.set()
        self._changed = trio.Event()

    async def _guarded(self, checker: Any, watched: _Watched) -> None:
        with watched.scope:
            while True:
                try:
                    await checker(watched)
                except Exception:  # a checker never takes the agent down: logged, tried again
                    log.exception("health checks of %s failed", watched.spec.name)
                    await trio.sleep(watched.spec.health_check.interval_s)

    # --- nginx: the agent's prober ------------------------------------------------------------

    async def _probe_nginx(self, watched: _Watched) -> None:
        spec = watched.spec
        while True:
            async with trio.open_nursery() as nursery:
                for backend in spec.backends:
                    nursery.start_soon(self._probe_one, watched, backend)
            await trio.sleep(spec.health_check.interval_s)

    async def _probe_one(self, watched: _Watched, backend: LbBackend) -> None:
        ok = await probe(backend.address, backend.port, watched.spec.health_check.path)
        if watched.backends[backend.id].record(ok, watched.spec, _now()):
            log.info("%s: backend %s is %s", watched.spec.name, backend.id, "healthy" if ok else "unhealthy")
            self._publish(watched)

    # --- HAProxy: its stats socket --------------------------------------------------------------

    async def _haproxy(self, watched: _Watched) -> None:
        engine = self.node.engines["haproxy"]
        assert isinstance(engine, Haproxy)
        proxy = proxy_name(watched.spec.id)
        while True:
            try:
                rows = await engine.show_stat()
                states = await engine.show_servers_state(watched.spec.id)
            except OSError as exc:
                log.debug("show stat: %s", exc)
                rows, states = [], {}
            if self._read_stats(watched, [r for r in rows if r.get("pxname") == proxy], states):
                self._publish(watched)
            await trio.sleep(min(STATS_EVERY_S, watched.spec.health_check.interval_s))

    def _read_stats(self, watched: _Watched, rows: list[dict[str, str]], states: dict[str, ServerState]) -> bool:
        changed = False
        at = _now()
        backends = {backend.id: backend for backend in watched.spec.backends}
        for row in rows:
            name = row.get("svname", "")
            record = watched.backends.get(name)
            if record is None:
                continue
            healthy = server_healthy(row.get("status", ""))
            stats = server_stats(row)
            runtime = server_runtime(row, states.get(name), backends[name], at, record.runtime)
            if self.node.applying and record.runtime is not None:
                # Between a reload and its runtime settings the engine is not yet what is defined.
                runtime = runtime.model_copy(update={"drift": record.runtime.drift})
            if (healthy, stats, runtime) != (record.healthy, record.stats, record.runtime):
                changed = True
            record.healthy, record.stats, record.runtime = healthy, stats, runtime
            if row.get("check_status"):
                record.last_check_at = at
        return changed

    # --- reports ----------------------------------------------------------------------------

    def report(self, lb_id: str) -> LbHealthReport | None:
        watched = self._watched.get(lb_id)
        if watched is None:
            return None
        backends = []
        for backend in watched.spec.backends:
            record = watched.backends[backend.id]
            health: BackendHealthName = "draining" if backend.drained else "healthy" if record.healthy else "unhealthy"
            runtime = record.runtime if watched.spec.engine == "haproxy" else record.probed_runtime(backend)
            backends.append(
                BackendReport(
                    id=backend.id,
                    health=health,
                    last_check_at=record.last_check_at,
                    stats=record.stats,
                    runtime=runtime,
                )
            )
        listen_port = self.node.settings.listen_port(watched.spec.port)
        return LbHealthReport(id=lb_id, revision=watched.spec.revision, listen_port=listen_port, backends=backends)

    def reports(self) -> list[LbHealthReport]:
        return [r for r in map(self.report, sorted(self._watched)) if r is not None]

    # --- RPC ----------------------------------------------------------------------------------

    def handlers(self) -> dict[str, Handler]:
        return {"lb.watch": self.lb_watch, "lb.health": self.lb_health}

    async def lb_health(self, call: Call) -> dict[str, Any]:
        return {"reports": [r.model_dump(mode="json") for r in self.reports()]}

    async def lb_watch(self, call: Call) -> dict[str, Any]:
        """One report per load balancer, then one whenever one changes; until cancelled."""
        if not call.streaming:
            raise RpcError("validation_error", "lb.watch streams: call it with a window")
        sent: dict[str, int] = {}
        while True:
            changed = self._changed
            fresh = [w for lb_id, w in sorted(self._watched.items()) if sent.get(lb_id) != w.version]
            sent = {lb_id: w.version for lb_id, w in self._watched.items() if lb_id in sent or w in fresh}
            reports = [self.report(w.spec.id) for w in fresh]
            if reports:
                await call.send_items([r.model_dump(mode="json") for r in reports if r is not None])
            await changed.wait()


def server_healthy(status: str) -> bool:
    """HAProxy's server status: ``UP``, ``UP 1/3`` (going down), ``NOLB``/``DRAIN`` serve; ``DOWN``,
    ``DOWN 1/2`` (going up), ``MAINT`` do not; ``no check`` is up."""
    return status.startswith(("UP", "NOLB", "DRAIN", "no check"))


def _number(row: dict[str, str], key: str) -> int:
    value = row.get(key) or "0"
    return int(value) if value.isdigit() else 0


def server_stats(row: dict[str, str]) -> BackendStats:
    total = _number(row, "req_tot") if row.get("req_tot") else _number(row, "stot")
    return BackendStats(
        current_sessions=_number(row, "scur"),
        total_requests=total,
        request_rate=float(_number(row, "rate")),
        max_sessions=_number(row, "smax"),
        bytes_in=_number(row, "bin"),
        bytes_out=_number(row, "bout"),
        connection_errors=_number(row, "econ"),
        response_errors=_number(row, "eresp"),
    )


def server_status(status: str) -> tuple[BackendStatus, Literal["up", "down"] | None]:
    """HAProxy's status text as a state and where its checks are taking it: ``UP 1/3`` is UP going
    down, ``DOWN 1/2`` DOWN going up, ``MAINT (via b/s)`` MAINT, ``DRAIN (agent)`` DRAIN, ``no
    check`` UP."""
    word, _, rest = status.partition(" ")
    going: Literal["up", "down"] | None = None
    if "/" in rest.split(" ", 1)[0]:
        going = "up" if word == "DOWN" else "down"
    for state in ("UP", "DOWN", "DRAIN", "MAINT", "NOLB"):
        if word == state:
            return state, going
    return "UP", None  # "no check": in rotation, never checked


def server_runtime(
    row: dict[str, str],
    state: ServerState | None,
    backend: LbBackend,
    at: datetime.datetime,
    before: BackendRuntime | None,
) -> BackendRuntime:
    """A server's `show stat` row and `show servers state` as hatop shows them, its drift from
    `backend` (the definition served) said in words."""
    status, going = server_status(row.get("status", ""))
    changed_at = at - datetime.timedelta(seconds=_number(row, "lastchg"))
    known = before.changed_at if before is not None else None
    if known is not None and abs((changed_at - known).total_seconds()) <= CHANGED_AT_SLACK_S:
        changed_at = known
    return BackendRuntime(
        status=status,
        going=going,
        changed_at=changed_at,
        check_failures=_number(row, "chkfail"),
        down_count=_number(row, "chkdown"),
        weight=state.weight if state is not None else _number(row, "weight"),
        drift=state.drift(backend) if state is not None else None,
    )


async def probe(address: str, port: int, path: str) -> bool:
    """``GET path`` on the backend: a 2xx or 3xx answer within the timeout is healthy."""
    with trio.move_on_after(PROBE_TIMEOUT_S):
        try:
            stream = await trio.open_tcp_stream(address, port)
            async with stream:
                host = f"[{address}]" if ":" in address else address
                request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nUser-Agent: fleetdeck\r\n\r\n"
                await stream.send_all(request.encode())
                head = b""
                while b"\r\n" not in head and len(head) < 4096:
                    data = await stream.receive_some(4096)
                    if not data:
                        break
                    head += data
        except (OSError, trio.BrokenResourceError):
            return False
        status = head.split(b" ", 2)
        return len(status) > 1 and status[0].startswith(b"HTTP/") and status[1][:1] in (b"2", b"3")
    return False


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
