"""The nginx engine: an `upstream` and a `server` per load balancer, one file each.

Agent-run (a port map): the agent's own nginx master under `<lb root>/nginx` (`nginx -c
nginx.conf -p <that folder>`), daemonized so it keeps serving across agent restarts and found
again by its pidfile. Otherwise the node's own nginx: a file per load balancer in
/etc/nginx/conf.d, started and reloaded by systemd when it is PID 1, else by Debian's init script
(``service nginx reload``).

A load balancer without a hostname answers every name on its port: its server is the port's
``default_server``. On the node's own nginx that is also what Debian's "Welcome to nginx" site
claims on port 80, so that site is disabled when it is still the package's own, unchanged file
(its symlink in sites-enabled removed, with a message saying how to bring it back); a default
site the admin wrote or edited is left alone, and ``nginx -t`` then refuses the apply naming it.

nginx has no active checks: weights, ``least_conn``/``ip_hash``, a drained backend ``down``, and
passive ``max_fails``/``fail_timeout``; the agent's prober (health.py) says what is healthy. The
pool lives in a zone the workers share: one round robin and one failure count per backend, not
one per worker (nginx runs a worker per core, the node's own and the agent's).
"""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

from agent.jobs.toolkit.host import nginx_reload_took, systemd_running
from agent.jobs.toolkit.output import Output
from agent.jobs.toolkit.proc import capture_command, child_pids, pid_alive, read_pid, which
from agent.load_balancers.engine import (
    Engine,
    RenderInput,
    host_port,
    ipv6_available,
    log_offset,
    log_since,
    wait_for,
)
from agent.sites import write_atomically
from contract.job_kinds.lb import LbApply

ACME_PATH = "/.well-known/acme-challenge/"
SYSTEM_CONF_DIR = Path("/etc/nginx/conf.d")
SYSTEM_PIDFILE = Path("/run/nginx.pid")
SYSTEM_ERROR_LOG = Path("/var/log/nginx/error.log")
DEBIAN_DEFAULT_SITE = Path("/etc/nginx/sites-enabled/default")  # a symlink to sites-available/default
DEBIAN_DEFAULT_SITE_PACKAGE = "nginx-common"


def _errors(line: str) -> bool:
    return any(level in line for level in ("[emerg]", "[alert]", "[crit]"))


# Idle connections to the backends each worker keeps. A worker carrying more requests at once than
# this closes the surplus after each answer and opens new ones for the next: with 32, 64 clients on
# one worker opened a connection for 30 % of their requests (benchmarks/load_balancers.py). The pool
# grows only to the most requests in flight at once, and each idle connection closes after the
# upstream's keepalive_timeout (60 s), as HAProxy's pool does (unbounded by default).
UPSTREAM_KEEPALIVE = 256

# An upstream's shared zone holds its servers and their state. nginx 1.22 needs about 14 KiB and
# 0.8 KiB a server (measured: 64k holds 63 servers, 256k 303; a full zone fails `nginx -t` with
# "ngx_slab_alloc() failed: no memory"); a backend given by name may resolve to several servers.
ZONE_BASE_KIB = 32
ZONE_KIB_PER_BACKEND = 2


def _zone_kib(backends: int) -> int:
    """The size of the shared zone of an upstream of `backends` backends, in KiB."""
    return ZONE_BASE_KIB + ZONE_KIB_PER_BACKEND * backends


class Nginx(Engine):
    kind = "nginx"
    package = "nginx"
    binary = "nginx"
    system_conf_dir = SYSTEM_CONF_DIR
    file_suffix = ".conf"

    @property
    def pidfile(self) -> Path:
        return self.root / "nginx.pid" if self.agent_run else SYSTEM_PIDFILE

    @property
    def error_log(self) -> Path:
        return self.root / "error.log" if self.agent_run else SYSTEM_ERROR_LOG

    # --- render ------------------------------------------------------------------------------

    def render(self, spec: LbApply, given: RenderInput) -> str:
        upstream = f"fleetdeck_lb_{spec.id}"
        check = spec.health_check
        lines = [
            f"# fleetdeck load balancer {spec.name} ({spec.id}), revision {spec.revision}: written by the agent",
            f"upstream {upstream} {{",
            # Shared by the workers: the node's own nginx runs one worker per core, each of which
            # would otherwise keep its own round robin and its own count of a backend's failures.
            f"    zone {upstream} {_zone_kib(len(spec.backends))}k;",
        ]
        if spec.algorithm == "least_conn":
            lines.append("    least_conn;")
        elif spec.algorithm == "ip_hash":
            lines.append("    ip_hash;")
        for backend in spec.backends:
            down = " down" if backend.drained else ""
            lines.append(
                f"    server {host_port(backend.address, backend.port)} weight={backend.weight}"
                f" max_fails={check.unhealthy_threshold} fail_timeout={check.interval_s}s{down};  # {backend.id}"
            )
        if not spec.backends:
            lines.append("    server 127.0.0.1:1 down;  # an empty pool answers 502")
        # Idle connections to the backends are kept and reused (with proxy_http_version 1.1 and
        # no Connection header): a new TCP connection per request halved the throughput.
        lines.append(f"    keepalive {UPSTREAM_KEEPALIVE};")
        lines.append("}")
        name = spec.hostname or "_"
        if spec.tls:
            lines += self._http_side(name, given)
            if given.cert is not None:
                lines += [
                    "server {",
                    *_listen(given.bind, given.port, " ssl"),
                    f"    server_name {name};",
                    f"    ssl_certificate {given.cert.fullchain};",
                    f"    ssl_certificate_key {given.cert.key};",
                    *_proxy(upstream),
                    "}",
                ]
        else:
            catch_all = "" if spec.hostname else " default_server"  # no hostname: every name on the port
            lines += ["server {", *_listen(given.bind, given.port, catch_all)]
            lines += [f"    server_name {name};"]
            lines += _acme(given.acme_port) + _proxy(upstream) + ["}"]
        if given.hook:
            lines += ["# test hook (LbSettings.broken_render_hook)", given.hook]
        return "\n".join(lines) + "\n"

    def _http_side(self, name: str, given: RenderInput) -> list[str]:
        """Port 80 of a TLS load balancer: the HTTP-01 answers, and a redirect to https."""
        return [
            "server {",
            *_listen(given.bind, given.http_port),
            f"    server_name {name};",
            *_acme(given.acme_port),
            "    location / { return 301 https://$host$request_uri; }",
            "}",
        ]

    # --- validate, reload ----------------------------------------------------------------------

    def main_conf(self, includes: list[str]) -> str:
        """The agent-run master's own nginx.conf (the same with other includes to validate a candidate)."""
        tmp = self.root / "tmp"
        lines = [
            "# the agent's own nginx for its load balancers (written by the agent)",
            # a worker per core, as the node's own nginx runs (Debian's nginx.conf): one worker
            # forwarded at 0.8x of the same proxy with two on this project's two-core machine
            "worker_processes auto;",
            f"pid {self.pidfile};",
            f"error_log {self.error_log} notice;",
            "events { worker_connections 4096; }",
            "http {",
            "    access_log off;",
            # no temporary files: the workers may run as another account than the agent's folder's
            "    proxy_request_buffering off;",
            "    proxy_max_temp_file_size 0;",
            *(f"    {kind}_temp_path {tmp / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")),
            *(f"    include {include};" for include in includes),
            "}",
        ]
        return "\n".join(lines) + "\n"

    def _prepare(self) -> None:
        for folder in (self.root, self.conf_dir, self.root / "tmp", self.root / "staging"):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomically(str(self.root / "nginx.conf"), self.main_conf([f"{self.conf_dir}/*.conf"]).encode())

    async def validate(self, lb_id: str, text: str) -> str | None:
        binary = which(self.binary) or self.binary
        target = self.path(lb_id)
        if self.agent_run:
            self._prepare()
            candidate = self.root / "staging" / target.name
            write_atomically(str(candidate), text.encode())
            others = sorted(str(p) for p in self.conf_dir.glob("*.conf") if p != target)
            check = self.root / "staging" / "validate.conf"
            write_atomically(str(check), self.main_conf([*others, str(candidate)]).encode())
            argv = [binary, "-t", "-q", "-c", str(check), "-p", f"{self.root}/"]
            code, out, err = await capture_command(argv)
            candidate.unlink(missing_ok=True)
            return None if code == 0 else (err + out).strip() or f"nginx -t exited with {code}"
        # The node's nginx: its main configuration is not ours, so the candidate is checked in place
        # and the previous file put back before anything reloads.
        previous = target.read_bytes() if target.exists() else None
        write_atomically(str(target), text.encode(), 0o644)
        try:
            code, out, err = await capture_command([binary, "-t", "-q"])
        finally:
            restore(target, previous)
        return None if code == 0 else (err + out).strip() or f"nginx -t exited with {code}"

    async def reload(self) -> str | None:
        async with self._lock:
            master = read_pid(self.pidfile)
            if master is None:
                return await self._start()
            before = child_pids(master)
            offset = log_offset(self.error_log)
            if self.agent_run:
                os.kill(master, signal.SIGHUP)
            else:
                argv = ["systemctl", "reload", "nginx"] if systemd_running() else ["service", "nginx", "reload"]
                code, out, err = await capture_command(argv)
                if code != 0:
                    return (err + out).strip() or f"{' '.join(argv)} exited with {code}"

            # The wait's own answer decides: a second look could meet an old worker in a later state.
            seen = await wait_for(
                lambda: nginx_reload_took(master, before) or log_since(self.error_log, offset, _errors)
            )
            if seen is True:
                return None
            return str(seen or "nginx started no new worker process after the reload")

    async def _start(self) -> str | None:
        binary = which(self.binary) or self.binary
        if self.agent_run:
            self._prepare()
            argv = [binary, "-c", str(self.root / "nginx.conf"), "-p", f"{self.root}/"]
        elif systemd_running():
            argv = ["systemctl", "start", "nginx"]
        else:
            argv = ["service", "nginx", "start"]
        code, out, err = await capture_command(argv)
        if code != 0:
            return (err + out).strip() or f"{argv[0]} exited with {code}"
        master = await wait_for(lambda: read_pid(self.pidfile))
        if not isinstance(master, int) or not await wait_for(lambda: child_pids(master)):
            return "nginx did not start its worker processes"
        return None

    async def stop(self) -> None:
        if not self.agent_run:
            return
        master = read_pid(self.pidfile)
        if master is not None:
            os.kill(master, signal.SIGTERM)
            await wait_for(lambda: not pid_alive(master))

    async def take_port(self, spec: LbApply, out: Output) -> None:
        """A load balancer without a hostname is port 80's default server: Debian's placeholder site
        (unchanged from the package) gives the port up to it."""
        if spec.hostname or not await debian_placeholder_enabled():
            return
        os.unlink(DEBIAN_DEFAULT_SITE)
        out.stderr(
            f"nginx: disabled Debian's default site ({DEBIAN_DEFAULT_SITE}, unchanged from the package):"
            f" {spec.name} answers every name on port 80 that no other site claims;"
            f" ln -s /etc/nginx/sites-available/default {DEBIAN_DEFAULT_SITE} brings it back"
        )


async def debian_placeholder_enabled() -> bool:
    """Debian's default site is enabled and still the package's file (dpkg's md5 of the conffile)."""
    enabled = _enabled_default_site()
    if enabled is None:
        return False
    target, digest = enabled
    code, conffiles, _ = await capture_command(["dpkg-query", "-W", "-f=${Conffiles}", DEBIAN_DEFAULT_SITE_PACKAGE])
    # lines: " /etc/nginx/sites-available/default <md5>[ obsolete]"
    shipped = {fields[0]: fields[1] for fields in (line.split() for line in conffiles.splitlines()) if len(fields) >= 2}
    return code == 0 and shipped.get(target) == digest


def _enabled_default_site() -> tuple[str, str] | None:
    """The file sites-enabled/default links to and its md5; None when it is no symlink (a file of
    its own there is the admin's) or links nowhere."""
    if not DEBIAN_DEFAULT_SITE.is_symlink():
        return None
    try:
        target = DEBIAN_DEFAULT_SITE.resolve(strict=True)
        return str(target), hashlib.md5(target.read_bytes(), usedforsecurity=False).hexdigest()
    except OSError:
        return None


def restore(path: Path, previous: bytes | None, mode: int = 0o644) -> None:
    """Put `previous` back as `path` (atomically), or remove `path` when there was none."""
    if previous is None:
        path.unlink(missing_ok=True)
    else:
        write_atomically(str(path), previous, mode)


def _listen(bind: str | None, port: int, options: str = "") -> list[str]:
    """The `listen` lines: the listen address, or every address (IPv6 too when the node has it)."""
    addresses = [host_port(bind, port)] if bind else [str(port), *([f"[::]:{port}"] if ipv6_available() else [])]
    return [f"    listen {address}{options};" for address in addresses]


def _acme(acme_port: int | None) -> list[str]:
    if acme_port is None:
        return []
    return [f"    location {ACME_PATH} {{ proxy_pass http://127.0.0.1:{acme_port}; }}"]


def _proxy(upstream: str) -> list[str]:
    return [
        "    location / {",
        f"        proxy_pass http://{upstream};",
        "        proxy_http_version 1.1;",
        '        proxy_set_header Connection "";',
        "        proxy_set_header Host $host;",
        "        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
        "        proxy_set_header X-Forwarded-Proto $scheme;",
        "        proxy_next_upstream error timeout;",
        "    }",
    ]
