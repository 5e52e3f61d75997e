"""The parsers of HAProxy's answers, on output recorded from HAProxy 2.6 (Debian 12)."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from agent.load_balancers.haproxy import Haproxy, parse_show_proc, parse_show_servers_state, parse_show_stat
from agent.load_balancers.health import server_healthy, server_runtime, server_stats, server_status
from agent.load_balancers.settings import LbSettings, parse_port_map
from contract.job_kinds.lb import LbBackend

SHOW_PROC = """#<PID>          <type>          <reloads>       <uptime>        <version>
1567            master          4 [failed: 2]   0d00h10m15s     2.6.12-1+deb12u4
# workers
18250           worker          2               0d00h00m08s     2.6.12-1+deb12u4
# old workers
18118           worker          3               0d00h01m02s     2.6.12-1+deb12u4
# programs

"""

SHOW_STAT = (
    "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,"
    "weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,"
    "rate_lim,rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,"
    "hrsp_other,hanafail,req_rate,req_rate_max,req_tot,\n"
    "fleetdeck_lb_lb-web,FRONTEND,,,1,3,262119,120,1,2,0,0,0,,,,,OPEN,,,,,,,,,1,2,0,,,,0,4,0,9,,,,0,120,0,0,0,0,,4,9,120,\n"
    "fleetdeck_lb_lb-web,alpha,0,0,1,2,,60,1,2,,0,,0,0,0,0,UP,1,1,0,0,0,33,0,,1,3,1,,60,,2,3,,5,L7OK,200,0,0,60,0,0,0,0,,,,60,\n"
    "fleetdeck_lb_lb-web,gamma,0,0,0,1,,40,1,2,,0,,0,0,0,0,DOWN 1/2,1,1,0,3,1,2,2,,1,3,3,,40,,2,0,,4,L4CON,,"
    "0,0,40,0,0,0,0,,,,,\n"
)


# `show servers state fleetdeck_lb_lb-web` after `set server .../alpha state drain` and `set weight .../beta 5`
SHOW_SERVERS_STATE = """1
# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port
3 fleetdeck_lb_lb-web 1 alpha 127.0.0.1 2 8 0 0 12 15 3 4 6 0 0 0 - 18081 - 0 0 - - 0
3 fleetdeck_lb_lb-web 2 beta 127.0.0.1 2 0 5 1 40 15 3 4 6 0 0 0 - 18082 - 0 0 - - 0
3 fleetdeck_lb_lb-web 3 gamma 127.0.0.1 0 1 1 1 3 8 2 0 6 0 0 0 - 18083 - 0 0 - - 0

"""  # noqa: E501


def test_show_proc_names_the_current_and_the_old_workers() -> None:
    table = parse_show_proc(SHOW_PROC)
    assert (table.master_pid, table.reloads, table.failed) == (1567, 4, 2)
    assert table.workers == {18250: 2}
    assert table.old_workers == {18118: 3}


def test_a_reload_took_when_a_new_worker_replaced_the_current_one() -> None:
    before = parse_show_proc(SHOW_PROC)
    after = parse_show_proc(SHOW_PROC.replace("18250           worker          2", "18400           worker          0"))
    assert after.took(before)
    assert not before.took(before)


def test_show_stat_rows_health_and_stats() -> None:
    rows = {row["svname"]: row for row in parse_show_stat(SHOW_STAT)}
    assert set(rows) == {"FRONTEND", "alpha", "gamma"}
    assert server_healthy(rows["alpha"]["status"]) and not server_healthy(rows["gamma"]["status"])
    stats = server_stats(rows["alpha"])
    assert (stats.current_sessions, stats.total_requests, stats.request_rate) == (1, 60, 3.0)
    assert server_stats(rows["gamma"]).total_requests == 40  # no req_tot: the sessions


def test_status_words() -> None:
    assert server_healthy("UP 1/3")  # going down, still serving
    assert not server_healthy("DOWN 1/2")  # going up, not yet
    assert not server_healthy("MAINT")
    assert server_healthy("no check")


def test_port_map() -> None:
    assert parse_port_map("80:8080,443:8443") == {80: 8080, 443: 8443}
    for bad in ("", "80", "22:2222", "80:x", "80:70000"):
        try:
            parse_port_map(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was accepted")


@pytest.mark.parametrize(
    ("text", "state", "going"),
    [
        ("UP", "UP", None),
        ("UP 1/3", "UP", "down"),
        ("DOWN", "DOWN", None),
        ("DOWN 1/2", "DOWN", "up"),
        ("DRAIN", "DRAIN", None),
        ("DRAIN 1/3", "DRAIN", "down"),
        ("DRAIN (agent)", "DRAIN", None),
        ("MAINT", "MAINT", None),
        ("MAINT (via b/s)", "MAINT", None),
        ("MAINT (resolution)", "MAINT", None),
        ("NOLB", "NOLB", None),
        ("no check", "UP", None),
    ],
)
def test_hatops_states_are_told_apart(text: str, state: str, going: str | None) -> None:
    assert server_status(text) == (state, going)


def test_show_servers_state_and_drift_from_the_definition() -> None:
    states = parse_show_servers_state(SHOW_SERVERS_STATE)
    assert (states["alpha"].weight, states["alpha"].drain, states["alpha"].maint) == (0, True, False)
    assert (states["gamma"].maint, states["gamma"].drain) == (True, False)

    def backend(name: str, weight: int = 1, drained: bool = False) -> LbBackend:
        return LbBackend(id=name, server_id=f"srv-{name}", address="127.0.0.1", weight=weight, drained=drained)

    assert states["alpha"].drift(backend("alpha", weight=3, drained=True)) is None  # drained: weight 0 and DRAIN
    assert states["alpha"].drift(backend("alpha", weight=3)) == (
        "weight 0 on the node, 3 defined; drained on the node, not in the definition"
    )
    assert states["beta"].drift(backend("beta", weight=5)) is None
    assert states["beta"].drift(backend("beta", weight=2)) == "weight 5 on the node, 2 defined"
    assert states["beta"].drift(backend("beta", weight=5, drained=True)) == (
        "weight 5 on the node, 0 defined (drained); not drained on the node (defined drained)"
    )
    assert states["gamma"].drift(backend("gamma")) == "in maintenance on the node"
    with pytest.raises(OSError):
        parse_show_servers_state("Unknown command\n")


def test_a_servers_runtime_from_its_row_keeps_its_change_time_between_polls() -> None:
    rows = {row["svname"]: row for row in parse_show_stat(SHOW_STAT)}
    at = datetime.datetime(2026, 11, 27, 12, 0, tzinfo=datetime.UTC)
    gamma = LbBackend(id="gamma", server_id="srv-gamma", address="127.0.0.1")
    first = server_runtime(rows["gamma"], None, gamma, at, None)
    assert (first.status, first.going, first.check_failures, first.down_count) == ("DOWN", "up", 3, 1)
    assert first.changed_at == at - datetime.timedelta(seconds=2) and first.drift is None
    later = server_runtime(rows["gamma"], None, gamma, at + datetime.timedelta(seconds=1), first)
    assert later.changed_at == first.changed_at  # whole seconds: the same change, not a new report
    stats = server_stats(rows["alpha"])
    assert (stats.max_sessions, stats.bytes_in, stats.bytes_out, stats.connection_errors) == (2, 1, 2, 0)


def test_only_a_change_of_weights_skips_the_reload(tmp_path: Path) -> None:
    engine = Haproxy(LbSettings(port_map={80: 8080}), tmp_path)
    engine.path("lb-web").parent.mkdir(parents=True)
    engine.path("lb-web").write_text(
        "# fleetdeck load balancer web (lb-web), revision 3: written by the agent\n"
        "backend fleetdeck_lb_lb-web\n    server alpha 127.0.0.1:8081 weight 2 check\n"
    )
    reweighted = "# fleetdeck load balancer web (lb-web), revision 4: written by the agent\n" + (
        "backend fleetdeck_lb_lb-web\n    server alpha 127.0.0.1:8081 weight 0 check\n"
    )
    moved = reweighted.replace("8081", "8082")
    assert engine.same_but_weights("lb-web", reweighted)
    assert not engine.same_but_weights("lb-web", moved)
    assert not engine.same_but_weights("lb-other", reweighted)  # no file yet: a reload starts it
