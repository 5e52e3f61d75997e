"""Job kinds of `cache`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import Int, SiteDomain
from contract.job_kinds.base import Args, JobKind, kind

CacheEngine = Literal["redis", "memcached", "opcache", "page"]


class CacheStatus(Args):
    engine: CacheEngine | None = None


class CacheTarget(Args):
    engine: CacheEngine
    domain: SiteDomain | None = None  # page and opcache caches can be per site


class CacheConfig(Args):
    engine: Literal["redis", "memcached"]
    memory_mb: Int = Field(ge=16, le=65536)
    eviction: Literal["allkeys-lru", "volatile-lru", "allkeys-lfu", "volatile-lfu", "noeviction"] | None = None


KINDS: list[JobKind] = [
    kind("cache.status", CacheStatus, "Show the caches (memory, hit rate)", read=True, example={"engine": "redis"}),
    kind("cache.flush", CacheTarget, "Flush a cache", positional=("engine",),
         example={"engine": "page", "domain": "example.com"}),
    kind("cache.enable", CacheTarget, "Enable a cache", positional=("engine",),
         example={"engine": "page", "domain": "example.com"}),
    kind("cache.disable", CacheTarget, "Disable a cache", positional=("engine",), example={"engine": "memcached"}),
    kind("cache.config-set", CacheConfig, "Size a cache server", positional=("engine",),
         example={"engine": "redis", "memory_mb": 512, "eviction": "allkeys-lru"}),
]  # fmt: skip
