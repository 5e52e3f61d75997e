"""What an agent says of files is checked against the wire models before a client sees it: a
value the models refuse (a negative or absurd size, a mode out of range, a type outside the enum,
an escape sequence in an owner's name or a site's domain) is `502 agent_error` naming where, and
one warning line in the control plane's log; a file name with control characters is a legal
Linux name and is carried as it is (clients draw it escaped).

The agent here is hand-made, a fake at a boundary we cannot otherwise reach: the real one only
says what `lstat` says. It is linked through the agent's own link client to the real stack, and
answers each call with the value its `path` names."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
import trio

from agent.link.call import Call
from agent.link.client import AgentLink, Backoff
from tests.conftest import Stack

pytestmark = pytest.mark.stack_variants("sqlite", "uvicorn")

GOOD = {
    "name": "index.html",
    "path": "index.html",
    "type": "file",
    "size": 12,
    "mode": 0o100644,
    "permissions": "rw-r--r--",
    "owner": "web",
    "group": "web",
    "mtime": "2026-01-01T00:00:00Z",
    "link_target": None,
}
# path -> the entry the lying agent reports for it, and where the API must say it is wrong
LIES: dict[str, tuple[dict[str, Any], str]] = {
    "negative-size": ({**GOOD, "size": -1}, "size"),
    "absurd-size": ({**GOOD, "size": 2**64 - 1}, "size"),
    "size-as-text": ({**GOOD, "size": "12"}, "size"),
    "mode-out-of-range": ({**GOOD, "mode": 0o1000000}, "mode"),
    "unknown-type": ({**GOOD, "type": "device"}, "type"),
    "escaping-owner": ({**GOOD, "owner": "web\x1b]0;owned\x07"}, "owner"),
    "bad-permissions": ({**GOOD, "permissions": "rwxrwxrwx\x1b[2J"}, "permissions"),
    "slash-in-name": ({**GOOD, "name": "a/b"}, "name"),
    "not-a-time": ({**GOOD, "mtime": "yesterday"}, "mtime"),
}
LEGAL = {**GOOD, "name": "evil\x1b[31mname\n.txt", "path": "evil\x1b[31mname\n.txt"}


class LyingFiles:
    """`fs.*` handlers that say whatever the path asks for."""

    @staticmethod
    def entry(path: str) -> dict[str, Any]:
        return LEGAL if path == "legal" else LIES[path][0] if path in LIES else GOOD

    async def list(self, call: Call) -> dict[str, Any]:
        page = {"path": "", "entries": [GOOD, self.entry(call.params["path"])], "next_cursor": None, "total": 2}
        if not (call.streaming and call.params.get("encoded")):
            return page
        data = orjson.dumps(page)
        await call.send_items([{"size": len(data)}])
        await call.send_bytes(data)
        return {"size": len(data)}

    async def stat(self, call: Call) -> dict[str, Any]:
        return self.entry(call.params["path"])

    async def scopes(self, call: Call) -> dict[str, Any]:
        return {"sites": [{"domain": "example.com", "slug": "example-com"}, {"domain": "x\x1b[2J.com", "slug": "x"}]}

    async def dirsize(self, call: Call) -> dict[str, Any]:
        return {"path": call.params["path"], "bytes": -5, "files": 1, "dirs": 0}

    async def download(self, call: Call) -> dict[str, Any]:
        await call.send_items([{"size": -1}])
        return {"size": -1}


@asynccontextmanager
async def lying_agent(stack: Stack, http: httpx.AsyncClient) -> AsyncIterator[str]:
    created = await http.post("/v1/servers", json={"name": f"lying-{uuid.uuid4().hex[:8]}", "kind": "full"})
    server_id, token = created.json()["server"]["id"], created.json()["agent_token"]
    files = LyingFiles()
    handlers = {
        "fs.list": files.list,
        "fs.stat": files.stat,
        "fs.scopes": files.scopes,
        "fs.dirsize": files.dirsize,
        "fs.download": files.download,
    }
    link = AgentLink(stack.base_url, token, handlers, version="1.0", backoff=Backoff(base=0.05, cap=0.2))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(link.run)
        with trio.fail_after(20):
            while not (await http.get(f"/v1/servers/{server_id}")).json()["agent"]["online"]:  # noqa: ASYNC110
                await trio.sleep(0.05)
        yield server_id
        nursery.cancel_scope.cancel()
    await http.delete(f"/v1/servers/{server_id}")


def _refusal(answer: httpx.Response, method: str, at: str) -> None:
    error = answer.json()["error"]
    assert (answer.status_code, error["code"], error["details"]) == (502, "agent_error", {"method": method, "at": at})
    assert error["message"].isprintable() and at in error["message"]


@pytest.mark.anyio
async def test_values_the_models_refuse_never_reach_a_client(stack: Stack) -> None:
    headers = {"Authorization": f"Bearer {stack.token}"}
    async with (
        httpx.AsyncClient(base_url=stack.base_url, headers=headers, timeout=30) as http,
        lying_agent(stack, http) as server_id,
    ):
        base = f"/v1/servers/{server_id}/fs"
        logged_before = stack.log().count("answered a value its model refuses")
        for path, (_entry, field) in LIES.items():
            root = {"scope": "root", "path": path}
            _refusal(await http.get(f"{base}/list", params=root), "fs.list", f"entries.1.{field}")
            _refusal(await http.get(f"{base}/stat", params=root), "fs.stat", field)
        _refusal(await http.get(f"{base}/scopes"), "fs.scopes", "sites.1.domain")
        _refusal(await http.get(f"{base}/dirsize", params={"scope": "root", "path": ""}), "fs.dirsize", "bytes")
        download = await http.get(f"{base}/download", params={"scope": "root", "path": "x"})
        assert (download.status_code, download.json()["error"]["code"]) == (502, "agent_error")
        # One line each in the control plane's log: 2 per lie, scopes, dirsize.
        logged = stack.log().count("answered a value its model refuses") - logged_before
        assert logged == 2 * len(LIES) + 2

        # Control characters are legal in a file name: carried as they are, for clients to escape.
        listed = await http.get(f"{base}/list", params={"scope": "root", "path": "legal"})
        assert listed.status_code == 200 and listed.json()["entries"][1]["name"] == LEGAL["name"]
        stat = await http.get(f"{base}/stat", params={"scope": "root", "path": "legal"})
        assert stat.status_code == 200 and stat.json()["name"] == LEGAL["name"]
