"""The `/v1` API end to end: real control plane, real agent, real SQLite, over 127.0.0.1."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_client import Client
from contract.errors import NotFound, TierRequired, Unauthenticated
from contract.models import Scope
from control_plane.auth.identities import KEEP_S
from tests.conftest import Stack
from tests.helpers import wait_until
from tests.helpers.databases import query

pytestmark = pytest.mark.stack_variants("sqlite", "postgresql", "uvicorn")

SITE = {"scope": "site", "domain": "example.com"}


def error_code(response: httpx.Response) -> str:
    code: str = response.json()["error"]["code"]
    return code


def test_health_needs_no_token(stack: Stack) -> None:
    answer = httpx.get(f"{stack.base_url}/v1/health")
    assert answer.status_code == 200
    body = answer.json()
    assert body["status"] == "ok" and body["agents_online"] >= 1 and body["version"]
    assert (body["database"], body["bus"]) == ("ok", None)  # one control plane: no bus


def _login(stack: Stack, email: str, password: str, address: str = "127.0.0.1") -> httpx.Response:
    """A login from `address` (any of 127.0.0.0/8: the control plane sees it as the client's)."""
    with httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30) as http:
        return http.post(f"{stack.base_url}/v1/auth/login", json={"email": email, "password": password})


def _new_owner(stack: Stack) -> tuple[str, str]:
    email, password = f"throttle-{uuid.uuid4().hex[:8]}@example.com", "right-password-1"
    stack.admin("create-user", email, "--org", "demo", "--role", "member", "--password", password)
    return email, password


def test_wrong_passwords_throttle_their_source_and_the_owner_still_gets_in(stack: Stack) -> None:
    email, password = _new_owner(stack)
    for _ in range(10):
        assert error_code(_login(stack, email, "wrong-guess", "127.0.0.3")) == "unauthenticated"
    for attempt in ("wrong-guess", password):
        locked = _login(stack, email, attempt, "127.0.0.3")
        assert locked.status_code == 429 and error_code(locked) == "rate_limited"
        assert 0 < int(locked.headers["Retry-After"]) <= 900
        assert locked.json()["error"]["details"]["retry_after_s"] == int(locked.headers["Retry-After"])
    # Per account and source: the owner, from a source that has not been failing, gets in.
    assert _login(stack, email, password, "127.0.0.4").status_code == 200
    other_email, other_password = _new_owner(stack)
    assert _login(stack, other_email, other_password, "127.0.0.3").status_code == 200
    # One audit entry for the throttling event (not one per wrong password), in the account's
    # org, with no actor, the source and the count; never the password.
    with stack.http() as http:
        entries = http.get("/v1/audit", params={"action": "auth.throttled"}).json()["entries"]
    mine = [e for e in entries if e["target"] == email]
    assert len(mine) == 1, mine
    assert mine[0]["actor"] == {"user_id": None, "email": None} and mine[0]["error_code"] == "rate_limited"
    assert mine[0]["details"] == {"source": "127.0.0.3", "limit": "account_source", "failures": 10, "window_s": 900.0}
    rows = query(stack.db_url, "select details, target from audit_log where action like 'auth.%'")
    assert "wrong-guess" not in json.dumps(rows) and password not in json.dumps(rows)


def test_an_unknown_email_is_throttled_like_a_known_one(stack: Stack) -> None:
    unknown = f"nobody-{uuid.uuid4().hex[:8]}@example.com"
    answers = [_login(stack, unknown, "guess", "127.0.0.5").status_code for _ in range(11)]
    assert answers == [401] * 10 + [429]


def test_many_accounts_from_one_address_lock_the_address(stack: Stack) -> None:
    address = "127.0.0.6"
    for n in range(50):
        assert _login(stack, f"spray-{n}@example.com", "guess", address).status_code == 401
    email, password = _new_owner(stack)
    assert _login(stack, email, password, address).status_code == 429
    assert _login(stack, email, password, "127.0.0.7").status_code == 200
    # The spray's event is audited once; its accounts are no user's, so it is in no org's log
    # and the emails typed are not kept.
    rows = query(stack.db_url, "select org_id, target, details from audit_log where action = 'auth.throttled'")
    sprayed = [(org, target, json.loads(details)) for org, target, details in rows if address in details]
    assert sprayed == [(None, None, {"source": address, "limit": "source", "failures": 50, "window_s": 900.0})]


@pytest.mark.anyio
async def test_login_and_me(stack: Stack) -> None:
    async with Client(stack.base_url) as client:
        login = await client.auth.login(stack.email, stack.password)
        assert login.user.email == stack.email
        me = await client.auth.me()
        assert me.role == "owner" and me.org.plan == "max"
        assert set(me.capabilities) >= {"observe", "content", "infra", "sysadmin", "file_write", "root_scope"}


@pytest.mark.anyio
async def test_wrong_password_is_401(stack: Stack) -> None:
    async with Client(stack.base_url) as client:
        with pytest.raises(Unauthenticated) as raised:
            await client.auth.login(stack.email, "not-the-password")
        assert raised.value.status_code == 401
        with pytest.raises(Unauthenticated):
            await client.auth.login("nobody@example.com", "whatever")


def test_missing_and_bogus_tokens_are_401(stack: Stack) -> None:
    assert error_code(httpx.get(f"{stack.base_url}/v1/me")) == "unauthenticated"
    bogus = httpx.get(f"{stack.base_url}/v1/me", headers={"Authorization": "Bearer fds_nope"})
    assert bogus.status_code == 401 and error_code(bogus) == "unauthenticated"


def test_agent_token_is_not_accepted_on_v1(stack: Stack) -> None:
    agent_token = (stack.data_dir / "agent" / "agent-token").read_text().strip()
    answer = httpx.get(f"{stack.base_url}/v1/servers", headers={"Authorization": f"Bearer {agent_token}"})
    assert answer.status_code == 401


@pytest.mark.anyio
async def test_api_tokens_on_max_plan(stack: Stack) -> None:
    async with Client(stack.base_url, token=stack.token) as client:
        created = await client.auth.create_token("ci")
        assert created.token.startswith("fdk_")
        assert created.id in {t.id for t in await client.auth.list_tokens()}
    async with Client(stack.base_url, token=created.token) as api:
        assert (await api.auth.me()).user.email == stack.email
    async with Client(stack.base_url, token=stack.token) as client:
        await client.auth.delete_token(created.id)
        with pytest.raises(NotFound):
            await client.auth.delete_token(created.id)
    async with Client(stack.base_url, token=created.token) as api:
        with pytest.raises(Unauthenticated):
            await api.auth.me()


def test_a_revoked_api_token_is_refused_at_once_though_it_was_just_used(stack: Stack) -> None:
    """The control plane keeps each token's principal for up to KEEP_S; a revocation through it
    forgets them all at once (its write to `tokens` is seen by the engine's watch), so the very
    next request with the token is refused, with no window."""
    with stack.http() as http:
        created = http.post("/v1/tokens", json={"name": "revoked-at-once"}).json()
    with stack.http(created["token"]) as api, stack.http() as owner:
        for _ in range(3):
            assert api.get("/v1/me").status_code == 200  # read once, then kept
        assert owner.delete(f"/v1/tokens/{created['id']}").status_code == 204
        answer = api.get("/v1/me")
        assert answer.status_code == 401 and error_code(answer) == "unauthenticated"


def _other_org(stack: Stack, plan: str) -> tuple[str, str, str]:
    """A second org with an owner and a server; returns (email, password, server_id)."""
    name = f"org-{uuid.uuid4().hex[:8]}"
    stack.admin("create-org", name, "--plan", plan)
    email, password = f"owner@{name}.test", "correct horse battery"
    stack.admin("create-user", email, "--org", name, "--role", "owner", "--password", password)
    server = stack.admin("create-server", "web-1", "--org", name)
    return email, password, str(server["id"])


@pytest.mark.anyio
async def test_api_tokens_refused_below_max(stack: Stack) -> None:
    email, password, _ = _other_org(stack, "pro")
    async with Client(stack.base_url) as client:
        await client.auth.login(email, password)
        with pytest.raises(TierRequired) as raised:
            await client.auth.create_token("nope")
        assert raised.value.status_code == 403
        assert raised.value.details == {"required_plan": "max", "current_plan": "pro"}
        with pytest.raises(TierRequired):
            await client.auth.list_tokens()


def test_api_token_stops_working_when_plan_drops(stack: Stack) -> None:
    """`fleetdeck admin set-plan` is another process: a principal the control plane keeps
    (control_plane.auth.identities) learns of it within KEEP_S of its last read."""
    email, password, _ = _other_org(stack, "max")
    token = stack.login(email, password)
    with stack.http(token) as http:
        api_token = http.post("/v1/tokens", json={"name": "x"}).json()["token"]
    with stack.http(api_token) as http:
        assert http.get("/v1/me").status_code == 200  # now kept
        org_name = email.split("@")[1].removesuffix(".test")
        stack.admin("set-plan", org_name, "--plan", "plus")
        changed = time.monotonic()
        wait_until(lambda: http.get("/v1/me").status_code == 403, timeout=KEEP_S + 10)
        # The bound, with room for a loaded machine's slow requests; never more than that.
        assert time.monotonic() - changed < KEEP_S + 5
        answer = http.get("/v1/me")
        assert answer.status_code == 403 and error_code(answer) == "tier_required"
    with stack.http(token) as http:  # the session token keeps working on every plan
        assert http.get("/v1/me").status_code == 200


SERVER_ROUTES = [
    ("GET", "/v1/servers/{id}", None),
    ("DELETE", "/v1/servers/{id}", None),
    ("GET", "/v1/servers/{id}/fs/scopes", None),
    ("GET", "/v1/servers/{id}/fs/list?scope=site&domain=example.com&path=", None),
    ("GET", "/v1/servers/{id}/fs/stat?scope=site&domain=example.com&path=", None),
    ("GET", "/v1/servers/{id}/fs/read?scope=site&domain=example.com&path=.env", None),
]


def test_another_orgs_server_is_404_everywhere(stack: Stack) -> None:
    email, password, other_server = _other_org(stack, "max")
    token = stack.login(email, password)
    for owner_token, foreign_id in ((token, stack.server_id), (stack.token, other_server)):
        with stack.http(owner_token) as http:
            for method, route, body in SERVER_ROUTES:
                answer = http.request(method, route.format(id=foreign_id), json=body)
                assert answer.status_code == 404, (method, route, answer.text)
                assert error_code(answer) == "not_found"
    with stack.http() as http:  # and the demo server is still there
        assert http.get(f"/v1/servers/{stack.server_id}").status_code == 200


def test_errors_have_the_contract_shape(stack: Stack) -> None:
    with stack.http() as http:
        unknown = http.get("/v1/nothing-here")
        assert unknown.status_code == 404 and error_code(unknown) == "not_found"
        bad_json = http.post("/v1/servers", content=b"{not json", headers={"Content-Type": "application/json"})
        assert bad_json.status_code == 400 and error_code(bad_json) == "bad_request"
        invalid = http.post("/v1/servers", json={"name": "", "kind": "huge"})
        assert invalid.status_code == 422 and error_code(invalid) == "validation_error"
        assert {tuple(e["loc"]) for e in invalid.json()["error"]["details"]["errors"]} >= {("body", "kind")}
        bad_scope = http.get(f"/v1/servers/{stack.server_id}/fs/list", params={"scope": "planet"})
        assert bad_scope.status_code == 400 and error_code(bad_scope) == "bad_request"
        no_domain = http.get(f"/v1/servers/{stack.server_id}/fs/list", params={"scope": "site"})
        assert no_domain.status_code == 422 and error_code(no_domain) == "validation_error"


def test_openapi_document(stack: Stack) -> None:
    spec = httpx.get(f"{stack.base_url}/v1/openapi.json").json()
    for route in (
        "/v1/health",
        "/v1/auth/login",
        "/v1/me",
        "/v1/tokens",
        "/v1/servers",
        "/v1/servers/{server_id}/fs/list",
    ):
        assert route in spec["paths"], route


def test_server_crud_and_roles(stack: Stack) -> None:
    with stack.http() as http:
        created = http.post("/v1/servers", json={"name": "lite-1", "kind": "lite", "address": "192.0.2.10"})
        assert created.status_code == 201, created.text
        server = created.json()["server"]
        assert server["agent"]["online"] is False
        assert http.post("/v1/servers", json={"name": "lite-1", "kind": "lite"}).status_code == 409
        listed = http.get(f"/v1/servers/{server['id']}/fs/list", params=SITE)
        assert listed.status_code == 422 and error_code(listed) == "lite_server"
        assert http.delete(f"/v1/servers/{server['id']}").status_code == 204
        assert http.get(f"/v1/servers/{server['id']}").status_code == 404
    # A member of the same org may look but not register servers.
    org_name = "demo"
    email = f"member-{uuid.uuid4().hex[:6]}@demo.test"
    stack.admin("create-user", email, "--org", org_name, "--role", "member", "--password", "pw-member-1")
    token = stack.login(email, "pw-member-1")
    with stack.http(token) as http:
        assert http.get(f"/v1/servers/{stack.server_id}").status_code == 200
        refused = http.post("/v1/servers", json={"name": "nope", "kind": "full"})
        assert refused.status_code == 403 and error_code(refused) == "forbidden"
        scopes = http.get(f"/v1/servers/{stack.server_id}/fs/scopes").json()["scopes"]
        assert {"scope": "root", "domain": None, "slug": None} not in scopes
        assert {s["domain"] for s in scopes} >= {"example.com"}
        root = http.get(f"/v1/servers/{stack.server_id}/fs/list", params={"scope": "root"})
        assert root.status_code == 403 and error_code(root) == "forbidden"
        assert http.get(f"/v1/servers/{stack.server_id}/fs/list", params=SITE).status_code == 200


@pytest.mark.parametrize(
    "address", ["-oProxyCommand=id", "10.0.0.1 -p 2", "web1.example.com;id", "http://web1", "Web1.Example.com", "1.2.3"]
)
def test_a_server_address_is_an_ip_address_or_a_host_name(stack: Stack, address: str) -> None:
    with stack.http() as http:
        refused = http.post("/v1/servers", json={"name": f"addr-{uuid.uuid4().hex[:6]}", "address": address})
    assert refused.status_code == 422 and error_code(refused) == "validation_error", refused.text
    assert refused.json()["error"]["details"]["errors"][0]["loc"] == ["body", "address"]


def test_server_addresses_are_kept_normalised(stack: Stack) -> None:
    with stack.http() as http:
        for given, kept in (("fd00:0:0::12", "fd00::12"), ("web-1.example.com", "web-1.example.com"), ("web1", "web1")):
            created = http.post("/v1/servers", json={"name": f"addr-{uuid.uuid4().hex[:6]}", "address": given})
            assert created.status_code == 201, created.text
            assert created.json()["server"]["address"] == kept
            assert http.delete(f"/v1/servers/{created.json()['server']['id']}").status_code == 204


def test_admin_create_server_takes_the_same_addresses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fleetdeck.cli import main

    db = f"sqlite:///{tmp_path / 'admin.db'}"
    assert main(["admin", "create-org", "acme", "--plan", "max", "--db", db]) == 0
    assert main(["admin", "create-server", "web", "--org", "acme", "--address=-oProxyCommand=id", "--db", db]) == 1
    assert "--address '-oProxyCommand=id': an IP address or a lowercase RFC 1123 host name" in capsys.readouterr().err
    assert main(["admin", "create-server", "web", "--org", "acme", "--address", "10.0.0.11", "--db", db]) == 0


def test_audit_rows_have_no_secrets(stack: Stack) -> None:
    stack.login(stack.email, stack.password)  # an auth.login entry, whichever tests ran before
    with stack.http() as http:
        secret = http.post("/v1/tokens", json={"name": "audited"}).json()["token"]
    rows = query(stack.db_url, "select action, details, target from audit_log")
    assert ("tokens.create" in {r[0] for r in rows}) and ("auth.login" in {r[0] for r in rows})
    dump = json.dumps(rows)
    assert secret not in dump and stack.password not in dump


# --- files ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_scopes_list_stat_read(stack: Stack) -> None:
    async with Client(stack.base_url, token=stack.token) as client:
        scopes = await client.files.scopes(stack.server_id)
        assert Scope(scope="root") in scopes
        site = next(s for s in scopes if s.domain == "example.com")
        assert site.slug == "example-com"
        listing = await client.files.list(stack.server_id, site, "")
        names = {e["name"]: e for e in listing.entries}
        assert {"public_html", ".env", "logs"} <= set(names)
        assert names["public_html"]["type"] == "dir" and names[".env"]["type"] == "file"
        assert names["theme"]["type"] == "symlink" and names["theme"]["link_target"]
        entry = await client.files.stat(stack.server_id, site, "public_html/index.php")
        assert entry.type == "file" and entry.size > 0 and entry.permissions.startswith("rw")
        content = await client.files.read(stack.server_id, site, "public_html/index.php")
        assert "<?php" in content.content and content.etag
        root = await client.files.list(stack.server_id, Scope(scope="root"), "")
        assert {"example-com", "shop-example-org"} <= {e["name"] for e in root.entries}


@pytest.mark.anyio
async def test_paging_returns_every_name_once(stack: Stack) -> None:
    folder = "public_html/wp-content/cache"
    site = Scope(scope="site", domain="example.com")
    seen: list[str] = []
    async with Client(stack.base_url, token=stack.token) as client:
        page = await client.files.list(stack.server_id, site, folder, limit=3000)
        assert page.total == 20_000
        seen += [e["name"] for e in page.entries]
        pages = 1
        while page.next_cursor:
            page = await client.files.list(stack.server_id, site, folder, cursor=page.next_cursor, limit=3000)
            seen += [e["name"] for e in page.entries]
            pages += 1
        everything = await client.files.list_all(stack.server_id, site, folder)
    assert pages == 7
    assert len(seen) == 20_000 and len(set(seen)) == 20_000
    assert sorted(e["name"] for e in everything.entries) == sorted(seen)


def test_read_errors(stack: Stack) -> None:
    with stack.http() as http:
        base = f"/v1/servers/{stack.server_id}/fs"
        binary = http.get(f"{base}/read", params={**SITE, "path": "public_html/favicon.ico"})
        assert binary.status_code == 415 and error_code(binary) == "binary_file"
        missing = http.get(f"{base}/read", params={**SITE, "path": "public_html/nope.php"})
        assert missing.status_code == 404 and error_code(missing) == "not_found"
        unknown_site = http.get(f"{base}/list", params={"scope": "site", "domain": "nope.example", "path": ""})
        assert unknown_site.status_code == 404


@pytest.fixture(scope="module")
def jail_tree(stack: Stack) -> Path:
    """Plant the attack material of the jail tests in the demo tree, and two sites site1/site10."""
    home = stack.data_dir / "home"
    for slug in ("site1", "site10"):
        (home / slug / "www").mkdir(parents=True, exist_ok=True)
    (home / "site10" / "secret.txt").write_text("site10's secret\n")
    (home / "site1" / "www" / "index.html").write_text("<h1>site1</h1>\n")
    links = {
        "site1/etc-link": "/etc",
        "site1/escape": "../site10",
        "site1/www/deep": "../../site10/secret.txt",
        "site1/inside": "www",
    }
    for link, target in links.items():
        if not (home / link).is_symlink():
            os.symlink(target, home / link)
    registry = stack.data_dir / "agent" / "sites.json"
    sites = json.loads(registry.read_text())["sites"]
    for slug in ("site1", "site10"):
        entry = {"domain": f"{slug}.test", "slug": slug}
        if entry not in sites:
            sites.append(entry)
    registry.write_text(json.dumps({"sites": sites}))
    return home


ESCAPES = [
    ("read", ".."),
    ("list", ".."),
    ("read", "../site10/secret.txt"),
    ("read", "www/../../site10/secret.txt"),
    ("read", "/etc/passwd"),
    ("list", "/etc"),
    ("read", "etc-link/passwd"),  # symlink to /etc at the start
    ("list", "etc-link"),
    ("read", "escape/secret.txt"),  # the site1/site10 prefix trick, through a relative link
    ("read", "www/deep"),  # a link at the end that leads out
    ("read", "www/index.html\x00.txt"),  # NUL byte
    ("stat", "../site10"),
    ("stat", "../../../../etc/shadow"),
]


@pytest.mark.parametrize(("operation", "path"), ESCAPES)
def test_jail_refuses_escapes(stack: Stack, jail_tree: Path, operation: str, path: str) -> None:
    with stack.http() as http:
        answer = http.get(
            f"/v1/servers/{stack.server_id}/fs/{operation}",
            params={"scope": "site", "domain": "site1.test", "path": path},
        )
    assert answer.status_code == 422, answer.text
    assert error_code(answer) == "path_outside_scope"
    assert "secret" not in answer.text and "root:" not in answer.text


def test_jail_escape_answers_reveal_nothing(stack: Stack, jail_tree: Path) -> None:
    """An existing and a missing file outside the root get the very same answer."""
    with stack.http() as http:
        answers = [
            http.get(
                f"/v1/servers/{stack.server_id}/fs/read",
                params={"scope": "site", "domain": "site1.test", "path": path},
            ).json()
            for path in ("../site10/secret.txt", "../site10/nothing-here.txt")
        ]
    assert answers[0] == answers[1]


def test_jail_allows_links_that_stay_inside(stack: Stack, jail_tree: Path) -> None:
    with stack.http() as http:
        params = {"scope": "site", "domain": "site1.test"}
        read = http.get(f"/v1/servers/{stack.server_id}/fs/read", params={**params, "path": "inside/index.html"})
        assert read.status_code == 200 and "site1" in read.json()["content"]
        stat = http.get(f"/v1/servers/{stack.server_id}/fs/stat", params={**params, "path": "etc-link"})
        assert stat.status_code == 200 and stat.json()["type"] == "symlink" and stat.json()["link_target"] == "/etc"


def test_audit_before_past_any_entry_id_is_422(stack: Stack) -> None:
    with stack.http() as http:
        assert error_code(http.get("/v1/audit", params={"before": 2**63})) == "validation_error"
        assert http.get("/v1/audit", params={"before": 2**63 - 1}).status_code == 200


def test_nul_in_any_text_is_refused_in_words_not_a_500(stack: Stack) -> None:
    """PostgreSQL's text cannot hold NUL (SQLite's can): an email, filter, id, name or job argument
    with one is refused (or, on SQLite, matches nothing), never a 500."""
    nul, in_path = "a\x00b", "a%00b"
    asks: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/v1/auth/login", {"json": {"email": nul, "password": nul}}),
        ("GET", "/v1/audit", {"params": {"actor": nul}}),
        ("GET", "/v1/audit", {"params": {"action": nul, "server_id": nul}}),
        ("GET", f"/v1/servers/{in_path}", {}),
        ("GET", f"/v1/jobs/{in_path}", {}),
        ("GET", "/v1/jobs", {"params": {"server_id": nul}}),
        ("GET", f"/v1/load-balancers/{in_path}", {}),
        ("POST", "/v1/servers", {"json": {"name": nul, "kind": "full"}}),
        ("POST", f"/v1/servers/{stack.server_id}/jobs", {"json": {"kind": nul, "args": {}}}),
        ("POST", f"/v1/servers/{stack.server_id}/jobs", {"json": {"kind": "site.list", "args": {"x": nul}}}),
        ("GET", f"/v1/servers/{stack.server_id}/fs/list", {"params": {"scope": "root", "path": nul}}),
    ]
    with stack.http() as http:
        for method, url, options in asks:
            answer = http.request(method, url, **options)
            assert answer.status_code < 500, (method, url, answer.status_code, answer.text)
        assert http.get("/v1/health").status_code == 200
