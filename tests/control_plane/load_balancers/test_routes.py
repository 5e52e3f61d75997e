"""Load balancers through the real control plane and real agents (CONTRACT.md § B): validation,
org isolation, roles, audit, revisions, the summary, dispatch of `lb.apply` (queued for an
offline node, only the newest revision run) and what the node's answer does to the state."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import AgentProcess, Stack
from tests.helpers import wait_until

pytestmark = pytest.mark.stack_variants("sqlite", "postgresql", "uvicorn")


def code(answer: httpx.Response) -> str:
    value: str = answer.json()["error"]["code"]
    return value


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_server(http: httpx.Client, kind: str = "lite", address: str | None = "127.0.0.1") -> str:
    body: dict[str, Any] = {"name": unique("srv"), "kind": kind}
    if address is not None:
        body["address"] = address
    answer = http.post("/v1/servers", json=body)
    assert answer.status_code == 201, answer.text
    server_id: str = answer.json()["server"]["id"]
    return server_id


def lb_body(node: str, backends: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "name": unique("web"),
        "port": 80,
        "node_server_id": node,
        "engine": "nginx",
        "backends": [{"server_id": server_id} for server_id in backends],
        **extra,
    }


def create_lb(http: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    answer = http.post("/v1/load-balancers", json=body)
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def get_lb(http: httpx.Client, lb_id: str) -> dict[str, Any]:
    found: dict[str, Any] = http.get(f"/v1/load-balancers/{lb_id}").json()
    return found


def apply_jobs(http: httpx.Client, node: str, lb_id: str) -> list[dict[str, Any]]:
    """The node's `lb.apply` jobs of this load balancer, oldest first."""
    jobs = http.get(f"/v1/servers/{node}/jobs", params={"limit": 500}).json()["jobs"]
    return [j for j in reversed(jobs) if j["kind"] == "lb.apply" and j["args"]["id"] == lb_id]


@pytest.fixture
def backend(stack: Stack) -> str:
    with stack.http() as http:
        return new_server(http)


# --- creation and its validation -------------------------------------------------------------


def test_create_answers_pending_then_the_node_applies_it(stack: Stack, backend: str) -> None:
    with stack.http() as http:
        lb = create_lb(http, lb_body(stack.server_id, [backend]))
        assert lb["state"] == "pending_apply" and lb["revision"] == 1 and lb["applied_revision"] is None
        assert lb["tls"] is False and lb["algorithm"] == "round_robin"
        assert lb["health_check"] == {"path": "/", "interval_s": 10, "healthy_threshold": 2, "unhealthy_threshold": 3}
        [member] = lb["backends"]
        assert member["server_id"] == backend and member["address"] == "127.0.0.1"
        assert (member["port"], member["weight"], member["drained"]) == (8080, 1, False)
        assert member["health"] == "unhealthy" and member["last_check_at"] is None  # never checked

        # The stack's agent serves load balancers: it applies revision 1 (what it serves is
        # tests/control_plane/load_balancers/test_end_to_end.py's to check).
        wait_until(lambda: get_lb(http, lb["id"])["applied_revision"] == 1, timeout=30)
        [job] = apply_jobs(http, stack.server_id, lb["id"])
        assert job["exit_code"] == 0 and job["args"]["revision"] == 1
        assert job["args"]["backends"][0]["address"] == "127.0.0.1"  # the spec is self-contained


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"name": "Web"}, "name"),
        ({"name": "web_1"}, "name"),
        ({"port": 8080}, "port"),
        ({"port": 443}, "body"),  # tls without a hostname
        ({"tls": True}, "body"),
        ({"engine": "traefik"}, "engine"),
        ({"algorithm": "random"}, "algorithm"),
        ({"health_check": {"interval_s": 1}}, "health_check"),
        ({"health_check": {"unhealthy_threshold": 11}}, "health_check"),
        ({"health_check": {"path": "no-slash"}}, "health_check"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_create_refuses_invalid_definitions(stack: Stack, backend: str, change: dict[str, Any], where: str) -> None:
    with stack.http() as http:
        answer = http.post("/v1/load-balancers", json=lb_body(stack.server_id, [backend]) | change)
    assert answer.status_code == 422 and code(answer) == "validation_error", answer.text
    assert where in answer.text


@pytest.mark.parametrize("weight", [0, 257])
def test_backend_weight_bounds(stack: Stack, backend: str, weight: int) -> None:
    body = lb_body(stack.server_id, []) | {"backends": [{"server_id": backend, "weight": weight}]}
    with stack.http() as http:
        answer = http.post("/v1/load-balancers", json=body)
    assert answer.status_code == 422 and code(answer) == "validation_error"


def test_a_backend_is_a_server_and_port_pair_its_port_editable_never_twice_in_a_pool(
    stack: Stack, backend: str
) -> None:
    twice = lb_body(stack.server_id, []) | {"backends": [{"server_id": backend, "port": 8080}] * 2}
    with stack.http() as http:
        answer = http.post("/v1/load-balancers", json=twice)
        assert answer.status_code == 422 and "(server, port) pair" in answer.text, answer.text
        lb = create_lb(http, lb_body(stack.server_id, [backend]))
        first = lb["backends"][0]
        added = http.post(f"/v1/load-balancers/{lb['id']}/backends", json={"server_id": backend, "port": 8081})
        assert added.status_code == 201, added.text
        again = http.post(f"/v1/load-balancers/{lb['id']}/backends", json={"server_id": backend, "port": 8081})
        assert again.status_code == 409 and code(again) == "conflict", again.text

        moved = http.patch(f"/v1/load-balancers/{lb['id']}/backends/{first['id']}", json={"port": 9000})
        assert moved.status_code == 200 and moved.json()["port"] == 9000, moved.text
        onto = http.patch(f"/v1/load-balancers/{lb['id']}/backends/{first['id']}", json={"port": 8081})
        assert onto.status_code == 409 and code(onto) == "conflict", onto.text
        bad = http.patch(f"/v1/load-balancers/{lb['id']}/backends/{first['id']}", json={"port": 70000})
        assert bad.status_code == 422 and code(bad) == "validation_error", bad.text
        after = get_lb(http, lb["id"])
        assert sorted(b["port"] for b in after["backends"]) == [8081, 9000]
        assert after["revision"] == 3  # the refusals changed nothing
        spec = apply_jobs(http, stack.server_id, lb["id"])[-1]["args"]
        assert sorted(b["port"] for b in spec["backends"]) == [8081, 9000]


def test_create_checks_node_backends_and_name(stack: Stack, backend: str) -> None:
    with stack.http() as http:
        lite = new_server(http)
        answer = http.post("/v1/load-balancers", json=lb_body(lite, [backend]))
        assert answer.status_code == 422 and code(answer) == "lite_server"

        no_address = new_server(http, address=None)
        answer = http.post("/v1/load-balancers", json=lb_body(stack.server_id, [no_address]))
        assert answer.status_code == 422 and code(answer) == "validation_error"
        assert "no address" in answer.json()["error"]["message"]

        missing = http.post("/v1/load-balancers", json=lb_body("srv_nothing", [backend]))
        assert missing.status_code == 404 and code(missing) == "not_found"

        tls = create_lb(http, lb_body(stack.server_id, [backend], port=443, hostname="shop.example.com"))
        assert tls["tls"] is True and tls["hostname"] == "shop.example.com"
        again = http.post("/v1/load-balancers", json=lb_body(stack.server_id, [backend], name=tls["name"]))
        assert again.status_code == 409 and code(again) == "conflict"
        assert http.get("/v1/load-balancers").json()["load_balancers"].count(tls) <= 1


# --- changes ------------------------------------------------------------------------------------


def test_every_change_bumps_the_revision_and_dispatches_the_whole_spec(stack: Stack, backend: str) -> None:
    with stack.http() as http:
        lb = create_lb(http, lb_body(stack.server_id, [backend]))
        lb_id = lb["id"]
        patched = http.patch(
            f"/v1/load-balancers/{lb_id}", json={"algorithm": "least_conn", "health_check": {"path": "/healthz"}}
        )
        assert patched.status_code == 200, patched.text
        assert patched.json()["revision"] == 2 and patched.json()["state"] == "pending_apply"
        assert (
            patched.json()["health_check"]["path"] == "/healthz" and patched.json()["health_check"]["interval_s"] == 10
        )

        added = http.post(
            f"/v1/load-balancers/{lb_id}/backends", json={"server_id": backend, "port": 9000, "weight": 5}
        )
        assert added.status_code == 201, added.text
        assert (added.json()["port"], added.json()["weight"]) == (9000, 5)
        drained = http.patch(f"/v1/load-balancers/{lb_id}/backends/{added.json()['id']}", json={"drained": True})
        assert drained.status_code == 200 and drained.json()["drained"] and drained.json()["health"] == "draining"
        heavier = http.patch(f"/v1/load-balancers/{lb_id}/backends/{added.json()['id']}", json={"weight": 256})
        assert heavier.json()["weight"] == 256
        bad_weight = http.patch(f"/v1/load-balancers/{lb_id}/backends/{added.json()['id']}", json={"weight": 0})
        assert bad_weight.status_code == 422 and code(bad_weight) == "validation_error"
        removed = http.delete(f"/v1/load-balancers/{lb_id}/backends/{lb['backends'][0]['id']}")
        assert removed.status_code == 204
        reapply = http.post(f"/v1/load-balancers/{lb_id}/apply")
        assert reapply.status_code == 202 and reapply.json()["job_id"]

        now = get_lb(http, lb_id)
        assert now["revision"] == 6 and [b["id"] for b in now["backends"]] == [added.json()["id"]]
        wait_until(lambda: len(apply_jobs(http, stack.server_id, lb_id)) == 7, timeout=30)
        specs = [job["args"] for job in apply_jobs(http, stack.server_id, lb_id)]
        assert [spec["revision"] for spec in specs] == [1, 2, 3, 4, 5, 6, 6]
        assert specs[-1]["algorithm"] == "least_conn" and specs[-1]["health_check"]["path"] == "/healthz"
        assert specs[-1]["backends"] == [
            {
                "id": added.json()["id"],
                "server_id": backend,
                "address": "127.0.0.1",
                "port": 9000,
                "weight": 256,
                "drained": True,
            }
        ]
        assert reapply.json()["job_id"] == apply_jobs(http, stack.server_id, lb_id)[-1]["id"]


def test_patch_refusals(stack: Stack, backend: str) -> None:
    with stack.http() as http:
        lb = create_lb(http, lb_body(stack.server_id, [backend]))
        other = create_lb(http, lb_body(stack.server_id, [backend]))
        route = f"/v1/load-balancers/{lb['id']}"
        for field, value in (("engine", "haproxy"), ("node_server_id", backend), ("engine", "nginx")):
            answer = http.patch(route, json={field: value, "algorithm": "ip_hash"})
            assert answer.status_code == 422 and code(answer) == "immutable_field", answer.text
            assert answer.json()["error"]["details"] == {"field": field}
        taken = http.patch(route, json={"name": other["name"]})
        assert taken.status_code == 409 and code(taken) == "conflict"
        for bad in ({"port": 443}, {"port": 81}, {"health_check": {"interval_s": 3601}}, {"nope": 1}, {"name": "A"}):
            answer = http.patch(route, json=bad)
            assert answer.status_code == 422 and code(answer) == "validation_error", (bad, answer.text)
        assert get_lb(http, lb["id"])["revision"] == 1  # nothing refused was counted
        tls = http.patch(route, json={"port": 443, "hostname": "a.example.com"})
        assert tls.status_code == 200 and tls.json()["tls"] is True and tls.json()["revision"] == 2
        back = http.patch(route, json={"port": 80})
        assert back.json()["tls"] is False and back.json()["port"] == 80
        no_address = new_server(http, address=None)
        answer = http.post(f"{route}/backends", json={"server_id": no_address})
        assert answer.status_code == 422 and code(answer) == "validation_error"
        assert [b["server_id"] for b in get_lb(http, lb["id"])["backends"]] == [backend]  # rolled back
        assert http.get(f"{route}/backends/be_nothing").status_code in (404, 405)
        assert http.patch(f"{route}/backends/be_nothing", json={"weight": 2}).status_code == 404


def test_a_change_over_a_stale_revision_is_409_and_changes_nothing(stack: Stack, backend: str) -> None:
    """Every change of the definition may say which revision it was made over (`if_revision`):
    stale, it is 409 `conflict` with the current revision, and nothing is written or applied."""
    with stack.http() as http:
        lb = create_lb(http, lb_body(stack.server_id, [backend]))
        route, member = f"/v1/load-balancers/{lb['id']}", lb["backends"][0]["id"]
        theirs = http.patch(route, json={"algorithm": "least_conn", "if_revision": 1})
        assert theirs.status_code == 200 and theirs.json()["revision"] == 2, theirs.text
        stale: list[tuple[str, str, dict[str, Any] | None]] = [
            ("PATCH", route, {"algorithm": "ip_hash", "if_revision": 1}),
            ("POST", f"{route}/backends", {"server_id": backend, "port": 9000, "if_revision": 1}),
            ("PATCH", f"{route}/backends/{member}", {"weight": 7, "if_revision": 1}),
            ("PATCH", f"{route}/backends/{member}", {"drained": True, "if_revision": 1}),
            ("PATCH", f"{route}/backends/{member}", {"port": 9001, "if_revision": 1}),
            ("DELETE", f"{route}/backends/{member}?if_revision=1", None),
        ]
        for method, path, body in stale:
            answer = http.request(method, path, json=body)
            assert answer.status_code == 409 and code(answer) == "conflict", (method, path, answer.text)
            assert answer.json()["error"]["details"] == {"revision": 2, "if_revision": 1}
        after = get_lb(http, lb["id"])
        assert after["revision"] == 2 and after["algorithm"] == "least_conn"
        assert [(b["id"], b["port"], b["weight"], b["drained"]) for b in after["backends"]] == [
            (member, 8080, 1, False)
        ]
        wait_until(lambda: len(apply_jobs(http, stack.server_id, lb["id"])) == 2, timeout=30)
        assert [j["args"]["revision"] for j in apply_jobs(http, stack.server_id, lb["id"])] == [1, 2]

        # A backend removed since the revision a change was made over: that change is stale (409),
        # not a typo (404).
        added = http.post(f"{route}/backends", json={"server_id": backend, "port": 9000, "if_revision": 2})
        assert added.status_code == 201, added.text
        assert http.delete(f"{route}/backends/{added.json()['id']}", params={"if_revision": 3}).status_code == 204
        gone = http.patch(f"{route}/backends/{added.json()['id']}", json={"weight": 3, "if_revision": 3})
        assert gone.status_code == 409 and gone.json()["error"]["details"]["revision"] == 4, gone.text
        missing = http.patch(f"{route}/backends/{added.json()['id']}", json={"weight": 3, "if_revision": 4})
        assert missing.status_code == 404 and code(missing) == "not_found"

        # Over the current revision, or without `if_revision`, a change is accepted as ever.
        current = http.patch(f"{route}/backends/{member}", json={"weight": 7, "if_revision": 4})
        assert current.status_code == 200 and current.json()["weight"] == 7, current.text
        blind = http.patch(route, json={"algorithm": "ip_hash"})
        assert blind.status_code == 200 and blind.json()["revision"] == 6
        for bad in (0, -1, "two"):
            answer = http.patch(route, json={"algorithm": "round_robin", "if_revision": bad})
            assert answer.status_code == 422 and code(answer) == "validation_error", answer.text
        assert http.delete(f"{route}/backends/{member}", params={"if_revision": "x"}).status_code == 422
        assert get_lb(http, lb["id"])["revision"] == 6


def test_concurrent_changes_over_one_revision_exactly_one_wins(stack: Stack, backend: str) -> None:
    """Changes sent at once over the same revision (an edit of the definition and weight
    presses): the check and the write are one transaction, so exactly one is accepted."""
    with stack.http() as http:
        lb = create_lb(http, lb_body(stack.server_id, [backend]))
    route, member = f"/v1/load-balancers/{lb['id']}", lb["backends"][0]["id"]
    names = [unique("web") for _ in range(4)]
    changes: list[tuple[str, dict[str, Any]]] = [(route, {"name": name, "if_revision": 1}) for name in names]
    changes += [(f"{route}/backends/{member}", {"weight": weight, "if_revision": 1}) for weight in (2, 3, 4, 5)]
    start = threading.Barrier(len(changes))

    def send(change: tuple[str, dict[str, Any]]) -> httpx.Response:
        path, body = change
        with stack.http() as client:
            start.wait(timeout=30)
            return client.patch(path, json=body)

    with ThreadPoolExecutor(len(changes)) as pool:
        answers = list(pool.map(send, changes))
    accepted = [(change, answer) for change, answer in zip(changes, answers, strict=True) if answer.status_code == 200]
    assert len(accepted) == 1, [a.text for a in answers]
    refused = [answer for answer in answers if answer.status_code != 200]
    assert all(a.status_code == 409 and a.json()["error"]["details"]["revision"] == 2 for a in refused)
    [(winner, _answer)] = accepted
    with stack.http() as http:
        after = get_lb(http, lb["id"])
    assert after["revision"] == 2
    assert (after["name"], after["backends"][0]["weight"]) == (
        winner[1].get("name", lb["name"]),
        winner[1].get("weight", 1),
    )


def test_delete_dispatches_remove_then_the_row_goes(stack: Stack, backend: str) -> None:
    with stack.http() as http:
        lb = create_lb(http, lb_body(stack.server_id, [backend]))
        assert http.delete(f"/v1/load-balancers/{lb['id']}").status_code == 204
        assert http.get(f"/v1/load-balancers/{lb['id']}").status_code == 404
        jobs = http.get(f"/v1/servers/{stack.server_id}/jobs", params={"limit": 500}).json()["jobs"]
        removes = [j for j in jobs if j["kind"] == "lb.remove" and j["args"]["id"] == lb["id"]]
        assert removes and removes[0]["args"] == {"id": lb["id"], "name": lb["name"], "engine": "nginx"}
        assert http.get(f"/v1/servers/{backend}").status_code == 200  # backend servers untouched


def test_summary_and_audit(stack: Stack, backend: str) -> None:
    with stack.http() as http:
        pool = [{"server_id": backend, "port": port} for port in (8080, 8081)]  # one server, two backends
        lb = create_lb(http, lb_body(stack.server_id, []) | {"backends": pool})
        listed = http.get("/v1/load-balancers").json()
        ours = [x for x in listed["load_balancers"] if x["id"] == lb["id"]]
        assert ours and ours[0]["name"] == lb["name"]
        every = listed["load_balancers"]
        assert listed["summary"] == {
            "total": len(every),
            "applied": sum(1 for x in every if x["applied_revision"] == x["revision"]),
            "healthy_backends": sum(1 for x in every for b in x["backends"] if b["health"] == "healthy"),
            "total_backends": sum(len(x["backends"]) for x in every),
        }
        assert listed["summary"]["total_backends"] >= 2
        http.patch(f"/v1/load-balancers/{lb['id']}", json={"algorithm": "ip_hash"})
        http.delete(f"/v1/load-balancers/{lb['id']}")
        entries = http.get("/v1/audit", params={"limit": 1000}).json()["entries"]
    mine = [e for e in entries if e["details"].get("lb_id") == lb["id"]]
    assert {e["action"] for e in mine} == {
        "load_balancers.create",
        "load_balancers.update",
        "load_balancers.delete",
    }
    assert all(e["server_id"] == stack.server_id and e["target"] == lb["name"] for e in mine)
    update = next(e for e in mine if e["action"] == "load_balancers.update")
    assert update["details"]["revision"] == 2 and update["details"]["changed"] == {"algorithm": "ip_hash"}


# --- who may do what ------------------------------------------------------------------------------


def _member_token(stack: Stack, role: str, org: str = "demo") -> str:
    email, password = f"{role}-{uuid.uuid4().hex[:8]}@example.com", "a-password-123"
    stack.admin("create-user", email, "--org", org, "--role", role, "--password", password)
    return stack.login(email, password)


def _routes(lb_id: str, backend_id: str, server_id: str) -> list[tuple[str, str, Any]]:
    return [
        ("GET", f"/v1/load-balancers/{lb_id}", None),
        ("PATCH", f"/v1/load-balancers/{lb_id}", {"algorithm": "ip_hash"}),
        ("POST", f"/v1/load-balancers/{lb_id}/backends", {"server_id": server_id, "port": 8081}),  # a new pair
        ("PATCH", f"/v1/load-balancers/{lb_id}/backends/{backend_id}", {"drained": True}),
        ("DELETE", f"/v1/load-balancers/{lb_id}/backends/{backend_id}", None),
        ("POST", f"/v1/load-balancers/{lb_id}/apply", None),
        ("DELETE", f"/v1/load-balancers/{lb_id}", None),
    ]


def test_roles(stack: Stack, backend: str) -> None:
    with stack.http() as http:
        lb = create_lb(http, lb_body(stack.server_id, [backend]))
    backend_id = lb["backends"][0]["id"]
    with stack.http(_member_token(stack, "member")) as member:
        assert member.get("/v1/load-balancers").status_code == 200
        assert member.get(f"/v1/load-balancers/{lb['id']}").status_code == 200
        refused = member.post("/v1/load-balancers", json=lb_body(stack.server_id, [backend]))
        assert refused.status_code == 403 and code(refused) == "forbidden"
        for method, route, body in _routes(lb["id"], backend_id, backend)[1:]:
            answer = member.request(method, route, json=body)
            assert answer.status_code == 403 and code(answer) == "forbidden", (method, route)
    with stack.http() as http:
        assert get_lb(http, lb["id"])["revision"] == 1
    with stack.http(_member_token(stack, "operator")) as operator:
        for method, route, body in _routes(lb["id"], backend_id, backend)[1:]:
            answer = operator.request(method, route, json=body)
            assert answer.status_code < 300, (method, route, answer.text)


def test_another_orgs_load_balancers_are_404_everywhere(stack: Stack, backend: str) -> None:
    org = unique("org")
    stack.admin("create-org", org, "--plan", "max")
    email, password = f"owner@{org}.test", "a-password-123"
    stack.admin("create-user", email, "--org", org, "--role", "owner", "--password", password)
    theirs = stack.login(email, password)
    with stack.http(theirs) as other:
        their_node = str(stack.admin("create-server", "node", "--org", org)["id"])
        their_backend = new_server(other)
        their_lb = create_lb(other, lb_body(their_node, [their_backend]))
    with stack.http() as http:
        ours = create_lb(http, lb_body(stack.server_id, [backend]))
        # Their load balancer and backend, seen from our org: 404 on every route.
        for method, route, body in _routes(their_lb["id"], their_lb["backends"][0]["id"], backend):
            answer = http.request(method, route, json=body)
            assert answer.status_code == 404 and code(answer) == "not_found", (method, route, answer.text)
        # Our load balancer with their backend id, and their servers as node or backend.
        foreign_backend = f"/v1/load-balancers/{ours['id']}/backends/{their_lb['backends'][0]['id']}"
        assert http.patch(foreign_backend, json={"drained": True}).status_code == 404
        assert http.delete(foreign_backend).status_code == 404
        assert (
            http.post(f"/v1/load-balancers/{ours['id']}/backends", json={"server_id": their_backend}).status_code == 404
        )
        assert http.post("/v1/load-balancers", json=lb_body(their_node, [backend])).status_code == 404
        assert http.post("/v1/load-balancers", json=lb_body(stack.server_id, [their_backend])).status_code == 404
        assert their_lb["id"] not in {x["id"] for x in http.get("/v1/load-balancers").json()["load_balancers"]}
        # A name is unique per org only.
        assert create_lb(http, lb_body(stack.server_id, [backend], name=their_lb["name"]))["name"] == their_lb["name"]
    with stack.http(theirs) as other:
        assert get_lb(other, their_lb["id"])["revision"] == 1


# --- the node offline -----------------------------------------------------------------------------


@pytest.fixture
def own_node(stack: Stack, tmp_path: Path) -> Iterator[Any]:
    """A second full server with its own agent process, which a test may kill and restart."""
    with stack.http() as http:
        created = http.post("/v1/servers", json={"name": unique("node"), "kind": "full"}).json()
    home, state = tmp_path / "home", tmp_path / "state"
    home.mkdir()
    state.mkdir()
    server_id, token = created["server"]["id"], created["agent_token"]

    node = AgentProcess(stack, server_id, token, home, state)
    yield node
    node.stop()


def test_offline_node_keeps_only_the_newest_revision_queued(stack: Stack, own_node: Any, backend: str) -> None:
    own_node.kill()
    with stack.http() as http:
        lb = create_lb(http, lb_body(own_node.server_id, [backend]))
        for algorithm in ("least_conn", "ip_hash"):
            assert http.patch(f"/v1/load-balancers/{lb['id']}", json={"algorithm": algorithm}).status_code == 200
        assert get_lb(http, lb["id"])["state"] == "pending_apply"
        first, second, newest = apply_jobs(http, own_node.server_id, lb["id"])
        assert [j["status"] for j in (first, second, newest)] == ["cancelled", "cancelled", "queued"]
        lines = http.get(f"/v1/jobs/{first['id']}/stream").text
        assert "superseded by revision 2" in lines
        assert "superseded by revision 3" in http.get(f"/v1/jobs/{second['id']}/stream").text

        own_node.restart()
        wait_until(lambda: get_lb(http, lb["id"])["state"] != "pending_apply", timeout=30)
        jobs = apply_jobs(http, own_node.server_id, lb["id"])
        assert [j["status"] for j in jobs[:2]] == ["cancelled", "cancelled"]  # never ran
        assert jobs[0]["started_at"] is None and jobs[1]["started_at"] is None
        assert jobs[2]["args"]["revision"] == 3 and jobs[2]["exit_code"] is not None


def test_delete_while_offline_cancels_the_queued_apply(stack: Stack, own_node: Any, backend: str) -> None:
    own_node.kill()
    with stack.http() as http:
        lb = create_lb(http, lb_body(own_node.server_id, [backend]))
        assert http.delete(f"/v1/load-balancers/{lb['id']}").status_code == 204
        [apply] = apply_jobs(http, own_node.server_id, lb["id"])
        assert apply["status"] == "cancelled"
        jobs = http.get(f"/v1/servers/{own_node.server_id}/jobs").json()["jobs"]
        [remove] = [j for j in jobs if j["kind"] == "lb.remove"]
        assert remove["status"] == "queued"
        own_node.restart()
        wait_until(lambda: http.get(f"/v1/jobs/{remove['id']}").json()["status"] not in ("queued", "running"), 30)
