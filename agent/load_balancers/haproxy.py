"""The HAProxy engine: a frontend and a backend per load balancer, one file each, master-worker.

Agent-run (a port map): the agent's own HAProxy under `<lb root>/haproxy`: ``haproxy -W -S
master.sock -p haproxy.pid -f haproxy.cfg -f conf.d`` (one file per load balancer in conf.d), its
output in haproxy.log, found again by its pidfile after an agent restart. Otherwise the node's own
HAProxy: files in /etc/haproxy/conf.d, which Debian's unit is told to read through
/etc/default/haproxy (``EXTRAOPTS``), its master socket /run/haproxy-master.sock and its stats
socket /run/haproxy/admin.sock (Debian's defaults).

A reload is the master CLI's ``reload``; it took when ``show proc`` lists a worker that was not
there before, and failed when the master counts one more failed reload. ``hard-stop-after`` bounds
how long old workers finish their requests; ``close-spread-time`` spreads the closing of idle
keep-alive connections so their clients reconnect to the new worker instead of failing together.

Weights and drain take effect at once through the runtime API of the stats socket (``set weight``,
``set server ... state drain|ready``: `set_runtime`), so a drained server reads DRAIN in any
HAProxy client. They are in the rendered file too, so a reload keeps their effect: a drained
server has weight 0 there (it keeps its connections and gets no new ones; HAProxy's
configuration has no drain state, so after a reload the agent did not make it reads UP with
weight 0 until the next apply, and `runtime_drift` says so). A change of weights and drains alone
is not reloaded: the file is written and the runtime API applies it (`same_but_weights`).
"""

from __future__ import annotations

import csv
import functools
import io
import os
import re
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import trio

from agent import unix_sockets
from agent.jobs.toolkit.host import systemd_running
from agent.jobs.toolkit.proc import capture_command, pid_alive, read_pid, tool_env, which
from agent.load_balancers.engine import Engine, RenderInput, host_port, ipv6_available, log_offset, log_since
from agent.load_balancers.engine import wait_for as poll_until
from agent.load_balancers.nginx import ACME_PATH
from agent.sites import write_atomically
from contract.job_kinds.lb import LbApply, LbBackend

BALANCE = {"round_robin": "roundrobin", "least_conn": "leastconn", "ip_hash": "source"}
HARD_STOP_AFTER = "30s"
CLOSE_SPREAD_TIME = "5s"
SOCKET_TIMEOUT_S = 5.0
SYSTEM_CONF_DIR = Path("/etc/haproxy/conf.d")
SYSTEM_MASTER_SOCKET = Path("/run/haproxy-master.sock")
SYSTEM_STATS_SOCKET = Path("/run/haproxy/admin.sock")
SYSTEM_PIDFILE = Path("/run/haproxy.pid")  # Debian's init script and unit
SYSTEM_DEFAULTS = Path("/etc/default/haproxy")
# HAProxy 2.6 refuses a socket path over 97 bytes ("too long (max 97)"): it binds a temporary
# name beside the path first, then renames it into place.
HAPROXY_MAX_SOCKET_PATH = 97


class Haproxy(Engine):
    kind = "haproxy"
    package = "haproxy"
    binary = "haproxy"
    system_conf_dir = SYSTEM_CONF_DIR
    file_suffix = ".cfg"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def master_socket(self) -> Path:
        return self._sockets / "master.sock" if self.agent_run else SYSTEM_MASTER_SOCKET

    @property
    def stats_socket(self) -> Path:
        return self._sockets / "stats.sock" if self.agent_run else SYSTEM_STATS_SOCKET

    @functools.cached_property
    def _sockets(self) -> Path:
        """The engine's folder, or a short one of its own where a socket path in it would not fit."""
        fits = unix_sockets.fits(self.root / "master.sock", HAPROXY_MAX_SOCKET_PATH)
        return self.root if fits else unix_sockets.runtime_dir(self.root)

    @property
    def pidfile(self) -> Path:
        return self.root / "haproxy.pid" if self.agent_run else SYSTEM_PIDFILE

    @property
    def log_file(self) -> Path:
        return self.root / "haproxy.log"

    @property
    def main_file(self) -> Path:
        return self.root / "haproxy.cfg" if self.agent_run else Path("/etc/haproxy/haproxy.cfg")

    # --- render ------------------------------------------------------------------------------

    def render(self, spec: LbApply, given: RenderInput) -> str:
        name = proxy_name(spec.id)
        check = spec.health_check
        acme = f"{name}_acme" if given.acme_port is not None else None
        lines = [f"# fleetdeck load balancer {spec.name} ({spec.id}), revision {spec.revision}: written by the agent"]
        if not spec.tls or given.cert is not None:
            tls = f" ssl crt {given.cert.bundle}" if spec.tls and given.cert is not None else ""
            lines += [
                f"frontend {name}",
                "    mode http",
                f"    bind {_bind(given.bind, given.port)}{tls}",
                "    timeout client 60s",
                "    option forwardfor",
            ]
            if acme and not spec.tls:
                lines += [f"    use_backend {acme} if {{ path_beg {ACME_PATH} }}"]
            lines.append(f"    default_backend {name}")
        if spec.tls:  # port 80 of a TLS load balancer: the HTTP-01 answers, and a redirect to https
            lines += [f"frontend {name}_http", "    mode http", f"    bind {_bind(given.bind, given.http_port)}"]
            lines += ["    timeout client 60s"]
            if acme:
                lines += [f"    use_backend {acme} if {{ path_beg {ACME_PATH} }}"]
            lines += [f"    http-request redirect scheme https unless {{ path_beg {ACME_PATH} }}"]
        lines += [
            f"backend {name}",
            "    mode http",
            f"    balance {BALANCE[spec.algorithm]}",
            "    timeout connect 5s",
            "    timeout server 60s",
            # A WebSocket (an agent's link to control-plane replicas behind it) is a tunnel once
            # upgraded: idle for minutes between heartbeats is normal, so not cut after 60 s.
            "    timeout tunnel 1h",
            # A backend that just died is refused before its health check says so: its requests go
            # to another server (each retry redispatched) rather than failing with a 503.
            "    retries 3",
            "    option redispatch 1",
            f"    option httpchk GET {check.path}",
            f"    default-server inter {check.interval_s}s"
            f" rise {check.healthy_threshold} fall {check.unhealthy_threshold}",
        ]
        for backend in spec.backends:
            address = host_port(backend.address, backend.port)
            lines.append(f"    server {backend.id} {address} weight {weight_in_file(backend)} check")
        if acme:
            lines += [f"backend {acme}", "    mode http", "    timeout connect 5s", "    timeout server 30s"]
            lines += [f"    server responder 127.0.0.1:{given.acme_port}"]
        if given.hook:
            lines += ["# test hook (LbSettings.broken_render_hook)", given.hook]
        return "\n".join(lines) + "\n"

    def main_conf(self) -> str:
        """The agent-run HAProxy's global and defaults sections."""
        return "\n".join(
            [
                "# the agent's own HAProxy for its load balancers (written by the agent)",
                "global",
                f"    stats socket {self.stats_socket} mode 600 level admin",
                f"    hard-stop-after {HARD_STOP_AFTER}",
                f"    close-spread-time {CLOSE_SPREAD_TIME}",
                "defaults",
                "    mode http",
                "    timeout connect 5s",
                "    timeout client 60s",
                "    timeout server 60s",
                "",
            ]
        )

    def _prepare(self) -> None:
        for folder in (self.root, self.conf_dir, self.root / "staging"):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.agent_run:
            write_atomically(str(self.main_file), self.main_conf().encode())
        else:
            self._system_setup()

    def _system_setup(self) -> None:
        """Debian's unit reads only haproxy.cfg: have it read our folder too, and bound old workers."""
        # -W: Debian's init script (no systemd) starts it daemonized without master-worker, which
        # would leave the master socket undefined; the systemd unit's -Ws already implies it.
        extra = f'EXTRAOPTS="-W -S {SYSTEM_MASTER_SOCKET} -f {SYSTEM_CONF_DIR}"'
        current = SYSTEM_DEFAULTS.read_text() if SYSTEM_DEFAULTS.exists() else ""
        if extra not in current:
            write_atomically(
                str(SYSTEM_DEFAULTS), (current.rstrip("\n") + "\n" + extra + "\n").lstrip().encode(), 0o644
            )
        timing = f"global\n    hard-stop-after {HARD_STOP_AFTER}\n    close-spread-time {CLOSE_SPREAD_TIME}\n"
        write_atomically(str(SYSTEM_CONF_DIR / "00-fleetdeck-global.cfg"), timing.encode(), 0o644)

    # --- validate, reload --------------------------------------------------------------------

    async def validate(self, lb_id: str, text: str) -> str | None:
        binary = which(self.binary) or self.binary
        target = self.path(lb_id)
        self._prepare()
        candidate = self.root / "staging" / target.name
        write_atomically(str(candidate), text.encode())
        others = sorted(p for p in self.conf_dir.glob("*.cfg") if p != target)
        argv = [binary, "-c", "-f", str(self.main_file), *(a for p in others for a in ("-f", str(p)))]
        code, out, err = await capture_command([*argv, "-f", str(candidate)])
        candidate.unlink(missing_ok=True)
        if code == 0:
            return None
        messages = [line for line in (out + err).splitlines() if "[NOTICE]" not in line]
        return "\n".join(messages).strip() or f"haproxy -c exited with {code}"

    async def reload(self) -> str | None:
        async with self._lock:
            # The node's own is (re)started when it is not running (its master socket outlives a stop)
            # or runs without that socket (started before the agent's EXTRAOPTS, e.g. by apt).
            if read_pid(self.pidfile) is None or not (self.agent_run or self.master_socket.exists()):
                return await self._start()
            try:
                before = parse_show_proc(await master_command(self.master_socket, "show proc"))
            except OSError as exc:
                return f"the HAProxy master socket does not answer: {exc}"
            offset = log_offset(self.log_file)
            try:
                await master_command(self.master_socket, "reload")
            except OSError as exc:
                return f"the HAProxy master socket refused the reload: {exc}"
            after = await self._wait_generation(before)
            if after is not None and after.took(before):
                return None
            text = log_since(self.log_file, offset, lambda line: "[ALERT]" in line) if self.agent_run else ""
            return text or "HAProxy did not start a new worker after the reload (show proc)"

    async def _wait_generation(self, before: ProcTable) -> ProcTable | None:
        """`show proc` once the reload has an outcome: a new worker, or one more failed reload."""
        latest: list[ProcTable] = []

        async def settled() -> bool:
            try:
                table = parse_show_proc(await master_command(self.master_socket, "show proc"))
            except OSError:
                return False  # the master is re-executing itself
            latest[:] = [table]
            return table.took(before) or table.failed > before.failed

        with trio.move_on_after(15.0):
            while not await settled():  # noqa: ASYNC110 (the master sends no event)
                await trio.sleep(0.05)
        return latest[0] if latest else None

    async def _start(self) -> str | None:
        binary = which(self.binary) or self.binary
        self._prepare()
        if not self.agent_run:
            argv = ["systemctl", "restart", "haproxy"] if systemd_running() else ["service", "haproxy", "restart"]
            code, out, err = await capture_command(argv)
            return None if code == 0 else (err + out).strip() or f"{argv[0]} exited with {code}"
        offset = log_offset(self.log_file)
        argv = [binary, "-W", "-S", str(self.master_socket), "-p", str(self.pidfile)]
        argv += ["-f", str(self.main_file), "-f", str(self.conf_dir)]
        with self.log_file.open("ab") as log_file:
            # Its own session, not the agent's child in spirit: it keeps serving when the agent restarts.
            # detached: it outlives the agent (the fork is brief)
            self._process = subprocess.Popen(  # noqa: ASYNC220
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                start_new_session=True,
                env=tool_env(),
            )
        process = self._process

        async def up() -> bool:
            if process.poll() is not None:
                return True
            try:
                return bool(parse_show_proc(await master_command(self.master_socket, "show proc")).workers)
            except OSError:
                return False

        with trio.move_on_after(15.0):
            while not await up():  # noqa: ASYNC110 (the master sends no event)
                await trio.sleep(0.05)
        if process.poll() is None and read_pid(self.pidfile):
            return None
        text = log_since(self.log_file, offset, lambda line: "[ALERT]" in line)
        return text or f"HAProxy did not start (exit code {process.poll()})"

    async def stop(self) -> None:
        if not self.agent_run:
            return
        master = read_pid(self.pidfile)
        if master is not None:
            os.kill(master, signal.SIGTERM)
            await poll_until(lambda: not pid_alive(master))
        if self._process is not None:
            self._process.wait(timeout=5)
            self._process = None
        if self._sockets != self.root:  # a short folder of its own: it goes with its HAProxy
            for left in (self.master_socket, self.stats_socket):
                left.unlink(missing_ok=True)
            unix_sockets.remove_runtime_dir(self._sockets)

    async def show_stat(self) -> list[dict[str, str]]:
        return parse_show_stat(await master_command(self.stats_socket, "show stat"))

    async def show_servers_state(self, lb_id: str) -> dict[str, ServerState]:
        """``show servers state`` of one load balancer's backend: its servers by name."""
        answer = await master_command(self.stats_socket, f"show servers state {proxy_name(lb_id)}")
        return parse_show_servers_state(answer)

    async def set_runtime(self, spec: LbApply) -> str | None:
        """Each server's weight and drain as the spec says, through the stats socket (at once, no
        reload); HAProxy's refusal, or None. A server put in maintenance behind the agent's back is
        made ready again: the definition is what serves. OSError when the socket does not answer."""
        proxy = proxy_name(spec.id)
        for backend in spec.backends:
            server = f"{proxy}/{backend.id}"
            state = "drain" if backend.drained else "ready"
            # One line, both commands: the non-interactive CLI answers one line per connection.
            command = f"set weight {server} {weight_in_file(backend)}; set server {server} state {state}"
            answer = (await master_command(self.stats_socket, command)).strip()
            if answer:
                return f"HAProxy refused {command!r}: {answer}"
        return None

    def same_but_weights(self, lb_id: str, text: str) -> bool:
        """The file of `lb_id` on disk differs from `text` in servers' weights alone (and the
        revision in its comment): the runtime API can apply `text` without a reload."""
        try:
            current = self.path(lb_id).read_text()
        except (FileNotFoundError, UnicodeDecodeError):
            return False
        return _without_weights(current) == _without_weights(text)


def proxy_name(lb_id: str) -> str:
    """The frontend and backend of a load balancer are named after its id."""
    return f"fleetdeck_lb_{lb_id}"


def weight_in_file(backend: LbBackend) -> int:
    """A drained server has weight 0: it keeps its connections and gets no new ones."""
    return 0 if backend.drained else backend.weight


def _without_weights(text: str) -> list[str]:
    """A rendered file's lines but its comments, each server's weight left out."""
    return [_WEIGHT.sub(" weight _", line) for line in text.splitlines() if not line.startswith("#")]


_WEIGHT = re.compile(r" weight \d+(?= )")


def _bind(bind: str | None, port: int) -> str:
    """The listen address, or every address (IPv6 too when the node has it)."""
    if bind:
        return host_port(bind, port)
    return f":::{port} v4v6" if ipv6_available() else f":{port}"


async def master_command(socket_path: Path, command: str) -> str:
    """One command on an HAProxy CLI socket (master or stats): its whole answer."""
    chunks: list[bytes] = []
    with trio.move_on_after(SOCKET_TIMEOUT_S) as scope:
        stream = await trio.open_unix_socket(str(socket_path))
        async with stream:
            try:
                await stream.send_all(command.encode() + b"\n")
                await stream.send_eof()
                while data := await stream.receive_some(65536):
                    chunks.append(data)
            except trio.BrokenResourceError as exc:  # the master re-executing itself (reload)
                raise OSError(f"{socket_path}: {exc}") from exc
    if scope.cancelled_caught:
        raise OSError(f"{socket_path} did not answer {command!r} within {SOCKET_TIMEOUT_S:g} s")
    return b"".join(chunks).decode("utf-8", "replace")


# --- parsers of HAProxy's answers ------------------------------------------------------------


@dataclass(frozen=True)
class ProcTable:
    """``show proc`` of the master CLI: its reload counts and the current workers' pids."""

    master_pid: int
    reloads: int
    failed: int
    workers: dict[int, int] = field(default_factory=dict)  # current workers: pid -> reloads survived
    old_workers: dict[int, int] = field(default_factory=dict)  # previous generations still finishing

    def new_workers(self, before: ProcTable) -> set[int]:
        return set(self.workers) - set(before.workers) - set(before.old_workers)

    def took(self, before: ProcTable) -> bool:
        """A reload took: a new worker, and the previous ones moved to the old workers (no longer accepting)."""
        return bool(self.new_workers(before)) and not set(before.workers) & set(self.workers)


def parse_show_proc(text: str) -> ProcTable:
    master_pid = reloads = failed = 0
    sections: dict[str, dict[int, int]] = {"workers": {}, "old workers": {}}
    section = ""
    for line in text.splitlines():
        if line.startswith("#"):
            section = line.lstrip("#").strip()
            continue
        fields = line.split()
        if len(fields) < 3 or not fields[0].isdigit():
            continue
        if fields[1] == "master":
            master_pid, reloads = int(fields[0]), int(fields[2])
            if "[failed:" in line:
                failed = int(line.split("[failed:", 1)[1].split("]", 1)[0])
        elif fields[1] == "worker" and section in sections:
            sections[section][int(fields[0])] = int(fields[2])
    if not master_pid:
        raise OSError(f"not an answer to show proc: {text[:200]!r}")
    return ProcTable(master_pid, reloads, failed, sections["workers"], sections["old workers"])


@dataclass(frozen=True)
class ServerState:
    """A server in ``show servers state``: what an administrator set at runtime."""

    weight: int  # srv_uweight: the weight in use (`set weight` changes it)
    admin: int  # srv_admin_state: a mask of SRV_ADMF_* (MAINT_FLAGS, DRAIN_FLAGS)

    @property
    def maint(self) -> bool:
        return bool(self.admin & MAINT_FLAGS)

    @property
    def drain(self) -> bool:
        return bool(self.admin & DRAIN_FLAGS)

    def drift(self, backend: LbBackend) -> str | None:
        """How this server differs from the definition `backend` (a change made on the socket
        behind the agent's back, or a reload the agent did not make), in words; None: it does not."""
        differences = []
        if self.weight != weight_in_file(backend):
            defined = "0 defined (drained)" if backend.drained else f"{backend.weight} defined"
            differences.append(f"weight {self.weight} on the node, {defined}")
        if self.maint:
            differences.append("in maintenance on the node")
        if self.drain and not backend.drained:
            differences.append("drained on the node, not in the definition")
        elif backend.drained and not self.drain:
            differences.append("not drained on the node (defined drained)")
        return "; ".join(differences) or None


MAINT_FLAGS = 0x01 | 0x02 | 0x04 | 0x20 | 0x40  # forced, inherited, configured, resolution, FQDN
DRAIN_FLAGS = 0x08 | 0x10  # forced, inherited


def parse_show_servers_state(text: str) -> dict[str, ServerState]:
    """``show servers state`` (format 1): its servers by name. OSError when it is no such answer."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "1":
        raise OSError(f"not an answer to show servers state (format 1): {text[:200]!r}")
    header: list[str] = []
    servers: dict[str, ServerState] = {}
    for line in lines[1:]:
        if line.startswith("#"):
            header = line.lstrip("#").split()
            continue
        fields = dict(zip(header, line.split(), strict=False))
        if "srv_name" in fields:
            servers[fields["srv_name"]] = ServerState(int(fields["srv_uweight"]), int(fields["srv_admin_state"]))
    return servers


def parse_show_stat(text: str) -> list[dict[str, str]]:
    """``show stat``: one dict per proxy or server, keyed by the CSV header's names."""
    if not text.startswith("# "):
        raise OSError(f"not an answer to show stat: {text[:200]!r}")
    reader = csv.DictReader(io.StringIO(text[2:]))
    return [{k: v for k, v in row.items() if k} for row in reader if row.get("pxname")]
