"""Wiring of a running agent: the site registry, the handlers and the link."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import trio

from agent import __version__
from agent.files import sweep
from agent.files.handlers import FileHandlers
from agent.files.ingress import Ingress
from agent.files.jail import kernel_protections
from agent.files.remote_copy import RemoteCopy, SshSettings
from agent.jobs.availability import DPKG_STATUS, Availability
from agent.jobs.manager import JobManager
from agent.jobs.metrics import SAMPLE_EVERY_S, Pulses, keep_sampling
from agent.jobs.php.ini import sweep_global_ini
from agent.jobs.ssl import keep_sites_renewed
from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.host import LayoutFile
from agent.jobs.toolkit.site_web import sweep_site_pools
from agent.link.call import Handler
from agent.link.client import AgentLink
from agent.load_balancers.node import LbNode
from agent.load_balancers.settings import LbSettings
from agent.sites import SiteRegistry
from agent.state import prepare_state_dir
from contract.link import protocol

log = logging.getLogger("fleetdeck.agent")


@dataclass(frozen=True)
class AgentConfig:
    urls: tuple[str, ...]  # the control plane's http(s) base URL, or its replicas' (tried in turn)
    token: str = field(repr=False)
    state_dir: str  # the site registry, transfers (`fleetdeck agent` picks a default)
    home: str = "/home"
    version: str = __version__
    ssh: SshSettings = field(default_factory=SshSettings)  # how other agents reach this one (cross-server copy)
    ingress: str | None = None  # HOST:PORT of the direct-upload ingress (None: no ingress)
    ingress_url: str | None = None  # its public base URL, when not http://HOST:PORT (TLS proxy)
    lb: LbSettings = field(default_factory=LbSettings)  # how this node serves load balancers
    host_layout: str | None = None  # the layout file of this server's services (None: Debian's defaults)
    metrics_every_s: float = SAMPLE_EVERY_S  # the sampler behind metrics.history (0: on demand only)
    pulse_every_s: float = protocol.DEFAULT_PULSE_S  # the link's pulse frames, the server list's sparklines (0: none)


def build_handlers(
    config: AgentConfig, jobs: JobManager | None = None, files: FileHandlers | None = None
) -> dict[str, Handler]:
    """Every RPC method this agent serves, by name (``job.*`` when given its job manager)."""
    files = files or file_handlers(config, jobs)
    handlers = files.handlers()
    handlers.update(RemoteCopy(files, config.state_dir, config.ssh).handlers())
    if jobs is not None:
        handlers.update(jobs.handlers())
        if isinstance(jobs.ctx.lb, LbNode):
            handlers.update(jobs.ctx.lb.monitor.handlers())
    return handlers


def file_handlers(config: AgentConfig, jobs: JobManager | None = None) -> FileHandlers:
    """The file workspace: the home's sites (the job manager's registry), and their logs in the
    host layout's sites' log folder."""
    if jobs is None:
        sites, host = SiteRegistry(config.state_dir), LayoutFile(config.host_layout).current
    else:
        ctx = jobs.ctx
        sites, host = ctx.sites, lambda: ctx.host
    return FileHandlers(config.home, sites, site_logs=lambda: host().system.sites_log_dir)


def job_manager(config: AgentConfig) -> JobManager:
    """The agent's job manager (run it in the agent's nursery: jobs outlive calls and links)."""
    ctx = JobContext(
        config.home,
        config.state_dir,
        SiteRegistry(config.state_dir),
        config.version,
        lb=LbNode(config.lb, config.state_dir),
        layout=LayoutFile(config.host_layout),
    )
    return JobManager(ctx)


async def run_agent(config: AgentConfig, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the control plane until cancelled (reconnecting as needed); started once wired."""
    await trio.to_thread.run_sync(prepare_state_dir, config.state_dir)
    # What a killed agent left half-written goes before anything new is written.
    settled = await trio.to_thread.run_sync(sweep.start, config.state_dir, config.home)
    if settled:
        log.info("removed %d leftover temporary names of an agent that stopped mid-way", settled)
    jobs = job_manager(config)
    try:
        await _serve(config, jobs, task_status)
    finally:
        if config.lb.agent_run:  # the agent's own nginx/HAProxy (demo, tests) stop with it
            with trio.CancelScope(shield=True):
                await jobs.ctx.lb.stop_engines()


async def _serve(config: AgentConfig, jobs: JobManager, task_status: trio.TaskStatus[None]) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(jobs.run)
        availability = Availability(jobs.kinds or {}, lambda: jobs.ctx.host, watched_files(config))
        await nursery.start(availability.run)
        jobs.after_change = availability.recheck
        await nursery.start(jobs.ctx.lb.run)  # the ACME responder and the health monitor
        nursery.start_soon(keep_sites_renewed, jobs.ctx)  # the sites' certificates whose auto-renew is on
        nursery.start_soon(sweep_global_ini, jobs.ctx)  # php.ini directives written before the allow-list
        nursery.start_soon(sweep_site_pools, jobs.ctx)  # the same in the sites' pools
        if config.metrics_every_s > 0:
            nursery.start_soon(keep_sampling, jobs.ctx, config.metrics_every_s)
        files = file_handlers(config, jobs)
        ingress = Ingress(files, config.ingress, public_url=config.ingress_url) if config.ingress else None
        ingress_url: str | None = None
        if ingress is not None:
            ingress_url = await nursery.start(ingress.serve)
            if not ingress_url.startswith("https:") and not _is_loopback(ingress_url):
                log.warning("the direct upload ingress is not https: upload URLs and bytes travel in clear text")
        link = AgentLink(
            config.urls,
            config.token,
            build_handlers(config, jobs, files),
            version=config.version,
            direct_ingress_url=ingress_url,
            job_kinds=jobs.kinds or {},
            kernel_protections=kernel_protections,
            needs=lambda: dict(availability.unmet),
            pulse=Pulses(config.home).take if config.pulse_every_s > 0 else None,
            pulse_every_s=config.pulse_every_s,
            on_welcome=ingress.on_welcome if ingress is not None else None,
        )
        if ingress is not None:
            ingress.report = link.report
        availability.on_change = link.needs_changed
        for url in link.urls:
            if url.startswith("ws:") and not _is_loopback(url):
                log.warning("the control plane URL %s is not https: the agent token travels in clear text", url)
        log.info("fleetdeck agent %s serving %s for %s", config.version, config.home, ", ".join(link.urls))
        task_status.started()
        await link.run()


def watched_files(config: AgentConfig) -> tuple[str, ...]:
    """The files whose change may change what runs here: dpkg's status, and the host layout's."""
    return (DPKG_STATUS, *((config.host_layout,) if config.host_layout else ()))


def _is_loopback(url: str) -> bool:
    host = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "127.0.0.1", "::1")
