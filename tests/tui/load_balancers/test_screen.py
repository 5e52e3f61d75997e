"""The load-balancer screen on the real stack (`fleetdeck local`): the hatop keys, checked through
the API; the action menus, the new/edit form, deletes; and what the screen shows at 80x24,
compared with a stored text snapshot (`FLEETDECK_UPDATE_SNAPSHOTS=1` rewrites it).

Each test works in an org of its own (a full server without agent as the node, so every change
stays `pending_apply`, and lite servers as backends), so the screen shows only its load balancers.
Trio work is not awaited by `pilot.pause()`: `wait_for` polls until the trio side has delivered.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, get_args

import pytest
from textual.pilot import Pilot
from textual.widgets import Checkbox, Input, OptionList, Select, Static

from contract.job_kinds.lb import Algorithm, BackendReport, BackendStats, Engine, LbApplyOutcome, LbHealthReport
from contract.load_balancers import Backend, LoadBalancer
from control_plane.load_balancers import store
from control_plane.storage import Database
from tests.conftest import Stack
from tests.helpers import wait_for
from tests.helpers.load_balancers import AgentlessOrg, new_org
from tests.helpers.snapshots import SNAPSHOTS, screen_text
from tests.helpers.snapshots import UPDATE as UPDATE_SNAPSHOTS
from tests.helpers.tui import open_screen, pick, run
from tui.app import FleetdeckApp
from tui.help import HelpScreen
from tui.load_balancers.form import ALGORITHMS, ENGINES, LbFormDialog
from tui.load_balancers.menu import ActionMenu
from tui.load_balancers.screen import LoadBalancersScreen, drain_preview
from tui.load_balancers.tables import LbTable, PoolTable, fit_widths
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
        assert dialog.title_text == "Drain app-2 from shop?"
        # No agent probes these backends: none is healthy, and the preview says so.
        assert "No healthy backend stays in rotation (none is healthy now)" in dialog.text
        await pilot.press("n")  # refused: nothing changes
        await wait_for(pilot, lambda: app.screen is screen)
        assert org.backend(lb.id, backend.id).drained is False  # type: ignore[union-attr]

        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        await wait_for(pilot, lambda: org.backend(lb.id, backend.id).drained is True)  # type: ignore[union-attr]
        await wait_for(pilot, lambda: str(screen.query_one(PoolTable).get_cell(backend.id, "drained")) == "yes")
        assert str(screen.query_one(PoolTable).get_cell(backend.id, "health")) == "draining"

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
    database = Database(org.stack.db_url)
    try:
        database.run_sync(store.record_outcome, lb.id, LbApplyOutcome(id=lb.id, revision=lb.revision, state="active"))
        reports = [
            BackendReport(id=backend_id, health=health, last_check_at=datetime.now(UTC), stats=stats)
            for backend_id, (health, stats) in healths.items()
        ]
        report = LbHealthReport(id=lb.id, revision=lb.revision, backends=reports)
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

        assert (cell(first.id, "sessions"), cell(first.id, "rate"), cell(first.id, "checked")) == ("—", "—", "—")
        stats = BackendStats(current_sessions=3, total_requests=120, request_rate=4.5)
        report_from_the_node(org, lb, {first.id: ("healthy", stats), second.id: ("unhealthy", None)})
        await wait_for(pilot, lambda: cell(first.id, "health") == "healthy")
        assert (cell(first.id, "sessions"), cell(first.id, "rate")) == ("3", "4.5")
        assert cell(first.id, "checked").endswith("s")
        assert (cell(second.id, "sessions"), cell(second.id, "rate")) == ("—", "—")  # none reported: none shown
        assert pool.cursor_key == second.id, "a refresh keeps the cursor on its row"
        await wait_for(pilot, lambda: "1/2 backends healthy" in screen_text(app))

        # app-1 is the last healthy backend: a drain asks twice, and No at the second keeps it.
        pool.move_cursor(row=pool.get_row_index(first.id))
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        assert "app-1 is the last healthy backend" in app.screen.text  # type: ignore[attr-defined]
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
        await wait_for(pilot, lambda: len(screen.servers) == 4)
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, LbFormDialog))
        form = app.screen
        assert isinstance(form, LbFormDialog)
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


def test_e_edits_the_definition_as_it_is_now_and_never_saves_over_a_change_made_meanwhile(org: AgentlessOrg) -> None:
    """Changed by someone else after the screen listed it, `e` shows the definition as the control
    plane has it; changed again while the form is open, its save is refused and said, and the
    other change stays."""
    lb = org.create_lb("fresh", ["app-1"])
    app = org.app()

    def change(body: dict[str, Any]) -> None:
        with org.stack.http(org.token) as http:
            assert http.patch(f"/v1/load-balancers/{lb.id}", json=body).status_code == 200

    async def scenario(pilot: Pilot[Any]) -> None:
        screen = await open_screen(pilot)
        await wait_for(pilot, lambda: lb.id in screen.lbs)
        await pick(pilot, screen, lb.id)
        change({"algorithm": "least_conn"})
        assert screen.lbs[lb.id].algorithm == "round_robin"  # what the screen listed
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, LbFormDialog) and app.screen.loaded)
        form = app.screen
        assert isinstance(form, LbFormDialog)
        assert form.query_one("#lb-algo", Select).value == "least_conn"
        assert app.focused is form.query_one("#lb-name", Input)

        change({"health_check": {"path": "/theirs"}})
        form.query_one("#lb-check-path", Input).value = "/mine"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: "changed meanwhile" in str(form.query_one("#status", Static).render()))
        now = org.lb(lb.id)
        assert (now.algorithm, now.health_check.path) == ("least_conn", "/theirs") and app.screen is form

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
    widths = fit_widths(PoolTable.COLUMNS, {"backend": 30, "address": 9}, 79)
    assert sum(widths.values()) + 2 * len(widths) <= 79
    assert widths["backend"] >= 7 and widths["address"] >= 9
    wide = fit_widths(PoolTable.COLUMNS, {"backend": 5, "address": 9}, 199)
    assert wide["address"] == 40  # an address is never wider: the rest stays empty


def test_the_form_offers_each_engine_and_algorithm_of_the_contract_once() -> None:
    assert [engine for _, engine in ENGINES] == list(get_args(Engine))
    assert [algorithm for _, algorithm in ALGORITHMS] == list(get_args(Algorithm))
