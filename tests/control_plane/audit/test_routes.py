"""`GET /v1/audit` through the typed client: the contract's filters, the optional `actor` and
`outcome` ones, paging with `before` under a filter, and members refused."""

from __future__ import annotations

import uuid

import pytest

from api_client import Client
from api_client import errors as api_errors
from tests.conftest import Stack
from tests.helpers import wait_until

pytestmark = pytest.mark.stack_variants("sqlite", "postgresql")


@pytest.mark.anyio
async def test_actor_and_outcome_filter_on_the_server_and_paging_stays_within_the_filter(stack: Stack) -> None:
    async with Client(stack.base_url, token=stack.token) as client:
        for name in ("one", "two", "three"):
            await client.auth.create_token(f"audit-{name}-{uuid.uuid4().hex[:6]}")
        owner = (await client.auth.me()).user.email
        mine = await client.audit.list(actor=owner, limit=1000)
        assert mine and all(e.actor.email == owner for e in mine)
        ids = [int(e.id) for e in mine]
        assert ids == sorted(ids, reverse=True)  # newest first
        # Pages of one under a filter: each a match, together the same entries as one big page.
        paged, before = [], None
        for _ in range(3):
            page = await client.audit.list(actor=owner, action="tokens.create", limit=1, before=before)
            assert len(page) == 1 and page[0].action == "tokens.create" and page[0].actor.email == owner
            paged.append(page[0].id)
            before = page[0].id
        whole = await client.audit.list(actor=owner, action="tokens.create", limit=3)
        assert paged == [e.id for e in whole]
        # By user id too.
        user_id = mine[0].actor.user_id
        assert user_id and {e.id for e in await client.audit.list(actor=user_id, limit=1000)} == {e.id for e in mine}
        assert all(e.outcome == "ok" for e in await client.audit.list(outcome="ok", limit=50))
        assert all(e.outcome == "error" for e in await client.audit.list(outcome="error", limit=50))
        assert await client.audit.list(actor=f"nobody-{uuid.uuid4().hex}@example.com") == []


def test_an_unknown_outcome_is_422(stack: Stack) -> None:
    with stack.http() as http:
        refused = http.get("/v1/audit", params={"outcome": "maybe"})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "validation_error"


@pytest.mark.anyio
async def test_a_member_is_refused_the_audit_log(stack: Stack) -> None:
    email = f"member-{uuid.uuid4().hex[:6]}@demo.test"
    stack.admin("create-user", email, "--org", "demo", "--role", "member", "--password", "pw-member-1")
    async with Client(stack.base_url, token=stack.login(email, "pw-member-1")) as client:
        with pytest.raises(api_errors.Forbidden):
            await client.audit.list()


def test_a_target_with_nul_is_audited_and_the_control_plane_lives_on(stack: Stack) -> None:
    """A path may hold NUL (the agent refuses it); PostgreSQL's text cannot. Its audit entry is
    written with a stand-in, on both databases. Before, on PostgreSQL the failed audit write of
    the operation's end took the whole control plane down."""
    marker = f"nul-{uuid.uuid4().hex[:8]}"
    body = {"scope": "root", "paths": [f"{marker}\x00x"], "format": "zip", "destination": f"{marker}.zip"}
    with stack.http() as http:
        started = http.post(f"/v1/servers/{stack.server_id}/fs/compress", json=body)
        assert started.status_code == 202, started.text

        def audited() -> list[dict[str, object]]:
            entries = http.get("/v1/audit", params={"action": "fs.compress", "limit": 50}).json()["entries"]
            return [e for e in entries if marker in str(e.get("target"))]

        wait_until(audited, timeout=20)
        entry = audited()[0]
        assert entry["target"] == f"{marker}\u2400x" and entry["outcome"] == "error"
        assert http.get("/v1/health").status_code == 200
    assert stack.process.poll() is None


@pytest.mark.anyio
async def test_q_searches_every_entry_on_the_server_in_any_case(stack: Stack) -> None:
    """`q`: text in the action, target, actor's email or error code, in any case; found however
    old the entry is, paged with `before` like the other filters; `%` and `_` are plain text."""
    name = f"Find-Me-{uuid.uuid4().hex[:8]}"
    async with Client(stack.base_url, token=stack.token) as client:
        made = [await client.servers.create(f"{name}-{n}", kind="lite") for n in (1, 2)]
        for server in made:
            await client.servers.delete(server.server.id)
        for index in range(3):  # newer entries on top of them
            await client.auth.create_token(f"audit-search-{index}-{uuid.uuid4().hex[:6]}")
        found = await client.audit.list(text=name.upper(), limit=1000)
        assert [(e.action, e.target) for e in found] == [("servers.create", f"{name}-{n}") for n in (2, 1)]
        first = await client.audit.list(text=name.lower(), limit=1)
        older = await client.audit.list(text=name.lower(), limit=1, before=first[0].id)
        assert [first[0].id, older[0].id] == [e.id for e in found]
        # By action and by actor's email too; a wildcard character matches only itself.
        owner = (await client.auth.me()).user.email
        assert {e.action for e in await client.audit.list(text="RVERS.CRE", limit=50)} == {"servers.create"}
        assert all(e.actor.email == owner for e in await client.audit.list(text=owner, actor=owner, limit=50))
        assert all("%" in (e.target or "") + e.action for e in await client.audit.list(text="%", limit=1000))
    with stack.http() as http:
        refused = http.get("/v1/audit", params={"q": ""})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "validation_error"
