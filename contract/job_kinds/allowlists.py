"""The allow-lists of configuration values: php.ini directives and kernel parameters (sysctl).

Each entry names a setting and its type with bounds (`Setting`): a bounded integer, a size in PHP's
notation, a choice, a time zone, a few integers. Nothing on a list names a file, a user, a program
or code to load, and no kernel parameter that guards the system (``kernel.*``, ``fs.protected_*``,
``fs.suid_dumpable``, ``net.ipv4.ip_forward``...). They are data, defined once here:

- the argument models of the catalog take their keys (`allowed_key`) and value checks (`checked`)
  from these lists, so the control plane refuses anything else before a job exists, and the agent,
  which parses its argv into the same models, refuses it again;
- `GET /v1/job-kinds` shows them: the value field of each kind carries ``x-allowed`` (key -> the
  setting's `Setting.schema`), from which a client builds its form;
- the agent renders a site's pool only with what `PHP_INI` allows (a stored value it no longer
  allows is left out), and rewrites the version-wide file with only allowed directives.

Changing a list is a change of this file (a code review), never a setting of a server.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Any

from annotated_types import GroupedMetadata
from pydantic import AfterValidator, Field, Strict, StringConstraints, ValidationInfo, field_validator
from pydantic.config import JsonValue

_INT = re.compile(r"^(?:0|[1-9][0-9]{0,18})$")
SIZE_PATTERN = r"^([1-9][0-9]{0,9})([KMG])$"
_SIZE = re.compile(SIZE_PATTERN)
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size_bytes(text: str) -> int:
    """The bytes of a size in PHP's notation (``256M``); ValueError for anything else."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size: a number and K, M or G, e.g. 256M")
    return int(match.group(1)) * _UNITS[match.group(2)]


@dataclass(frozen=True)
class Setting:
    """One allowed setting: what it means, its type and bounds. `check` returns the value as it
    is written (or raises ValueError saying what the setting takes); `schema` is what
    `GET /v1/job-kinds` shows of it."""

    description: str

    @property
    def type_name(self) -> str:
        raise NotImplementedError

    def check(self, value: str) -> str:
        raise NotImplementedError

    def bounds(self) -> dict[str, Any]:
        return {}

    def schema(self) -> dict[str, Any]:
        return {"type": self.type_name, **self.bounds(), "description": self.description}


@dataclass(frozen=True)
class Integer(Setting):
    minimum: int
    maximum: int
    unit: str | None = None

    @property
    def type_name(self) -> str:
        return "integer"

    def check(self, value: str) -> str:
        if not _INT.match(value) or not self.minimum <= int(value) <= self.maximum:
            raise ValueError(f"takes a whole number from {self.minimum} to {self.maximum}{self._unit()}")
        return value

    def _unit(self) -> str:
        return f" ({self.unit})" if self.unit else ""

    def bounds(self) -> dict[str, Any]:
        unit = {"unit": self.unit} if self.unit else {}
        return {"minimum": self.minimum, "maximum": self.maximum, **unit}


@dataclass(frozen=True)
class Size(Setting):
    """A size in PHP's notation: a number and K, M or G (``128M``), within bounds."""

    minimum: str
    maximum: str

    @property
    def type_name(self) -> str:
        return "size"

    def check(self, value: str) -> str:
        bytes_ = size_bytes(value) if _SIZE.match(value) else None
        if bytes_ is None or not size_bytes(self.minimum) <= bytes_ <= size_bytes(self.maximum):
            raise ValueError(f"takes a size from {self.minimum} to {self.maximum}: a number and K, M or G, e.g. 256M")
        return value

    def bounds(self) -> dict[str, Any]:
        return {"minimum": self.minimum, "maximum": self.maximum, "pattern": _SIZE.pattern}


@dataclass(frozen=True)
class Choice(Setting):
    choices: tuple[str, ...]

    @property
    def type_name(self) -> str:
        return "choice"

    def check(self, value: str) -> str:
        if value not in self.choices:
            raise ValueError(f"takes one of {', '.join(self.choices)}")
        return value

    def bounds(self) -> dict[str, Any]:
        return {"enum": list(self.choices)}


def on_off(description: str) -> Choice:
    """A switch: On or Off (PHP reads more spellings; fleetdeck writes these two)."""
    return Choice(description, ("On", "Off"))


@cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


@dataclass(frozen=True)
class TimeZone(Setting):
    @property
    def type_name(self) -> str:
        return "timezone"

    def check(self, value: str) -> str:
        if value not in _zones():
            raise ValueError("takes a time zone of the IANA database, e.g. Europe/Berlin or UTC")
        return value


@dataclass(frozen=True)
class Integers(Setting):
    """`count` whole numbers separated by single spaces (a kernel parameter's vector), each within
    the bounds, in ascending order when `ascending` (a range: low high)."""

    count: int
    minimum: int
    maximum: int
    ascending: bool = False

    @property
    def type_name(self) -> str:
        return "integers"

    def check(self, value: str) -> str:
        parts = value.split(" ")
        numbers = [int(part) for part in parts if _INT.match(part)]
        fits = len(parts) == len(numbers) == self.count and all(self.minimum <= n <= self.maximum for n in numbers)
        if not fits or (self.ascending and numbers != sorted(numbers)):
            order = ", ascending" if self.ascending else ""
            raise ValueError(
                f"takes {self.count} whole numbers from {self.minimum} to {self.maximum}, separated by one space{order}"
            )
        return value

    def bounds(self) -> dict[str, Any]:
        return {"count": self.count, "minimum": self.minimum, "maximum": self.maximum, "ascending": self.ascending}


# --- php.ini ------------------------------------------------------------------------------------

_E_ALL = 32767

PHP_INI: Mapping[str, Setting] = MappingProxyType(
    {
        # resources
        "memory_limit": Size("the most memory one script may use", "16M", "16G"),
        "max_execution_time": Integer("the longest a script may run (0: no limit)", 0, 86400, "seconds"),
        "max_input_time": Integer("the longest a script may spend reading its request", 0, 86400, "seconds"),
        "max_input_vars": Integer("the most input variables a request may have", 100, 100_000),
        "max_input_nesting_level": Integer("the deepest nesting of input arrays", 16, 1024),
        "max_file_uploads": Integer("the most files one request may upload", 1, 1000),
        "upload_max_filesize": Size("the largest uploaded file", "64K", "16G"),
        "post_max_size": Size("the largest request body PHP reads", "64K", "16G"),
        "file_uploads": on_off("whether requests may upload files"),
        "default_socket_timeout": Integer("the timeout of socket streams", 1, 3600, "seconds"),
        "allow_url_fopen": on_off("whether fopen() and friends open http:// and ftp:// URLs"),
        "pcre.backtrack_limit": Integer("PCRE's backtracking limit", 1000, 100_000_000),
        "pcre.recursion_limit": Integer("PCRE's recursion limit", 1000, 100_000_000),
        "pcre.jit": on_off("PCRE's just-in-time compilation"),
        # errors
        "display_errors": on_off("whether errors are printed in the page"),
        "display_startup_errors": on_off("whether errors of PHP's start are printed"),
        "html_errors": on_off("whether printed errors are HTML"),
        "ignore_repeated_errors": on_off("whether an error repeated on the same line is logged once"),
        "error_reporting": Integer(
            f"which errors are reported, as a number: {_E_ALL} E_ALL, 22527 E_ALL & ~E_DEPRECATED & ~E_STRICT"
            " (production), 4437 errors only, 0 none",
            0,
            _E_ALL,
        ),
        # output and language
        "date.timezone": TimeZone("the default time zone of date functions"),
        "short_open_tag": on_off("whether <? opens PHP code"),
        "output_buffering": Integer("the output buffer of a request (0: none)", 0, 1 << 20, "bytes"),
        "implicit_flush": on_off("whether output is flushed after every print"),
        "zlib.output_compression": on_off("whether pages are gzip-compressed by PHP"),
        "zlib.output_compression_level": Integer("the level of PHP's gzip compression", 0, 9),
        "default_charset": Choice("the charset of pages", ("UTF-8", "ISO-8859-1", "ISO-8859-15", "Windows-1252")),
        "variables_order": Choice("which superglobals are filled, in order", ("GPCS", "EGPCS")),
        "mail.add_x_header": on_off("whether mail() adds the X-PHP-Originating-Script header"),
        "user_ini.cache_ttl": Integer("how long .user.ini files are cached", 0, 86400, "seconds"),
        # sessions (their files stay where the pool keeps them: no save_path here)
        "session.save_handler": Choice(
            "where sessions are kept (its extension must be loaded)", ("files", "redis", "memcached")
        ),
        "session.gc_maxlifetime": Integer("after how long an idle session may be removed", 60, 31_536_000, "seconds"),
        "session.gc_probability": Integer("the chance, over gc_divisor, that a request collects sessions", 0, 100),
        "session.gc_divisor": Integer("see gc_probability", 1, 100_000),
        "session.cookie_lifetime": Integer(
            "the session cookie's lifetime (0: until the browser closes)", 0, 31_536_000, "seconds"
        ),
        "session.cookie_secure": on_off("whether the session cookie is sent over https only"),
        "session.cookie_httponly": on_off("whether scripts in the page cannot read the session cookie"),
        "session.cookie_samesite": Choice("the session cookie's SameSite attribute", ("Lax", "Strict", "None")),
        "session.use_strict_mode": on_off("whether unknown session ids are refused"),
        "session.use_only_cookies": on_off("whether the session id comes from cookies only"),
        "session.auto_start": on_off("whether every request starts a session"),
        # opcache
        "opcache.enable": on_off("whether compiled scripts are cached"),
        "opcache.enable_cli": on_off("whether the command-line PHP caches compiled scripts"),
        "opcache.validate_timestamps": on_off("whether changed files are noticed (off: until the cache is reset)"),
        "opcache.revalidate_freq": Integer("how often changed files are looked for", 0, 86400, "seconds"),
        "opcache.memory_consumption": Integer("the opcache's shared memory", 8, 4096, "MB"),
        "opcache.interned_strings_buffer": Integer("the opcache's memory for interned strings", 2, 256, "MB"),
        "opcache.max_accelerated_files": Integer("the most scripts the opcache keeps", 200, 1_000_000),
        "opcache.max_wasted_percentage": Integer("the wasted share of memory that restarts the opcache", 1, 50, "%"),
        "opcache.save_comments": on_off("whether doc comments are kept (frameworks read them)"),
        "opcache.jit": Choice("PHP 8's JIT mode", ("disable", "off", "tracing", "function")),
        "opcache.jit_buffer_size": Size("the JIT's shared memory (PHP 8)", "1M", "1G"),
        # the realpath cache
        "realpath_cache_size": Size("the cache of resolved paths", "16K", "64M"),
        "realpath_cache_ttl": Integer("how long resolved paths are cached", 0, 86400, "seconds"),
    }
)
"""The php.ini directives fleetdeck sets, per site (a ``php_admin_value`` of the site's pool) and
for a whole version (``99-fleetdeck.ini``). Nothing that names a file or a folder (error_log,
include_path, open_basedir, session.save_path, upload_tmp_dir...), a user (opcache.preload_user),
a program (sendmail_path) or code to load (auto_prepend_file, opcache.preload, extension...)."""

PHP_INI_VERSION_ONLY: frozenset[str] = frozenset(
    {
        "opcache.enable_cli",
        "opcache.memory_consumption",
        "opcache.interned_strings_buffer",
        "opcache.max_accelerated_files",
        "opcache.max_wasted_percentage",
        "opcache.save_comments",
        "opcache.jit_buffer_size",
        "realpath_cache_size",
        "realpath_cache_ttl",
    }
)
"""Directives PHP reads once, when the FPM master starts (PHP_INI_SYSTEM): they apply to every site
of a version, so only the version-wide kind sets them."""

PHP_INI_PER_SITE: Mapping[str, Setting] = MappingProxyType(
    {name: setting for name, setting in PHP_INI.items() if name not in PHP_INI_VERSION_ONLY}
)


# --- sysctl ---------------------------------------------------------------------------------------

_PORTS = Integers("the ports the system picks local ports from: low high", 2, 1024, 65535, ascending=True)
_BUFFERS = "the TCP {} buffer sizes: min default max"

SYSCTL: Mapping[str, Setting] = MappingProxyType(
    {
        "net.core.somaxconn": Integer("the longest queue of connections waiting for accept()", 128, 65535),
        "net.core.netdev_max_backlog": Integer(
            "packets queued when the interface is faster than the kernel", 1000, 262_144
        ),
        "net.core.rmem_default": Integer("the default receive buffer of sockets", 4096, 67_108_864, "bytes"),
        "net.core.wmem_default": Integer("the default send buffer of sockets", 4096, 67_108_864, "bytes"),
        "net.core.rmem_max": Integer("the largest receive buffer of sockets", 4096, 268_435_456, "bytes"),
        "net.core.wmem_max": Integer("the largest send buffer of sockets", 4096, 268_435_456, "bytes"),
        "net.ipv4.tcp_max_syn_backlog": Integer("half-open connections remembered", 128, 262_144),
        "net.ipv4.tcp_fin_timeout": Integer("how long an orphaned connection stays in FIN-WAIT-2", 5, 120, "seconds"),
        "net.ipv4.tcp_keepalive_time": Integer("idle time before keepalive probes", 60, 7200, "seconds"),
        "net.ipv4.tcp_keepalive_intvl": Integer("time between keepalive probes", 10, 300, "seconds"),
        "net.ipv4.tcp_keepalive_probes": Integer("unanswered probes before a connection is dropped", 1, 20),
        "net.ipv4.tcp_tw_reuse": Choice("reuse of TIME-WAIT sockets: 0 off, 1 on, 2 loopback only", ("0", "1", "2")),
        "net.ipv4.tcp_slow_start_after_idle": Choice("whether an idle connection starts slow again", ("0", "1")),
        "net.ipv4.tcp_fastopen": Choice("TCP Fast Open: 1 client, 2 server, 3 both, 0 off", ("0", "1", "2", "3")),
        "net.ipv4.tcp_mtu_probing": Choice("path MTU probing: 0 off, 1 after a black hole, 2 always", ("0", "1", "2")),
        "net.ipv4.tcp_max_tw_buckets": Integer("the most TIME-WAIT sockets", 4096, 4_194_304),
        "net.ipv4.tcp_rmem": Integers(_BUFFERS.format("receive"), 3, 4096, 268_435_456, ascending=True),
        "net.ipv4.tcp_wmem": Integers(_BUFFERS.format("send"), 3, 4096, 268_435_456, ascending=True),
        "net.ipv4.ip_local_port_range": _PORTS,
        "net.netfilter.nf_conntrack_max": Integer("the most tracked connections", 65536, 4_194_304),
        "vm.swappiness": Integer("how readily memory is swapped out", 0, 100),
        "vm.dirty_ratio": Integer("the share of memory dirty pages may take before writers wait", 1, 90, "%"),
        "vm.dirty_background_ratio": Integer("the share of memory at which dirty pages are written", 1, 90, "%"),
        "vm.vfs_cache_pressure": Integer("how readily the inode and dentry caches are reclaimed", 1, 1000),
        "vm.overcommit_memory": Choice("memory overcommit: 0 heuristic, 1 always (Redis), 2 never", ("0", "1", "2")),
        "vm.max_map_count": Integer("the most memory maps a process may have", 65530, 2_097_152),
        "fs.file-max": Integer("the most open files of the system", 65536, 100_000_000),
        "fs.inotify.max_user_watches": Integer("the most inotify watches per user", 8192, 4_194_304),
        "fs.inotify.max_user_instances": Integer("the most inotify instances per user", 128, 8192),
        "fs.aio-max-nr": Integer("the most asynchronous I/O requests", 65536, 4_194_304),
    }
)
"""The kernel parameters ``tuning.sysctl-set`` sets: network queues and buffers, memory and file
limits. None of the security knobs (``kernel.*``: randomize_va_space, kptr_restrict,
yama.ptrace_scope, core_pattern...; ``fs.protected_*``, ``fs.suid_dumpable``; ``net.ipv4.ip_forward``,
``*.rp_filter``, ``*.accept_redirects``, ``tcp_syncookies``...)."""


# --- as argument types --------------------------------------------------------------------------


class allowed_key(GroupedMetadata):
    """The metadata of a key field: `Annotated[str, allowed_key(SYSCTL, "a kernel parameter")]`.
    A strict string that must be one of `names`; its JSON schema is an ``enum`` of them.
    `elsewhere` says, for a key not taken here, why and which kind takes it."""

    def __init__(self, names: Iterable[str], what: str, elsewhere: Mapping[str, str] | None = None) -> None:
        self.names = frozenset(names)
        self.what = what
        self.elsewhere = dict(elsewhere or {})

    def __iter__(self) -> Iterator[object]:
        yield Strict()
        yield AfterValidator(self._check)
        names: list[JsonValue] = [*sorted(self.names)]
        yield Field(description=self.what, json_schema_extra={"enum": names})

    def _check(self, value: str) -> str:
        if value in self.names:
            return value
        if value in self.elsewhere:
            raise ValueError(self.elsewhere[value])
        raise ValueError(f"{value!r} is not on fleetdeck's allow-list (GET /v1/job-kinds lists the keys it takes)")


def check_setting(settings: Mapping[str, Setting], key: str, value: str) -> str:
    """`value` as the setting `key` of `settings` takes it; ValueError naming the key and what it
    takes (or that the key is not on the list)."""
    setting = settings.get(key)
    if setting is None:
        raise ValueError(f"{key} is not on the allow-list")
    try:
        return setting.check(value)
    except ValueError as exc:
        raise ValueError(f"{key} {exc}") from None


def setting_problem(settings: Mapping[str, Setting], key: object, value: object) -> str | None:
    """Why ``key = value`` is not allowed by `settings` (values stored before a list changed), or None."""
    if not isinstance(key, str) or not isinstance(value, str):
        return "not text"
    try:
        check_setting(settings, key, value)
    except ValueError as exc:
        return str(exc)
    return None


def value_of_its_key(settings: Mapping[str, Setting]) -> Any:
    """The validator of a model's ``value`` field, checked by `check_setting` as the setting named
    by the model's ``key`` field (declared before it) takes it: ``_value = value_of_its_key(...)``."""

    def check(cls: type, value: str, info: ValidationInfo) -> str:
        key = info.data.get("key")
        return value if key is None else check_setting(settings, key, value)

    return field_validator("value")(classmethod(check))


def allowed_values(settings: Mapping[str, Setting]) -> dict[str, Any]:
    """The ``x-allowed`` of a value field: each key's `Setting.schema`."""
    return {"x-allowed": {name: setting.schema() for name, setting in sorted(settings.items())}}


@dataclass(frozen=True)
class setting_value(GroupedMetadata):
    """The metadata of one setting used as a field of its own (`site.limits`' memory_limit is
    PHP_INI's): the setting's check; its description, and its `Setting.schema` as ``x-setting``."""

    setting: Setting
    pattern: str

    def __iter__(self) -> Iterator[object]:
        yield Strict()
        yield StringConstraints(pattern=self.pattern, max_length=64)
        yield AfterValidator(self._check)
        yield Field(description=self.setting.description, json_schema_extra={"x-setting": self.setting.schema()})

    def _check(self, value: str) -> str:
        return self.setting.check(value)
