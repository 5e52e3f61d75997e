"""Job kinds of `cache`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from contract.job_kinds.argtypes import Int, SiteDomain
from contract.job_kinds.base import INFRA, Args, JobKind, Result, kind

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

    @model_validator(mode="after")
    def _memcached_evicts_lru_only(self) -> CacheConfig:
        if self.engine == "memcached" and self.eviction not in (None, "allkeys-lru", "noeviction"):
            raise ValueError("memcached evicts by LRU (allkeys-lru) or not at all (noeviction)")
        return self


class OpcacheVersion(Result):
    version: str = Field(description="the PHP version (8.2)")
    installed: bool = Field(description="its opcache module is installed (mods-available/opcache.ini)")
    enabled: bool = Field(description="PHP-FPM loads the module (a conf.d link) and opcache.enable is on")
    memory_limit_bytes: int | None = Field(description="opcache.memory_consumption (None: not loaded)")
    fpm_running: bool = Field(description="the version's PHP-FPM master runs")


class CacheState(Result):
    engine: CacheEngine = Field(description="the cache")
    installed: bool = Field(description="its software is installed")
    running: bool | None = Field(description="it answers on its socket or port now (None: not a server of its own)")
    enabled: bool | None = Field(description="started at boot (None: not known, or not a service)")
    memory_used_bytes: int | None = Field(description="the memory its data takes now (None: not read)")
    memory_limit_bytes: int | None = Field(description="the most it may take (None: no limit, or not read)")
    eviction: str | None = Field(description="what goes when it is full: Redis' maxmemory-policy (None: not read)")
    hit_rate: float | None = Field(
        ge=0, le=1, description="hits / lookups since it started (None: no lookup yet, or not measured)"
    )
    versions: list[OpcacheVersion] = Field(default_factory=list, description="opcache: one row per PHP version")
    note: str | None = Field(default=None, description="what was not read, and why")


class CacheList(Result):
    caches: list[CacheState] = Field(description="the engine asked for, or all of them")


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("cache.status", CacheStatus, "Show the caches (memory, hit rate)", read=True, example={"engine": "redis"},
         result=CacheList),
    kind("cache.flush", CacheTarget, "Flush a cache", positional=("engine",),
         example={"engine": "page", "domain": "example.com"}),
    kind("cache.enable", CacheTarget, "Enable a cache", positional=("engine",),
         example={"engine": "page", "domain": "example.com"}),
    kind("cache.disable", CacheTarget, "Disable a cache", positional=("engine",), example={"engine": "memcached"}),
    kind("cache.config-set", CacheConfig, "Size a cache server", positional=("engine",),
         example={"engine": "redis", "memory_mb": 512, "eviction": "allkeys-lru"}),
]  # fmt: skip
