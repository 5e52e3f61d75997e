"""The ``fs.*`` RPC handlers: validate params, pick the scope's jail, do the work in a thread.

The blocking file work runs in `trio.to_thread.run_sync`, so the link keeps answering heartbeats
and other calls while a big directory is listed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import trio

from agent.link.call import Call, Handler
from agent.link.protocol import RpcError
from agent.sites import SiteRegistry

from . import read
from .jail import Jail

T = TypeVar("T")

_MAX_CURSOR = 1024  # base64 of a file name (at most 255 bytes)


class FileHandlers:
    """``fs.scopes``, ``fs.list``, ``fs.stat`` and ``fs.read`` over `home` and its sites.

    The root scope is `home` itself; a site scope is ``home/<slug>``, itself resolved inside
    the home jail (a site folder that is a symlink cannot lead out of the home).
    """

    def __init__(self, home: str, sites: SiteRegistry, *, use_openat2: bool | None = None) -> None:
        self.home = home
        self.sites = sites
        self._use_openat2 = use_openat2

    def handlers(self) -> dict[str, Handler]:
        return {
            "fs.scopes": self.fs_scopes,
            "fs.list": self.fs_list,
            "fs.stat": self.fs_stat,
            "fs.read": self.fs_read,
        }

    async def fs_scopes(self, call: Call) -> dict[str, Any]:
        sites = await trio.to_thread.run_sync(self.sites.sites)
        return {"sites": [site.to_wire() for site in sites]}

    async def fs_list(self, call: Call) -> dict[str, Any]:
        params = call.params
        path, cursor, limit = _path(params), _cursor(params), _limit(params)
        return await self._in_scope(params, lambda jail: read.list_dir(jail, path, cursor=cursor, limit=limit))

    async def fs_stat(self, call: Call) -> dict[str, Any]:
        path = _path(call.params)
        return await self._in_scope(call.params, lambda jail: read.stat_entry(jail, path))

    async def fs_read(self, call: Call) -> dict[str, Any]:
        path = _path(call.params)
        return await self._in_scope(call.params, lambda jail: read.read_text(jail, path))

    async def _in_scope(self, params: dict[str, Any], work: Callable[[Jail], T]) -> T:
        return await trio.to_thread.run_sync(partial(self._run_in_scope, params, work))

    def _run_in_scope(self, params: dict[str, Any], work: Callable[[Jail], T]) -> T:
        with self.open_scope(params) as jail:
            return work(jail)

    def open_scope(self, params: dict[str, Any]) -> Jail:
        """The jail of the request's scope (blocking; the caller closes it)."""
        scope = params.get("scope")
        if scope == "root":
            return Jail(self.home, use_openat2=self._use_openat2)
        if scope != "site":
            raise RpcError("validation_error", "scope must be 'site' or 'root'")
        site = self.sites.lookup(params.get("domain"))
        with Jail(self.home, use_openat2=self._use_openat2) as home:
            try:
                return home.subjail(site.slug)
            except RpcError as exc:
                if exc.code == "not_found":
                    raise RpcError("not_found", f"the folder of site {site.domain} is missing") from None
                raise


def _path(params: dict[str, Any]) -> str:
    path = params.get("path", "")
    if not isinstance(path, str):
        raise RpcError("validation_error", "path must be a string")
    return path


def _cursor(params: dict[str, Any]) -> str | None:
    cursor = params.get("cursor")
    if cursor is not None and (not isinstance(cursor, str) or len(cursor) > _MAX_CURSOR):
        raise RpcError("validation_error", "invalid cursor")
    return cursor or None


def _limit(params: dict[str, Any]) -> int:
    limit = params.get("limit")
    if limit is None:
        return read.DEFAULT_LIMIT
    if type(limit) is not int or not 1 <= limit <= read.MAX_LIMIT:
        raise RpcError("validation_error", f"limit must be an integer from 1 to {read.MAX_LIMIT}")
    return limit
