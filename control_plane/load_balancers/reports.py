"""What load-balancer nodes report: the outcome of each `lb.apply` job, and the health their
agents stream (`lb.watch`), stored into the load balancer and backend rows.

`LbReports` lives as long as the app: its watch tasks are children of the lifespan's task group.
A node's watch opens when its agent links (and the node serves a load balancer), and again on
every new link; an agent without the `lb.watch` handler is skipped quietly.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from anyio.abc import TaskGroup
from pydantic import ValidationError

from contract.job_kinds.lb import LbApplyOutcome, LbHealthReport
from control_plane.hub import AgentCallError, AgentHub, AgentOfflineError, AgentSession
from control_plane.jobs.runner import JobEnd
from control_plane.load_balancers import store
from control_plane.storage import Database

log = logging.getLogger("fleetdeck.load_balancers")

WATCH_METHOD = "lb.watch"


class LbReports:
    def __init__(self, db: Database, hub: AgentHub) -> None:
        self._db = db
        self._hub = hub
        self._group: TaskGroup | None = None
        self._watching: dict[str, AgentSession] = {}  # server id -> the link its watch runs on

    def bind(self, group: TaskGroup) -> None:
        """Give the watches the task group they run in (the app's lifespan owns it)."""
        self._group = group

    # --- health -----------------------------------------------------------------------------

    def watch(self, server_id: str) -> None:
        """Follow `lb.watch` on the server's current link, unless a watch runs on it already."""
        session = self._hub.session(server_id)
        if session is None or self._group is None or WATCH_METHOD not in session.handlers:
            return
        if self._watching.get(server_id) is session:
            return
        self._watching[server_id] = session
        self._group.start_soon(self._watch, server_id, session, name=f"lb.watch {server_id}")

    async def _watch(self, server_id: str, session: AgentSession) -> None:
        try:
            async with self._hub.open_stream(server_id, WATCH_METHOD, {}) as stream:
                async for chunk in stream:
                    for item in chunk if isinstance(chunk, list) else []:
                        await self.ingest(server_id, item)
        except AgentOfflineError:
            pass  # the link dropped: the next one opens a new watch
        except AgentCallError as exc:
            log.warning("lb.watch on server %s ended: %s", server_id, exc)
        finally:
            if self._watching.get(server_id) is session:
                del self._watching[server_id]

    async def ingest(self, server_id: str, item: Any) -> None:
        """One `LbHealthReport` from a node's agent; a malformed one is logged and dropped."""
        try:
            report = LbHealthReport.model_validate(item)
        except ValidationError as exc:
            log.warning("server %s sent a malformed health report: %s", server_id, exc)
            return
        # Through an outage: the agent's stream waits meanwhile (its credit is not granted back).
        await self._db.run_retrying(store.record_health, server_id, report)

    # --- apply outcomes ---------------------------------------------------------------------

    async def on_apply_finished(self, end: JobEnd) -> None:
        """An `lb.apply` job ended: record what the node said, or that it said nothing."""
        if end.status == "cancelled":
            return  # superseded by a newer revision before it ran
        args = orjson.loads(end.job["args"])
        outcome = _outcome(end.stdout)
        if outcome is not None and outcome.id == args["id"]:
            await self._db.run_retrying(store.record_outcome, outcome.id, outcome)
        else:
            error = end.last_stderr or f"lb.apply ended {end.status} (exit code {end.exit_code}) without an outcome"
            await self._db.run_retrying(store.record_failed_apply, args["id"], args["revision"], error)
        self.watch(end.job["server_id"])


def _outcome(stdout: str) -> LbApplyOutcome | None:
    """The `LbApplyOutcome` a node printed: its whole stdout, or else its last line."""
    text = stdout.strip()
    for candidate in (text, text.rsplit("\n", 1)[-1]):
        try:
            return LbApplyOutcome.model_validate_json(candidate)
        except ValidationError:
            continue
    return None
