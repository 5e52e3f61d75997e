"""The parsers of HAProxy's answers, on output recorded from HAProxy 2.6 (Debian 12)."""

from __future__ import annotations

from agent.load_balancers.haproxy import parse_show_proc, parse_show_stat
from agent.load_balancers.health import server_healthy, server_stats
from agent.load_balancers.settings import parse_port_map

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
