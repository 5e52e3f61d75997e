"""`LbNode`: the load balancers this node serves, their apply and removal, one at a time.

What the node applied is kept in `<lb root>/state.json` (0600): per load balancer the newest
revision it was asked to apply, its outcome, and the spec actually serving (the last good one), so
a stale revision is refused (exit 4) and the health monitor starts again after an agent restart.

An apply: render → validate (the engine's checker) → swap the file atomically → reload without
dropping connections → check the reload took; when it did not, the previous file is put back and
reloaded again. A TLS load balancer first needs its certificate: while it has none, its port 80
(the HTTP-01 answers) is applied alone, the certificate obtained, and only then the 443 listener
rendered with it.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any

import orjson
import trio

from agent.jobs.toolkit.output import JobError, Output
from agent.load_balancers.acme import (
    AcmeError,
    CertFiles,
    Http01Challenges,
    Http01Responder,
    current_certificate,
    ensure_certificate,
    keep_renewed,
)
from agent.load_balancers.engine import Engine, EngineMissing, RenderInput
from agent.load_balancers.haproxy import Haproxy
from agent.load_balancers.health import HealthMonitor
from agent.load_balancers.nginx import Nginx, restore
from agent.load_balancers.settings import LbSettings
from agent.sites import write_atomically
from contract.job_kinds.lb import LbApply, LbApplyOutcome, LbHealthReport, LbRemove

log = logging.getLogger("fleetdeck.agent.lb")

EXIT_DEGRADED = 3
EXIT_STALE = 4
CONFIG_MODE = 0o644  # a configuration names certificate paths, never holds a key


@dataclass
class Served:
    """One load balancer on this node: the newest revision asked for, its outcome, the spec serving."""

    revision: int
    state: str  # active | degraded
    error: str | None
    spec: LbApply | None  # the last good spec (None: nothing of it serves yet)

    def outcome(self, lb_id: str) -> LbApplyOutcome:
        return LbApplyOutcome(id=lb_id, revision=self.revision, state=self.state, error=self.error)  # type: ignore[arg-type]


class LbNode:
    def __init__(self, settings: LbSettings, state_dir: str) -> None:
        self.settings = settings
        self.root = settings.lb_root(state_dir)
        self.engines: dict[str, Engine] = {"nginx": Nginx(settings, self.root), "haproxy": Haproxy(settings, self.root)}
        self.acme = settings.acme(state_dir)
        self.challenges = Http01Challenges()
        self.acme_port: int | None = None  # the HTTP-01 responder, once `run` started it
        self.monitor = HealthMonitor(self)
        self._lock = trio.Lock()
        self._state_path = self.root / "state.json"
        self.served: dict[str, Served] = self._load()

    # --- the agent's service -------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The HTTP-01 responder, the health monitor and certificate renewal, until cancelled."""
        async with trio.open_nursery() as nursery:
            self.acme_port = await nursery.start(Http01Responder(self.challenges).run)
            await nursery.start(self.monitor.run)
            nursery.start_soon(keep_renewed, self.acme, self._tls_hostnames, self.challenges, self._renewed)
            task_status.started()

    def _tls_hostnames(self) -> list[str]:
        return [s.spec.hostname for s in self.served.values() if s.spec and s.spec.tls and s.spec.hostname]

    async def _renewed(self, cert: CertFiles) -> None:
        """A renewed certificate keeps its paths: a reload of the engines serving it picks it up."""
        engines = {s.spec.engine for s in self.served.values() if s.spec and s.spec.hostname == cert.hostname}
        async with self._lock:
            for engine in engines:
                error = await self.engines[engine].reload()
                if error:
                    log.warning("reload after renewing %s failed: %s", cert.hostname, error)

    async def stop_engines(self) -> None:
        """Stop the agent-run nginx and HAProxy (tests, the demo); the node's own are left alone."""
        for engine in self.engines.values():
            await engine.stop()

    # --- apply -----------------------------------------------------------------------------

    async def apply(self, spec: LbApply, out: Output) -> tuple[LbApplyOutcome, int]:
        async with self._lock:
            known = self.served.get(spec.id)
            if known is not None and known.revision > spec.revision:
                out.stderr(
                    f"this node already applied revision {known.revision} of {spec.name}:"
                    f" revision {spec.revision} is older, nothing changed"
                )
                return known.outcome(spec.id), EXIT_STALE
            error = await self._apply(spec, out)
            serving = known.spec if known is not None else None
            served = (
                Served(spec.revision, "degraded", error, serving)
                if error
                else Served(spec.revision, "active", None, spec)
            )
            self.served[spec.id] = served
            self._save()
        self.monitor.refresh()
        if error:
            out.stderr(f"{spec.name}: degraded: {error}")
            return served.outcome(spec.id), EXIT_DEGRADED
        out.stderr(f"{spec.name}: revision {spec.revision} serving on {spec.engine}")
        return served.outcome(spec.id), 0

    async def _apply(self, spec: LbApply, out: Output) -> str | None:
        """The error text of a failed apply (the previous configuration still serving), or None."""
        # Kept to the agent's account: the engines' folders below would make it with the umask's mode.
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        engine = self.engines[spec.engine]
        clash = self._port_clash(spec)
        if clash:
            return clash
        try:
            await engine.ensure_installed(out)
        except EngineMissing as exc:
            return str(exc)
        if not self.settings.agent_run:
            await engine.take_port(spec, out)
        cert = None
        if spec.tls:
            assert spec.hostname is not None  # the model requires it with tls
            cert = await trio.to_thread.run_sync(current_certificate, self.acme, spec.hostname)
            if cert is None or cert.renew_at <= datetime.datetime.now(datetime.UTC):
                path = engine.path(spec.id)
                before = await trio.to_thread.run_sync(_read, path)
                error = await self._swap(engine, spec, None)  # port 80 first: the CA validates through it
                if error:
                    return error
                out.stderr(f"asking {self.acme.directory_url} for a certificate for {spec.hostname}")
                try:
                    cert = await ensure_certificate(self.acme, spec.hostname, self.challenges)
                except AcmeError as exc:
                    restore(path, before, CONFIG_MODE)
                    await engine.reload()
                    return f"certificate for {spec.hostname}: {exc}"
        return await self._swap(engine, spec, cert)

    def _port_clash(self, spec: LbApply) -> str | None:
        """Two load balancers on one port share it only as nginx servers of different names; anything
        else would fight over the socket (HAProxy binds with SO_REUSEPORT and would split the traffic)."""
        mine = _ports(spec)
        for lb_id, other in self.served.items():
            if lb_id == spec.id or other.spec is None:
                continue
            shared = mine & _ports(other.spec)
            if not shared:
                continue
            port = min(shared)
            if not (spec.engine == other.spec.engine == "nginx"):
                return f"port {port} is already served by {other.spec.name} ({other.spec.engine}) on this node"
            if spec.hostname == other.spec.hostname:  # nginx would keep one server and ignore the other
                name = spec.hostname or "every name without a load balancer of its own"
                return f"port {port} is already served by {other.spec.name} (nginx) for {name} on this node"
        return None

    async def _swap(self, engine: Engine, spec: LbApply, cert: CertFiles | None) -> str | None:
        text = engine.render(spec, self._render_input(spec, cert, engine))
        error = await engine.validate(spec.id, text)
        if error:
            return error
        path = engine.path(spec.id)
        if engine.same_but_weights(spec.id, text) and await self._set_runtime(engine, spec):
            # Weights and drains alone: the runtime API applied them at once; the file keeps them.
            await trio.to_thread.run_sync(write_atomically, str(path), text.encode(), CONFIG_MODE)
            return None
        previous = await trio.to_thread.run_sync(_read, path)
        await trio.to_thread.run_sync(write_atomically, str(path), text.encode(), CONFIG_MODE)
        error = await engine.reload()
        if error:
            restore(path, previous, CONFIG_MODE)
            again = await engine.reload()
            if again:
                log.error("%s: the previous configuration did not reload either: %s", spec.name, again)
            return error
        # A new worker starts from the file, which has no drain state: the runtime API sets it.
        await self._set_runtime(engine, spec)
        return None

    async def _set_runtime(self, engine: Engine, spec: LbApply) -> bool:
        """The spec's weights and drains on the running engine; whether they took (else logged)."""
        try:
            error = await engine.set_runtime(spec)
        except OSError as exc:
            error = str(exc)
        if error:
            log.warning("%s: the runtime API did not take the weights and drains: %s", spec.name, error)
        return error is None

    @property
    def applying(self) -> bool:
        """An apply or a removal is under way: the engine is between two definitions."""
        return self._lock.locked()

    def _render_input(self, spec: LbApply, cert: CertFiles | None, engine: Engine) -> RenderInput:
        return RenderInput(
            bind=self.settings.bind,
            port=self.settings.listen_port(spec.port),
            http_port=self.settings.listen_port(80),
            acme_port=self.acme_port,
            cert=cert,
            hook=engine.hook_text(),
        )

    # --- remove, status -------------------------------------------------------------------

    async def remove(self, args: LbRemove, out: Output) -> bool:
        """Stop serving the load balancer: whether its configuration was here (False: already gone)."""
        async with self._lock:
            engine = self.engines[args.engine]
            path = engine.path(args.id)
            previous = await trio.to_thread.run_sync(_read, path)
            if previous is not None:
                path.unlink()
                error = await engine.reload()
                if error:
                    restore(path, previous, CONFIG_MODE)
                    await engine.reload()
                    raise JobError(f"{args.name}: the reload without it failed: {error}")
                out.stderr(f"{args.name}: removed from {args.engine}")
            else:
                out.stderr(f"{args.name}: not on this node (already removed)")
            self.served.pop(args.id, None)
            self._save()
        self.monitor.refresh()
        return previous is not None

    def status(self, lb_id: str) -> LbHealthReport | None:
        return self.monitor.report(lb_id)

    # --- state -----------------------------------------------------------------------------

    def _load(self) -> dict[str, Served]:
        try:
            document = orjson.loads(self._state_path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, orjson.JSONDecodeError) as exc:
            log.warning("%s unreadable, starting without it: %s", self._state_path, exc)
            return {}
        served: dict[str, Served] = {}
        for lb_id, entry in document.get("load_balancers", {}).items():
            spec = LbApply.model_validate(entry["spec"]) if entry.get("spec") else None
            served[lb_id] = Served(entry["revision"], entry["state"], entry.get("error"), spec)
        return served

    def _save(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        document: dict[str, Any] = {
            "load_balancers": {
                lb_id: {
                    "revision": s.revision,
                    "state": s.state,
                    "error": s.error,
                    "spec": s.spec.model_dump(mode="json") if s.spec else None,
                }
                for lb_id, s in self.served.items()
            }
        }
        write_atomically(str(self._state_path), orjson.dumps(document, option=orjson.OPT_INDENT_2))


def _ports(spec: LbApply) -> set[int]:
    return {spec.port, 80} if spec.tls else {spec.port}


def _read(path: Any) -> bytes | None:
    try:
        data: bytes = path.read_bytes()
    except FileNotFoundError:
        return None
    return data
