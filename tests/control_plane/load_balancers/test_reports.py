"""What a node reports, into the rows: the outcome rules of `lb.apply` (a report of an older
revision never marks a newer one active) and health ingestion, on a real migrated database of
each kind (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from contract.job_kinds.lb import LbApplyOutcome, LbHealthReport
from control_plane.clock import now_iso
from control_plane.hub import AgentHub
from control_plane.jobs import store as job_store
from control_plane.jobs.lines import Run
from control_plane.jobs.runner import JobRunner
from control_plane.load_balancers import routes, store
from control_plane.load_balancers.reports import LbReports
from control_plane.storage import Database
from control_plane.storage.schema import orgs, servers


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    database.migrate()
    with database.engine.begin() as conn:
        conn.execute(orgs.insert().values(id="org_1", name="one", plan="free", created_at=now_iso()))
        for server_id, kind in (("srv_node", "full"), ("srv_b1", "lite"), ("srv_other", "full")):
            conn.execute(
                servers.insert().values(
                    id=server_id, org_id="org_1", name=server_id, kind=kind, address="10.0.0.1", created_at=now_iso()
                )
            )
    yield database
    database.dispose()


def _lb(db: Database, backends: int = 2) -> str:
    values = {
        "name": "web",
        "port": 80,
        "tls": False,
        "hostname": None,
        "node_server_id": "srv_node",
        "engine": "haproxy",
        "algorithm": "round_robin",
        "health_check": '{"path": "/", "interval_s": 10, "healthy_threshold": 2, "unhealthy_threshold": 3}',
    }
    pool = [{"server_id": "srv_b1", "port": 8080 + i, "weight": 1} for i in range(backends)]
    return db.run_sync(store.create_lb, "org_1", values, pool)


def _row(db: Database, lb_id: str) -> dict[str, object]:
    row = db.run_sync(store.get_lb, "org_1", lb_id)
    assert row is not None
    return row


def _report(db: Database, lb_id: str, revision: int, *healths: str) -> LbHealthReport:
    backends = db.run_sync(store.backends_of, [lb_id])[lb_id]
    return LbHealthReport.model_validate(
        {
            "id": lb_id,
            "revision": revision,
            "backends": [
                {"id": b["id"], "health": h, "last_check_at": now_iso(), "stats": None}
                for b, h in zip(backends, healths, strict=True)
            ],
        }
    )


def test_an_older_revisions_report_never_marks_the_newer_one_active(db: Database) -> None:
    lb_id = _lb(db)
    db.run_sync(store.bump, lb_id)  # revision 2, pending
    db.run_sync(store.record_outcome, lb_id, LbApplyOutcome(id=lb_id, revision=1, state="active"))
    row = _row(db, lb_id)
    assert (row["state"], row["revision"], row["applied_revision"]) == ("pending_apply", 2, 1)
    assert row["applied_at"]
    db.run_sync(store.record_outcome, lb_id, LbApplyOutcome(id=lb_id, revision=2, state="active"))
    assert (_row(db, lb_id)["state"], _row(db, lb_id)["applied_revision"]) == ("active", 2)
    # A late report of revision 1 after 2 is applied: nothing moves back.
    db.run_sync(store.record_outcome, lb_id, LbApplyOutcome(id=lb_id, revision=1, state="active"))
    assert (_row(db, lb_id)["state"], _row(db, lb_id)["applied_revision"]) == ("active", 2)


def test_a_failed_apply_is_degraded_with_the_nodes_text_and_keeps_the_applied_revision(db: Database) -> None:
    lb_id = _lb(db)
    db.run_sync(store.record_outcome, lb_id, LbApplyOutcome(id=lb_id, revision=1, state="active"))
    db.run_sync(store.bump, lb_id)
    error = "[ALERT] parsing [/lb/web.cfg:12]: unknown keyword 'bogus'"
    db.run_sync(store.record_outcome, lb_id, LbApplyOutcome(id=lb_id, revision=2, state="degraded", error=error))
    row = _row(db, lb_id)
    assert (row["state"], row["state_error"], row["applied_revision"]) == ("degraded", error, 1)
    # A degraded report of an older revision does not touch the newer one.
    db.run_sync(store.bump, lb_id)
    db.run_sync(store.record_outcome, lb_id, LbApplyOutcome(id=lb_id, revision=2, state="degraded", error="x"))
    assert _row(db, lb_id)["state"] == "pending_apply"


def test_an_apply_without_outcome_degrades_only_its_own_revision(db: Database) -> None:
    lb_id = _lb(db)
    db.run_sync(store.bump, lb_id)
    db.run_sync(store.record_failed_apply, lb_id, 1, "no handler for lb.apply")
    assert _row(db, lb_id)["state"] == "pending_apply"
    db.run_sync(store.record_failed_apply, lb_id, 2, "no handler for lb.apply")
    assert (_row(db, lb_id)["state"], _row(db, lb_id)["state_error"]) == ("degraded", "no handler for lb.apply")


def test_health_reports_move_the_applied_revision_between_active_and_degraded(db: Database) -> None:
    lb_id = _lb(db)
    assert db.run_sync(store.record_health, "srv_node", _report(db, lb_id, 1, "healthy", "healthy"))
    assert _row(db, lb_id)["state"] == "pending_apply"  # not applied yet: health alone does not decide
    db.run_sync(store.record_outcome, lb_id, LbApplyOutcome(id=lb_id, revision=1, state="active"))
    assert _row(db, lb_id)["state"] == "active"
    db.run_sync(store.record_health, "srv_node", _report(db, lb_id, 1, "healthy", "unhealthy"))
    row = _row(db, lb_id)
    assert row["state"] == "degraded" and row["state_error"] == "unhealthy backend: 10.0.0.1:8081"
    backends = db.run_sync(store.backends_of, [lb_id])[lb_id]
    assert [b["health"] for b in backends] == ["healthy", "unhealthy"] and all(b["last_check_at"] for b in backends)
    db.run_sync(store.record_health, "srv_node", _report(db, lb_id, 1, "healthy", "draining"))
    assert (_row(db, lb_id)["state"], _row(db, lb_id)["state_error"]) == ("active", None)


def test_a_report_of_another_revision_still_updates_backends(db: Database) -> None:
    lb_id = _lb(db)
    db.run_sync(store.record_outcome, lb_id, LbApplyOutcome(id=lb_id, revision=1, state="active"))
    db.run_sync(store.bump, lb_id)
    db.run_sync(store.record_health, "srv_node", _report(db, lb_id, 1, "unhealthy", "healthy"))
    backends = db.run_sync(store.backends_of, [lb_id])[lb_id]
    assert [b["health"] for b in backends] == ["unhealthy", "healthy"]
    assert _row(db, lb_id)["state"] == "pending_apply"  # the current revision waits for its own apply


def test_an_empty_pool_reads_degraded(db: Database) -> None:
    lb_id = _lb(db, backends=0)
    db.run_sync(store.record_outcome, lb_id, LbApplyOutcome(id=lb_id, revision=1, state="active"))
    assert (_row(db, lb_id)["state"], _row(db, lb_id)["state_error"]) == ("degraded", "the pool has no backends")


def test_another_node_cannot_report_for_a_load_balancer(db: Database) -> None:
    lb_id = _lb(db)
    assert not db.run_sync(store.record_health, "srv_other", _report(db, lb_id, 1, "unhealthy", "unhealthy"))
    assert {b["health"] for b in db.run_sync(store.backends_of, [lb_id])[lb_id]} == {None}


async def _no_agent(token: str) -> str | None:
    return None


@pytest.mark.anyio
async def test_an_apply_taken_back_after_a_restart_reads_the_outcome_printed_before_it(db: Database) -> None:
    """The control plane restarted while its node ran an `lb.apply`: the outcome line reached the
    database before the restart, the rest never comes (the agent is gone past the grace period).
    The outcome hook still reads what the node said."""
    lb_id = _lb(db)
    spec = db.run_sync(store.spec_of, lb_id).model_dump(mode="json")
    job = db.run_sync(
        job_store.create_job,
        org_id="org_1",
        server_id="srv_node",
        kind="lb.apply",
        args=spec,
        argv=[],
        created_by=None,
        idempotency_key=None,
        status="running",
    )
    outcome = LbApplyOutcome(id=lb_id, revision=1, state="active").model_dump_json()
    before_restart = [
        Run(1, "stderr", now_iso(), ["web: revision 1 serving on haproxy"]),
        Run(2, "stdout", now_iso(), [outcome]),
    ]
    db.run_sync(job_store.insert_lines, job["id"], before_restart)

    hub = AgentHub(authenticate=_no_agent)
    runner = JobRunner(db, hub, grace_s=0.1)
    runner.on_finish("lb.apply", LbReports(db, hub).on_apply_finished)
    async with anyio.create_task_group() as group:
        runner.bind(group)
        await runner.resume_unfinished(lambda kind: False)
    assert db.run_sync(job_store.get_job, "org_1", job["id"])["status"] == "interrupted"
    row = _row(db, lb_id)
    assert (row["state"], row["applied_revision"], row["state_error"]) == ("active", 1, None)


def test_the_nodes_runtime_figures_and_listen_port_are_stored_and_an_older_agents_report_still_reads(
    db: Database,
) -> None:
    lb_id = _lb(db)
    first, second = db.run_sync(store.backends_of, [lb_id])[lb_id]
    db.run_sync(store.record_outcome, lb_id, LbApplyOutcome(id=lb_id, revision=1, state="active"))
    runtime = {"status": "DRAIN", "changed_at": now_iso(), "check_failures": 2, "down_count": 1, "weight": 7,
               "drift": "weight 7 on the node, 1 defined", "from_a_newer_agent": True}  # fmt: skip
    report = LbHealthReport.model_validate(
        {
            "id": lb_id,
            "revision": 1,
            "listen_port": 18471,
            "backends": [
                {"id": first["id"], "health": "healthy", "runtime": runtime},
                {"id": second["id"], "health": "healthy"},  # as an older agent says it
            ],
        }
    )
    assert db.run_sync(store.record_health, "srv_node", report)
    assert _row(db, lb_id)["listen_port"] == 18471
    rows = {b["id"]: b for b in db.run_sync(store.backends_of, [lb_id])[lb_id]}
    stored = routes.backend_model(rows[first["id"]]).runtime
    assert stored is not None and (stored.status, stored.weight, stored.drift) == ("DRAIN", 7, runtime["drift"])
    assert routes.backend_model(rows[second["id"]]).runtime is None
    # A report without the port (an older agent) leaves the one known.
    older = LbHealthReport.model_validate({"id": lb_id, "revision": 1, "backends": []})
    assert db.run_sync(store.record_health, "srv_node", older)
    assert _row(db, lb_id)["listen_port"] == 18471
