"""Backend health of the load balancers this node serves, and the `lb.watch` / `lb.health` RPCs.

HAProxy checks its backends itself (``check``, ``inter``, ``rise``, ``fall``, ``option
httpchk``): the monitor reads its stats socket (``show stat``) every 2 s at most, for the check
status and the real traffic figures. nginx has no active checks: the agent's prober sends
``GET <path>`` to each backend every ``interval_s`` and applies the thresholds (healthy after
``healthy_threshold`` successes in a row, unhealthy after ``unhealthy_threshold`` failures);
its stats are null. A drained backend reads ``draining`` whatever its checks say.

The monitor runs in the agent's nursery; each load balancer's checker is a child task of it,
restarted when an apply or a removal changes what the node serves.
"""

from __future__ import annotations

import datetime
import itertools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from agent.link.call import Call, Handler
from contract.job_kinds.lb import BackendHealth as BackendHealthName
from contract.job_kinds.lb import BackendReport, BackendStats, LbApply, LbBackend, LbHealthReport
from contract.link.protocol import RpcError

if TYPE_CHECKING:
    from agent.load_balancers.node import LbNode

log = logging.getLogger("fleetdeck.agent.lb")

STATS_EVERY_S = 2.0  # HAProxy's stats are read (and reported when they change) at most this often
PROBE_TIMEOUT_S = 5.0


@dataclass
class BackendHealth:
    healthy: bool = True  # a backend starts in rotation, as HAProxy's servers do
    successes: int = 0  # in a row
    failures: int = 0
    last_check_at: datetime.datetime | None = None
    stats: BackendStats | None = None

    def record(self, ok: bool, spec: LbApply, at: datetime.datetime) -> bool:
        """One check's result under the thresholds; whether the health changed (the first check
        counts as a change: until then the health was only assumed)."""
        first, self.last_check_at = self.last_check_at is None, at
        check = spec.health_check
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if not self.healthy and self.successes >= check.healthy_threshold:
                self.healthy = True
                return True
        else:
            self.failures, self.successes = self.failures + 1, 0
            if self.healthy and self.failures >= check.unhealthy_threshold:
                self.healthy = False
                return True
        return first


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
        assert hasattr(engine, "show_stat")
        proxy = f"fleetdeck_lb_{watched.spec.id}"
        while True:
            try:
                rows = await engine.show_stat()
            except OSError as exc:
                log.debug("show stat: %s", exc)
                rows = []
            if self._read_stats(watched, [r for r in rows if r.get("pxname") == proxy]):
                self._publish(watched)
            await trio.sleep(min(STATS_EVERY_S, watched.spec.health_check.interval_s))

    def _read_stats(self, watched: _Watched, rows: list[dict[str, str]]) -> bool:
        changed = False
        at = _now()
        for row in rows:
            record = watched.backends.get(row.get("svname", ""))
            if record is None:
                continue
            healthy = server_healthy(row.get("status", ""))
            stats = server_stats(row)
            if healthy != record.healthy or stats != record.stats:
                changed = True
            record.healthy, record.stats = healthy, stats
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
            backends.append(
                BackendReport(id=backend.id, health=health, last_check_at=record.last_check_at, stats=record.stats)
            )
        return LbHealthReport(id=lb_id, revision=watched.spec.revision, backends=backends)

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


def server_stats(row: dict[str, str]) -> BackendStats:
    def number(key: str) -> int:
        value = row.get(key) or "0"
        return int(value) if value.isdigit() else 0

    total = number("req_tot") if row.get("req_tot") else number("stot")
    return BackendStats(current_sessions=number("scur"), total_requests=total, request_rate=float(number("rate")))


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
