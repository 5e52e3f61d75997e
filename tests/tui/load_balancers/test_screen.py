"""The load-balancer screen on the real stack (`fleetdeck local`): the hatop keys, checked through
the API; the action menus, the new/edit form, deletes; and what the screen shows at 80x24,
compared with a stored text snapshot (`FLEETDECK_UPDATE_SNAPSHOTS=1` rewrites it).

Each test works in an org of its own (a full server without agent as the node, so every change
stays `pending_apply`, and lite servers as backends), so the screen shows only its load balancers.
Trio work is not awaited by `pilot.pause()`: `wait_for` polls until the trio side has delivered.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, get_args

import pytest
from textual.pilot import Pilot
from textual.widgets import Checkbox, Input, OptionList, Select, Static

from contract.job_kinds.lb import (
    Algorithm,
    BackendReport,
    BackendRuntime,
    BackendStats,
    Engine,
    LbApplyOutcome,
    LbHealthReport,
)
from contract.load_balancers import Backend, LoadBalancer
from control_plane.load_balancers import store
from control_plane.storage import Database
from tests.conftest import Stack
from tests.helpers import wait_for
from tests.helpers.load_balancers import AgentlessOrg, new_org
from tests.helpers.snapshots import SNAPSHOTS, screen_text
from tests.helpers.snapshots import UPDATE as UPDATE_SNAPSHOTS
from tests.helpers.tui import open_screen, pick, run, type_at_once
from tui.app import FleetdeckApp
from tui.help import HelpScreen
from tui.load_balancers.conflict import LbConflictDialog
from tui.load_balancers.form import ALGORITHMS, ENGINES, LbFormDialog
from tui.load_balancers.menu import ActionMenu
from tui.load_balancers.screen import LoadBalancersScreen, drain_preview
from tui.load_balancers.tables import LbTable, PoolTable, fit_widths, shown_columns
from tui.servers.screen import ServerListScreen
from tui.widgets.dialogs import ConfirmDialog


@pytest.fixture
def org(stack: Stack) -> AgentlessOrg:
    return new_org(stack)


# --- moving around ----------------------------------------------------------------------------------


def shown_weight(screen: LoadBalancersScreen, backend_id: str) -> str:
    return str(screen.query_one(PoolTable).get_cell(backend_id, "weight"))


def notifications(app: FleetdeckApp) -> list[str]:
    return [n.message for n in app._notifications]


async def open_new_form(pilot: Pilot[Any], screen: LoadBalancersScreen) -> LbFormDialog:
    """`n` once the org's four servers are listed: the form of a new load balancer."""
    await wait_for(pilot, lambda: len(screen.servers) == 4)
    await pilot.press("n")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, LbFormDialog))
    form = pilot.app.screen
    assert isinstance(form, LbFormDialog)
    return form


# --- the keys, their effect seen through the API ------------------------------------------------------


def test_weight_keys_change_the_weight_within_1_to_256_and_r_restores_it(org: AgentlessOrg) -> None:
    lb = org.create_lb("shop", ["app-1", "app-2"])
    backend = lb.backends[0]
    app = org.app()

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        await pick(pilot, screen, lb.id, backend.id)

        def weight() -> int | None:
            found = org.backend(lb.id, backend.id)
            return found.weight if found else None

        await pilot.press("plus")
        await wait_for(pilot, lambda: weight() == 2)
        await pilot.press("right_square_bracket")
        await wait_for(pilot, lambda: weight() == 12)
        await pilot.press("ctrl+down")
        await wait_for(pilot, lambda: weight() == 2)
        await pilot.press("ctrl+up")
        await wait_for(pilot, lambda: weight() == 12)
        await pilot.press("left_square_bracket", "minus")
        await wait_for(pilot, lambda: weight() == 1)
        await wait_for(pilot, lambda: shown_weight(screen, backend.id) == "1")

        # Quick presses: each adds to the one before, the last one wins.
        await pilot.press(*["plus"] * 5)
        await wait_for(pilot, lambda: weight() == 6 and shown_weight(screen, backend.id) == "6")

        # At the bounds nothing is sent, and the screen says why.
        revision = org.lb(lb.id).revision
        await pilot.press("minus", "ctrl+down")
        await wait_for(pilot, lambda: weight() == 1)
        await pilot.press("minus")
        await wait_for(pilot, lambda: any("already 1" in n for n in notifications(app)))
        assert org.lb(lb.id).revision == revision + 2
        for _ in range(26):
            await pilot.press("ctrl+up")
        await wait_for(pilot, lambda: weight() == 256)

        # `r`: the weight the backend had when the screen opened.
        await pilot.press("r")
        await wait_for(pilot, lambda: weight() == 1 and shown_weight(screen, backend.id) == "1")
        # The other backend never moved.
        assert org.backend(lb.id, lb.backends[1].id) == lb.backends[1].model_copy(
            update={"health": org.backend(lb.id, lb.backends[1].id).health}  # type: ignore[union-attr]
        )

    run(app, scenario)


def test_drain_asks_first_with_what_stays_in_rotation_and_d_again_undrains(org: AgentlessOrg) -> None:
    lb = org.create_lb("shop", ["app-1", "app-2", "app-3"])
    backend = lb.backends[1]
    app = org.app()

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        await pick(pilot, screen, lb.id, backend.id)

        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        dialog = app.screen
        assert isinstance(dialog, ConfirmDialog)
        assert dialog.title_text == "Drain app-2:8080 from shop?"  # a backend is a (server, port) pair
        # No agent probes these backends: none is healthy, and the preview says so.
        assert "No healthy backend stays in rotation (none is healthy now)" in dialog.text
        await pilot.press("n")  # refused: nothing changes
        await wait_for(pilot, lambda: app.screen is screen)
        assert org.backend(lb.id, backend.id).drained is False  # type: ignore[union-attr]

        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await wait_for(pilot, lambda: org.backend(lb.id, backend.id).drained is True)  # type: ignore[union-attr]
        await wait_for(pilot, lambda: str(screen.query_one(PoolTable).get_cell(backend.id, "status")) == "draining")

        # Undrain: no question, back into rotation.
        await pilot.press("d")
        await wait_for(pilot, lambda: org.backend(lb.id, backend.id).drained is False)  # type: ignore[union-attr]
        assert app.screen is screen

    run(app, scenario)


def report_from_the_node(
    org: AgentlessOrg, lb: LoadBalancer, healths: dict[str, tuple[str, BackendStats | None]]
) -> None:
    """What the node would report over its link, stored by the control plane's own ingestion
    (`store.record_outcome`, `store.record_health`) in the stack's database: this org's node has
    no agent, and health is what the pool shows."""
    reports = [
        BackendReport(id=backend_id, health=health, last_check_at=datetime.now(UTC), stats=stats)
        for backend_id, (health, stats) in healths.items()
    ]
    store_report(org, lb, LbHealthReport(id=lb.id, revision=lb.revision, backends=reports))


def store_report(org: AgentlessOrg, lb: LoadBalancer, report: LbHealthReport) -> None:
    """`report` as the control plane stores a node's (after an apply of the current revision)."""
    database = Database(org.stack.db_url)
    try:
        database.run_sync(store.record_outcome, lb.id, LbApplyOutcome(id=lb.id, revision=lb.revision, state="active"))
        assert database.run_sync(store.record_health, org.node, report)
    finally:
        database.dispose()


def test_the_pool_follows_the_nodes_reports_in_place_and_the_last_healthy_backend_needs_two_yeses(
    org: AgentlessOrg,
) -> None:
    lb = org.create_lb("shop", ["app-1", "app-2"])
    first, second = lb.backends
    app = org.app()

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        await pick(pilot, screen, lb.id, second.id)
        pool = screen.query_one(PoolTable)

        def cell(backend_id: str, column: str) -> str:
            return str(pool.get_cell(backend_id, column))

        assert (cell(first.id, "sessions"), cell(first.id, "rate"), cell(first.id, "changed")) == ("—", "—", "—")
        stats = BackendStats(current_sessions=3, total_requests=120, request_rate=4.5)
        report_from_the_node(org, lb, {first.id: ("healthy", stats), second.id: ("unhealthy", None)})
        await wait_for(pilot, lambda: cell(first.id, "status") == "healthy")  # an older agent: no runtime
        assert (cell(first.id, "sessions"), cell(first.id, "rate")) == ("3/—", "4.5")
        assert (cell(second.id, "sessions"), cell(second.id, "rate")) == ("—", "—")  # none reported: none shown
        assert pool.cursor_key == second.id, "a refresh keeps the cursor on its row"
        await wait_for(pilot, lambda: "1/2 backends healthy" in screen_text(app))

        # app-1 is the last healthy backend: a drain asks twice, and No at the second keeps it.
        pool.move_cursor(row=pool.get_row_index(first.id))
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        assert "app-1:8080 is the last healthy backend" in app.screen.text  # type: ignore[attr-defined]
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog) and "Really" in app.screen.title_text)
        await pilot.press("n")
        await wait_for(pilot, lambda: app.screen is screen)
        assert org.backend(lb.id, first.id).drained is False  # type: ignore[union-attr]
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog) and "Really" in app.screen.title_text)
        await pilot.press("y")
        await wait_for(pilot, lambda: org.backend(lb.id, first.id).drained is True)  # type: ignore[union-attr]

    run(app, scenario)


def test_the_pool_shows_hatops_figures_the_port_listened_on_and_drift_until_a(org: AgentlessOrg) -> None:
    """Point 9/10 of issue 25: each `server:port` row shows what its node reported (HAProxy's
    figures; an nginx-like backend without traffic figures shows dashes, never a guess); a weight
    that differs on the node is `≠` with a drift line, and `a` dispatches the apply that puts it back."""
    lb = org.create_lb("shop", ["app-1", "app-2", "app-3"])
    first, second, third = lb.backends
    app = org.app()
    now = datetime.now(UTC)
    stats = BackendStats(
        current_sessions=3, total_requests=900, request_rate=4.5, max_sessions=12,
        bytes_in=1500, bytes_out=2_300_000, connection_errors=1, response_errors=2,
    )  # fmt: skip
    report = LbHealthReport(
        id=lb.id,
        revision=lb.revision,
        listen_port=18471,
        backends=[
            BackendReport(
                id=first.id, health="healthy", last_check_at=now, stats=stats,
                runtime=BackendRuntime(status="UP", changed_at=now - timedelta(minutes=3), check_failures=4,
                                       down_count=1, weight=7, drift="weight 7 on the node, 1 defined"),
            ),
            BackendReport(
                id=second.id, health="healthy", last_check_at=now,  # failing checks, still in rotation
                runtime=BackendRuntime(status="UP", going="down", changed_at=now, check_failures=9, down_count=2),
            ),
            BackendReport(
                id=third.id, health="healthy", last_check_at=now,
                runtime=BackendRuntime(status="MAINT", changed_at=now - timedelta(hours=2), check_failures=0,
                                       down_count=0, weight=1, drift="in maintenance on the node"),
            ),
        ],
    )  # fmt: skip

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        await pick(pilot, screen, lb.id, first.id)
        pool = screen.query_one(PoolTable)

        def row(backend_id: str) -> list[str]:
            return [str(pool.get_cell(backend_id, key)) for key in pool.columns]

        assert row(first.id)[:2] == ["app-1:8080", "unhealthy"]  # nothing reported yet: never checked
        store_report(org, lb, report)
        await wait_for(pilot, lambda: row(first.id)[1] == "UP")
        assert row(first.id) == ["app-1:8080", "UP", "7≠1", "3m", "4/1", "3/12", "1.5K/2.3M", "3", "4.5"]
        assert row(second.id) == ["app-2:8080", "UP ↓", "1", row(second.id)[3], "9/2", "—", "—", "—", "—"]
        assert row(third.id)[1:4] == ["MAINT", "1", "2h"]
        status = str(screen.query_one("#lb-status", Static).render())
        assert status == "≠ drift app-1:8080: weight 7 on the node, 1 defined (+1) · a restores it"
        assert str(screen.query_one(LbTable).get_cell(lb.id, "port")) == "18471"
        assert "port 18471 (its 80, mapped)" in str(screen.query_one("#lb-pool-bar", Static).render())

        jobs_before = len(org.get(f"/v1/servers/{org.node}/jobs")["jobs"])
        await pilot.press("a")
        await wait_for(pilot, lambda: any("Applying shop again" in n for n in notifications(app)))
        assert len(org.get(f"/v1/servers/{org.node}/jobs")["jobs"]) == jobs_before + 1

    run(app, scenario)


def test_a_wide_pool_draws_each_backends_requests_and_new_errors_over_time(org: AgentlessOrg) -> None:
    """Point 11 of issue 25: where the width allows (not at 80 columns), each backend has a
    sparkline of its request rate and one of its new errors, a sample per listing; a backend whose
    engine has no traffic figures (nginx) shows a dash."""
    lb = org.create_lb("shop", ["app-1", "app-2"])
    first, second = lb.backends
    app = org.app()

    def report(rate: float, errors: int) -> LbHealthReport:
        now = datetime.now(UTC)
        stats = BackendStats(current_sessions=1, total_requests=10, request_rate=rate, connection_errors=errors,
                             response_errors=0)  # fmt: skip
        return LbHealthReport(id=lb.id, revision=lb.revision, backends=[
            BackendReport(id=first.id, health="healthy", last_check_at=now, stats=stats),
            BackendReport(id=second.id, health="healthy", last_check_at=now),
        ])  # fmt: skip

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        await pick(pilot, screen, lb.id, first.id)
        pool = screen.query_one(PoolTable)
        assert [str(key.value) for key in pool.columns][-2:] == ["rate_trend", "error_trend"]

        def trend(backend_id: str, key: str) -> str:
            return str(pool.get_cell(backend_id, key)).strip()

        # Three reports, each listed several times: one sample each.
        for rate, errors, drawn in [(1.0, 0, "█"), (8.0, 0, "▂█"), (2.0, 5, "▂█▃")]:
            store_report(org, lb, report(rate, errors))
            await wait_for(pilot, lambda drawn=drawn: trend(first.id, "rate_trend") == drawn)  # type: ignore[misc]
        assert trend(first.id, "error_trend") == "▁█"  # no sample before the first report; 0, then 5 new
        assert trend(second.id, "rate_trend") == "—" and trend(second.id, "error_trend") == "—"

        await pilot.resize_terminal(80, 24)
        await wait_for(pilot, lambda: "rate_trend" not in [str(key.value) for key in pool.columns])
        assert [str(key.value) for key in pool.columns][-1] == "rate"  # the figures stay, the pictures go

    run(app, scenario, size=(200, 50))


def test_the_form_adds_several_ports_of_a_server_and_edits_a_backends_port(org: AgentlessOrg) -> None:
    app = org.app()
    app_1 = org.backends["app-1"]

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        form = await open_new_form(pilot, screen)
        await pilot.press(*"ports")
        form.query_one("#lb-node", Select).value = org.node
        form.query_one(f"#pick-{app_1}", Checkbox).value = True
        ports = form.query_one(f"#port-{app_1}", Input)
        ports.value = ""
        ports.focus()
        await pilot.press(*"8080, 8081 x8082")  # the letter is refused as typed
        assert ports.value == "8080, 8081 8082"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.screen is screen)
        created = LoadBalancer.model_validate(org.get("/v1/load-balancers")["load_balancers"][0])
        assert sorted((b.server_id, b.port) for b in created.backends) == [(app_1, 8080), (app_1, 8081), (app_1, 8082)]
        pool = screen.query_one(PoolTable)
        await wait_for(pilot, lambda: pool.row_count == 3)
        assert sorted(str(pool.get_cell(b.id, "backend")) for b in created.backends) == [
            "app-1:8080", "app-1:8081", "app-1:8082"
        ]  # fmt: skip

        # Edit: a backend's port is changed in place; the same (server, port) twice is refused.
        moved = next(b for b in created.backends if b.port == 8082)
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, LbFormDialog))
        form = app.screen
        assert isinstance(form, LbFormDialog)
        form.query_one(f"#be-port-{moved.id}", Input).value = "9090"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.screen is screen)
        assert org.backend(created.id, moved.id).port == 9090  # type: ignore[union-attr]
        await wait_for(pilot, lambda: str(pool.get_cell(moved.id, "backend")) == "app-1:9090")

        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, LbFormDialog))
        form = app.screen
        assert isinstance(form, LbFormDialog)
        form.query_one(f"#be-port-{moved.id}", Input).value = "8080"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "-error" in form.query_one("#status", Static).classes)
        assert "the pool has a backend on port 8080 of that server already" in str(
            form.query_one("#status", Static).render()
        )
        assert app.screen is form and org.backend(created.id, moved.id).port == 9090  # type: ignore[union-attr]

    run(app, scenario)


def test_the_drain_preview_counts_the_healthy_backends_that_stay() -> None:
    healthy = Backend(id="b1", server_id="s1", address="10.0.0.1", health="healthy")
    assert drain_preview("app-1", healthy, ["app-2", "app-3"]).endswith(
        "2 healthy backends stay in rotation: app-2, app-3."
    )
    assert drain_preview("app-1", healthy, ["app-2"]).endswith("1 healthy backend stays in rotation: app-2.")
    assert "app-1 is the last healthy backend" in drain_preview("app-1", healthy, [])
    many = [f"app-{n}" for n in range(2, 9)]
    assert drain_preview("app-1", healthy, many).endswith("app-2, app-3, app-4, app-5 and 3 more.")


def test_enter_opens_the_row_actions_and_delete_removes_a_backend_then_the_load_balancer(org: AgentlessOrg) -> None:
    lb = org.create_lb("shop", ["app-1", "app-2"])
    first, second = lb.backends
    app = org.app()

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        await pick(pilot, screen, lb.id, first.id)

        # Enter on a backend: its actions; "Weight +10" does what `]` does.
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ActionMenu))
        menu = app.screen.query_one(OptionList)
        menu.highlighted = [menu.get_option_at_index(i).id for i in range(menu.option_count)].index("weight(10)")
        await pilot.press("enter")
        await wait_for(pilot, lambda: org.backend(lb.id, first.id).weight == 11)  # type: ignore[union-attr]

        # Delete with the pool focused: that backend, once confirmed (Enter is the safe No).
        await pilot.press("delete")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is screen)
        assert org.backend(lb.id, first.id) is not None
        await pilot.press("delete")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await wait_for(pilot, lambda: [b.id for b in org.lb(lb.id).backends] == [second.id])
        await wait_for(pilot, lambda: [str(k.value) for k in screen.query_one(PoolTable).rows] == [second.id])

        # Enter on the load balancer: its actions; "Re-apply" starts a job.
        screen.query_one(LbTable).focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ActionMenu))
        await pilot.press("enter")  # the first action: Re-apply
        await wait_for(pilot, lambda: any("Applying shop again" in n for n in notifications(app)))

        # Delete with the load balancers focused: the load balancer.
        await pilot.press("delete")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await wait_for(pilot, lambda: org.lb_gone(lb.id))
        await wait_for(pilot, lambda: not screen.lbs and screen.query_one(LbTable).row_count == 0)
        assert "No load balancer yet" in str(screen.query_one("#lb-pool-bar", Static).render())

    run(app, scenario)


def test_n_creates_a_load_balancer_and_e_edits_it_with_engine_and_node_locked(org: AgentlessOrg) -> None:
    app = org.app()

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        form = await open_new_form(pilot, screen)
        await pilot.press(*"web")
        form.query_one("#lb-node", Select).value = org.node
        form.query_one("#lb-engine", Select).value = "nginx"
        form.query_one("#lb-algo", Select).value = "least_conn"
        form.query_one("#lb-port", Select).value = 443
        await pilot.pause()
        hostname = form.query_one("#lb-hostname", Input)
        assert not hostname.disabled
        form.query_one(f"#pick-{org.backends['app-1']}", Checkbox).value = True
        form.query_one(f"#pick-{org.backends['app-3']}", Checkbox).value = True
        form.query_one(f"#weight-{org.backends['app-3']}", Input).value = "7"

        # TLS without a hostname: refused in the form, which stays open.
        await pilot.press("ctrl+s")
        assert app.screen is form
        assert "hostname" in str(form.query_one("#status", Static).render())
        hostname.value = "www.example.com"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.screen is screen)

        listed = org.get("/v1/load-balancers")["load_balancers"]
        assert [lb["name"] for lb in listed] == ["web"]
        created = LoadBalancer.model_validate(listed[0])
        assert (created.engine, created.algorithm, created.port, created.tls, created.hostname) == (
            "nginx", "least_conn", 443, True, "www.example.com"
        )  # fmt: skip
        assert {(b.server_id, b.port, b.weight) for b in created.backends} == {
            (org.backends["app-1"], 8080, 1),
            (org.backends["app-3"], 8080, 7),
        }
        await wait_for(pilot, lambda: screen.highlighted_lb is not None and screen.highlighted_lb.id == created.id)

        # Edit: node and engine locked; only what changed is sent.
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, LbFormDialog) and app.screen.loaded)
        form = app.screen
        assert isinstance(form, LbFormDialog)
        assert form.query_one("#lb-node", Select).disabled and form.query_one("#lb-engine", Select).disabled
        form.query_one("#lb-algo", Select).value = "ip_hash"
        form.query_one("#lb-check-path", Input).value = "/healthz"
        # A backend added from the edit form: ticked, with its own port.
        form.query_one(f"#pick-{org.backends['app-2']}", Checkbox).value = True
        form.query_one(f"#port-{org.backends['app-2']}", Input).value = "9000"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.screen is screen)
        edited = org.lb(created.id)
        assert (edited.algorithm, edited.health_check.path, edited.revision) == ("ip_hash", "/healthz", 3)
        assert (edited.engine, edited.node_server_id, edited.hostname) == ("nginx", org.node, "www.example.com")
        assert (org.backends["app-2"], 9000, 1) in {(b.server_id, b.port, b.weight) for b in edited.backends}
        assert len(edited.backends) == 3

        # A name the control plane refuses (taken): its message in the form.
        other = org.create_lb("taken", ["app-2"])
        await wait_for(pilot, lambda: other.id in screen.lbs)
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, LbFormDialog) and app.screen.loaded)
        form = app.screen
        form.query_one("#lb-name", Input).value = "taken"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "-error" in form.query_one("#status", Static).classes)
        assert app.screen is form and org.lb(created.id).name == "web"

    run(app, scenario)


def change_through_the_api(org: AgentlessOrg, path: str, body: dict[str, Any]) -> None:
    """Someone else's change (another user, the CLI), made while the screen is open."""
    with org.stack.http(org.token) as http:
        answer = http.patch(path, json=body)
        assert answer.status_code == 200, answer.text


async def open_edit_form(pilot: Pilot[Any], screen: LoadBalancersScreen, lb_id: str) -> LbFormDialog:
    """`e` on the load balancer `lb_id`: its form, once it shows the definition read."""
    await wait_for(pilot, lambda: lb_id in screen.lbs and len(screen.servers) == 4)
    await pick(pilot, screen, lb_id)
    await pilot.press("e")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, LbFormDialog) and pilot.app.screen.loaded)
    form = pilot.app.screen
    assert isinstance(form, LbFormDialog)
    return form


async def save_into_a_conflict(pilot: Pilot[Any], form: LbFormDialog) -> LbConflictDialog:
    await pilot.press("ctrl+s")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, LbConflictDialog))
    dialog = pilot.app.screen
    assert isinstance(dialog, LbConflictDialog)
    return dialog


def test_e_edits_the_definition_as_it_is_now_and_never_saves_over_a_change_made_meanwhile(org: AgentlessOrg) -> None:
    """Changed by someone else after the screen listed it, `e` shows the definition as the control
    plane has it; changed again while the form is open, ctrl+s saves nothing over it and shows
    theirs beside mine; Esc goes back to the form with mine, o sends my change over theirs (their
    change of a field I left alone stays)."""
    lb = org.create_lb("fresh", ["app-1"])
    app = org.app()
    route = f"/v1/load-balancers/{lb.id}"

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        await wait_for(pilot, lambda: lb.id in screen.lbs)
        change_through_the_api(org, route, {"algorithm": "least_conn"})
        assert screen.lbs[lb.id].algorithm == "round_robin"  # what the screen listed
        form = await open_edit_form(pilot, screen, lb.id)
        assert form.query_one("#lb-algo", Select).value == "least_conn"
        assert app.focused is form.query_one("#lb-name", Input)

        change_through_the_api(org, route, {"health_check": {"path": "/theirs", "interval_s": 30}})
        form.query_one("#lb-check-path", Input).value = "/mine"
        dialog = await save_into_a_conflict(pilot, form)
        assert {(d.field, d.theirs, d.yours) for d in dialog.differences} == {
            ("Check path", "/theirs", "/mine"),
            ("Every (s)", "30", "10"),
        }
        assert (dialog.read_revision, dialog.current_revision) == (2, 3)
        now = org.lb(lb.id)
        assert (now.revision, now.health_check.path, now.health_check.interval_s) == (3, "/theirs", 30)

        # Esc: back to the form, mine as typed; nothing sent.
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is form)
        assert form.query_one("#lb-check-path", Input).value == "/mine"
        assert "changed meanwhile" in str(form.query_one("#status", Static).render())
        assert org.lb(lb.id).revision == 3

        # o: my change (the path) over theirs; their interval, which I did not change, stays.
        await save_into_a_conflict(pilot, form)
        await pilot.press("o")
        await wait_for(pilot, lambda: app.screen is screen)
        now = org.lb(lb.id)
        assert (now.revision, now.algorithm, now.health_check.path, now.health_check.interval_s) == (
            4, "least_conn", "/mine", 30
        )  # fmt: skip

    run(app, scenario)


def test_r_in_the_conflict_reloads_theirs_into_the_form_and_saves_over_it(org: AgentlessOrg) -> None:
    """Reload: my change is dropped, the form shows theirs (the pool too) and saves over their
    revision from then on."""
    lb = org.create_lb("reload", ["app-1"])
    app = org.app()
    route = f"/v1/load-balancers/{lb.id}"

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        form = await open_edit_form(pilot, screen, lb.id)
        with org.stack.http(org.token) as http:  # theirs: a new name and a backend more
            body = {"server_id": org.backends["app-2"], "port": 9000}
            assert http.post(f"{route}/backends", json=body).status_code == 201
        change_through_the_api(org, route, {"name": "theirs"})
        form.query_one("#lb-name", Input).value = "mine"
        form.query_one("#lb-algo", Select).value = "ip_hash"
        dialog = await save_into_a_conflict(pilot, form)
        assert {(d.field, d.theirs, d.yours) for d in dialog.differences} == {
            ("Name", "theirs", "mine"),
            ("Algorithm", "round robin", "IP hash"),
            ("Pool", "app-1:8080, app-2:9000", "app-1:8080"),
        }

        await pilot.press("r")
        await wait_for(pilot, lambda: app.screen is form and form.loaded)
        assert form.query_one("#lb-name", Input).value == "theirs"
        assert form.query_one("#lb-algo", Select).value == "round_robin"
        assert len(form.query(".lb-form--pool-name")) == 2  # their backend is in the pool shown
        now = org.lb(lb.id)
        assert (now.name, now.algorithm, now.revision) == ("theirs", "round_robin", 3)

        form.query_one("#lb-algo", Select).value = "least_conn"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.screen is screen)
        now = org.lb(lb.id)
        assert (now.name, now.algorithm, now.revision, len(now.backends)) == ("theirs", "least_conn", 4, 2)

    run(app, scenario)


def test_ctrl_s_and_the_conflicts_key_typed_at_once_reach_the_dialog(org: AgentlessOrg) -> None:
    """`ctrl+s o` in one go (a paste, tmux send-keys): the `o` waits for the save's answer and
    overwrites in the conflict dialog; it never lands in the form's focused field."""
    lb = org.create_lb("typed", ["app-1"])
    app = org.app()
    route = f"/v1/load-balancers/{lb.id}"

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        form = await open_edit_form(pilot, screen, lb.id)
        path = form.query_one("#lb-check-path", Input)
        path.value = "/mine"
        path.focus()
        await pilot.pause()
        change_through_the_api(org, route, {"algorithm": "least_conn"})
        type_at_once(app, "ctrl+s", "o")
        await wait_for(pilot, lambda: app.screen is screen)
        now = org.lb(lb.id)
        assert (now.health_check.path, now.algorithm, now.revision) == ("/mine", "least_conn", 3)

    run(app, scenario)


def test_pool_keys_act_on_the_revision_shown_and_say_when_it_changed_meanwhile(org: AgentlessOrg) -> None:
    """A weight key or a drain confirmed after someone else changed the load balancer does
    nothing: the screen says so and shows it anew, and the same key then acts on it."""
    lb = org.create_lb("pool", ["app-1", "app-2"])
    backend = lb.backends[0]
    app = org.app()
    route = f"/v1/load-balancers/{lb.id}"

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        await pick(pilot, screen, lb.id, backend.id)
        await pilot.press("plus", "plus")  # my own changes: each over the revision the one before made
        await wait_for(pilot, lambda: org.backend(lb.id, backend.id).weight == 3)  # type: ignore[union-attr]
        await wait_for(pilot, lambda: shown_weight(screen, backend.id) == "3" and not screen._changing)

        change_through_the_api(org, f"{route}/backends/{backend.id}", {"weight": 50})
        await pilot.press("plus")
        await wait_for(pilot, lambda: any("changed meanwhile" in n for n in notifications(app)))
        assert org.backend(lb.id, backend.id).weight == 50  # type: ignore[union-attr]
        await wait_for(pilot, lambda: shown_weight(screen, backend.id) == "50")  # shown anew
        await pilot.press("plus")
        await wait_for(pilot, lambda: org.backend(lb.id, backend.id).weight == 51)  # type: ignore[union-attr]

        # A drain confirmed after the load balancer changed under its question.
        await wait_for(pilot, lambda: not screen._changing and screen.lbs[lb.id].revision == org.lb(lb.id).revision)
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        change_through_the_api(org, route, {"algorithm": "least_conn"})
        app._notifications.clear()
        await pilot.press("y")
        await wait_for(pilot, lambda: any("changed meanwhile" in n for n in notifications(app)))
        assert org.backend(lb.id, backend.id).drained is False  # type: ignore[union-attr]
        await wait_for(pilot, lambda: screen.lbs[lb.id].algorithm == "least_conn")

    run(app, scenario)


def test_the_palette_and_help_reach_the_screen(org: AgentlessOrg) -> None:
    app = org.app()

    async def scenario(pilot: Pilot[Any]) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, ServerListScreen) and app.screen.servers)
        commands = [c.title for c in app.get_system_commands(app.screen)]
        assert "Go to load balancers" in commands
        app.action_go_load_balancers()
        await wait_for(pilot, lambda: isinstance(app.screen, LoadBalancersScreen))
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        described = screen_text(app)
        for words in ("Drain", "Weight +1", "Weight -10", "Restore the initial weight", "Re-apply", "Remove"):
            assert words in described

    run(app, scenario)


# --- 80x24 ----------------------------------------------------------------------------------------


def test_the_screen_at_80x24_matches_its_snapshot(stack: Stack) -> None:
    """Nothing cut that matters: names, state, the pool's columns and the footer's keys. The header
    (the org's name) is left out; the org is made fresh with fixed names."""
    org = new_org(stack, f"lbsnap-{uuid.uuid4().hex[:6]}")
    shop = org.create_lb("shop", ["app-1", "app-2", "app-3"])
    org.create_lb("api-gateway", ["app-1"], port=443, hostname="api.example.com", engine="nginx")
    app = org.app()

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        await pick(pilot, screen, shop.id)
        await wait_for(pilot, lambda: len(screen.servers) == 4 and "app-3" in screen_text(app))
        await pilot.pause()
        text = "\n".join(screen_text(app).splitlines()[1:]) + "\n"  # without the header line
        stored = SNAPSHOTS / "load_balancers_80x24.txt"
        if UPDATE_SNAPSHOTS:
            stored.parent.mkdir(parents=True, exist_ok=True)
            stored.write_text(text)
        assert text == stored.read_text(), f"the screen changed:\n{text}"
        # Every cell fits its column, but the state (its error text ends with an ellipsis).
        for table in (screen.query_one(LbTable), screen.query_one(PoolTable)):
            for column in table.columns.values():
                for row in table.rows:
                    cell = table.get_cell(row, column.key)
                    assert column.key.value == "state" or cell.cell_len <= column.width, (column.key, cell)

    run(app, scenario)


def test_column_widths_fit_the_room_and_give_the_rest_to_the_last_flexible_column() -> None:
    widths = fit_widths(LbTable.COLUMNS, {"name": 30, "node": 9, "state": 40}, 79)
    assert sum(widths.values()) + 2 * len(widths) <= 79
    assert widths["name"] >= 6 and widths["node"] >= 6
    pool = fit_widths(shown_columns(PoolTable.COLUMNS, 79), {"backend": 40}, 79)
    assert sum(pool.values()) + 2 * len(pool) <= 79 and pool["backend"] >= 10  # `server:port` at 80 columns
    wide = fit_widths(PoolTable.COLUMNS, {"backend": 5}, 199)
    assert wide["backend"] == 32  # a name is never wider: the rest stays empty
    assert [c.key for c in shown_columns(PoolTable.COLUMNS, 79)] == [c.key for c in PoolTable.COLUMNS if not c.optional]
    assert shown_columns(PoolTable.COLUMNS, 199) == PoolTable.COLUMNS


def test_the_form_offers_each_engine_and_algorithm_of_the_contract_once() -> None:
    assert [engine for _, engine in ENGINES] == list(get_args(Engine))
    assert [algorithm for _, algorithm in ALGORITHMS] == list(get_args(Algorithm))
