"""The shapes of job arguments: reusable `Annotated` types for the catalog's argument models.

Every string that can reach an argv has a shape here (a pattern, an enum or a parser from the
standard library); where some text is unavoidable (a title, a search string) it is a bounded
`SafeText`. On top of the per-type shapes, `value_problem` is the one central rule every argv value
obeys, whatever its type: not empty, no leading `-`, no leading or trailing space, no shell syntax
(`;|&$`<>(){}`, quotes, backslash), no glob (`*?[]`, except `*` inside a `CronSchedule`), no control
or invisible character (newline, NUL, tab, bidi overrides, ...). The shapes call it too, so a bad
value is refused at its own field; `JobKind.build` runs it again over the finished argv, so a new
kind cannot forget it. A structured argument (a list, a mapping, a nested model) is one argv value
holding JSON (`load_structure`, `dump_structure`): its own quotes and brackets are JSON's, and
`structure_problem` holds every string inside it (keys too) to the same central rule.

Patterns are written for both regex engines (pydantic's Rust engine and Python's `re`): no
look-around, `[0-9]` rather than `\\d`. Values are strict: a string field takes only a string, an
int field only an int, a bool field only a bool.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
import unicodedata
import zoneinfo
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal

from annotated_types import GroupedMetadata
from pydantic import AfterValidator, Field, SecretStr, Strict, StringConstraints
from pydantic.config import JsonDict
from pydantic.fields import FieldInfo

from contract.job_kinds.allowlists import (
    PHP_INI,
    PHP_INI_PER_SITE,
    PHP_INI_VERSION_ONLY,
    SIZE_PATTERN,
    SYSCTL,
    allowed_key,
    setting_value,
)

# --- the central rule -----------------------------------------------------------------------------

SHELL_CHARS = frozenset(";|&$`<>(){}'\"\\")
GLOB_CHARS = frozenset("*?[]")
MAX_VALUE_LENGTH = 8192
# Unicode categories never allowed in a value: controls (newline, NUL, tab, DEL...), format
# characters (bidi overrides, zero-width joiners), surrogates, private use, unassigned, and the
# line and paragraph separators.
_BANNED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def value_problem(value: str) -> str | None:
    """Why `value` may not be an argv value, or None when it may. The one central rule."""
    if not value:
        return "must not be empty"
    if len(value) > MAX_VALUE_LENGTH:
        return f"must be at most {MAX_VALUE_LENGTH} characters"
    if value.startswith("-"):
        return "must not begin with '-'"
    if value != value.strip(" "):
        return "must not begin or end with a space"
    for char in value:
        if char in SHELL_CHARS:
            return f"must not contain {char!r} (shell syntax)"
        if char in GLOB_CHARS and not (char == "*" and is_cron_schedule(value)):
            return f"must not contain {char!r} (glob syntax)"
        if char != " " and (char.isspace() or unicodedata.category(char) in _BANNED_CATEGORIES):
            return f"must not contain the character U+{ord(char):04X}"
    return None


# A structured value is one argument: what Linux takes as one (MAX_ARG_STRLEN, 32 pages, with its
# NUL), so `fleetdeck agent run` can be given it too. lb.apply's 256 backends of the longest ids
# and host names take 117,761 (tests/contract/test_catalog.py).
MAX_STRUCTURE_LENGTH = 128 * 1024 - 1
MAX_STRUCTURE_DEPTH = 16  # arrays and objects within each other (a catalog model nests two or three)

Structure = list[Any] | dict[str, Any]


def dump_structure(value: Structure) -> str:
    """The argv value of a structured argument: compact JSON, non-ASCII characters as they are."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def load_structure(text: str) -> Structure:
    """The structured argument an argv value holds (the inverse of `dump_structure`; any JSON
    layout is taken, as a person may type it).

    Raises:
        ValueError: saying why `text` is not one: too long, not JSON, not an array or an object,
            nested too deep, a key given twice or a number JSON has no literal for (NaN, Infinity).
    """
    if len(text) > MAX_STRUCTURE_LENGTH:
        raise ValueError(f"must be at most {MAX_STRUCTURE_LENGTH} characters")
    try:
        value = json.loads(text, object_pairs_hook=_one_value_per_key, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ValueError(f"is not JSON: {exc}") from None
    except RecursionError:  # deeper than the parser goes
        raise ValueError(_TOO_DEEP) from None
    if not isinstance(value, (list, dict)):
        raise ValueError("must be a JSON array or object")
    if _depth(value) > MAX_STRUCTURE_DEPTH:
        raise ValueError(_TOO_DEEP)
    return value


_TOO_DEEP = f"must not nest arrays and objects more than {MAX_STRUCTURE_DEPTH} deep"


def _depth(value: Any) -> int:
    """How deep arrays and objects nest in `value` (walked without recursion)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, depth)
            todo += [(child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


def _one_value_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ValueError("holds a key twice")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"holds {name}, which is not a JSON number")


def structure_problem(value: Structure) -> str | None:
    """Why the structured argument `value` may not travel in an argv, or None when it may: every
    string in it, keys included, obeys `value_problem` (an empty string aside: inside JSON it is
    not a missing value)."""
    for text in _strings(value):
        problem = value_problem(text) if text else None
        if problem is not None:
            return f"holds a string that {problem}"
    return None


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _safe(value: str) -> str:
    problem = value_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


Safe = AfterValidator(_safe)


@dataclass(frozen=True)
class shaped(GroupedMetadata):
    """The metadata of a strict string shape: `Annotated[str, shaped(pattern, description)]`.

    It expands (in this order) to `Strict()`, the `StringConstraints` (pattern and lengths), the
    extra `check` (a function raising ValueError, or returning the value normalised), the central
    rule `Safe` (unless `safe=False`: the check calls `_safe` itself, e.g. to allow an empty value)
    and the `Field` carrying the description (and a JSON schema `format`) served to clients.
    """

    pattern: str
    description: str | None
    min_length: int | None = None
    max_length: int | None = None
    check: Callable[[str], str] | None = None
    safe: bool = True
    format: str | None = None

    def __iter__(self) -> Iterator[object]:
        yield Strict()
        yield StringConstraints(min_length=self.min_length, max_length=self.max_length, pattern=self.pattern)
        if self.check is not None:
            yield AfterValidator(self.check)
        if self.safe:
            yield Safe
        extra: JsonDict | None = {"format": self.format} if self.format is not None else None
        yield Field(description=self.description, json_schema_extra=extra)


def listed_by(kind: str, items: str | None, key: str, *, noun: str, details: tuple[str, ...] = ()) -> FieldInfo:
    """The metadata of a field that names a thing the server has: `Annotated[Slug, listed_by(...)]`.

    Its JSON schema carries `x-source`: the read kind listing those things (`kind`), where its
    result holds the list (`items`, None: the result is the list), the item's field that is the
    value (`key`), the fields shown beside it (`details`) and what they are called (`noun`,
    plural). A client offers them as a picker; the value is still typed and checked as any other.
    A field that makes a new thing (`site.create`'s domain) takes the plain shape instead.
    tests/contract/test_sources.py holds every `x-source` to a read kind of the catalog.
    """
    source: JsonDict = {"kind": kind, "items": items, "key": key, "details": list(details), "noun": noun}
    info: FieldInfo = Field(json_schema_extra={"x-source": source})
    return info


def _check(pattern: str, value: str) -> bool:
    return re.fullmatch(pattern, value) is not None


# --- text -----------------------------------------------------------------------------------------

# No shell or glob syntax, no control characters, no leading '-' or space (the rest is `value_problem`).
_SAFE_TEXT = r"^[^-\s;|&$`<>(){}'\"\\*?\[\]][^;|&$`<>(){}'\"\\*?\[\]\x00-\x1f\x7f]*$"

SafeText = Annotated[
    str,
    shaped(
        _SAFE_TEXT,
        "short text: no shell syntax, quotes, globs or control characters",
        min_length=1,
        max_length=200,
    ),
]
"""Unavoidable human text (a title, a comment): bounded, no shell syntax."""

SearchText = Annotated[
    str,
    shaped(
        _SAFE_TEXT,
        "a literal (fixed-string) search: no shell syntax, quotes, globs or regex brackets",
        min_length=1,
        max_length=200,
    ),
]

# --- names ----------------------------------------------------------------------------------------

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_DOMAIN = rf"(?:{_LABEL}\.)+{_LABEL}"
_HOST = rf"{_LABEL}(?:\.{_LABEL})*"


def _domain(value: str) -> str:
    if value.rsplit(".", 1)[-1].isdigit():
        raise ValueError("the top-level label of a domain name may not be all digits")
    return value


DomainName = Annotated[
    str,
    shaped(
        rf"^{_DOMAIN}$",
        "RFC 1123 host name, lowercase, at least one dot (IDNs in punycode)",
        min_length=3,
        max_length=253,
        check=_domain,
    ),
]


SiteDomain = Annotated[DomainName, listed_by("site.list", "sites", "domain", noun="sites", details=("home",))]
"""The domain of a site the server has (a new site's domain is a plain `DomainName`)."""


def _hostname(value: str) -> str:
    if value.isdigit() or value.rsplit(".", 1)[-1].isdigit():
        raise ValueError("the last label of a host name may not be all digits")
    return value


HostName = Annotated[
    str,
    shaped(
        rf"^{_HOST}$",
        "RFC 1123 host name, lowercase (a single label allowed)",
        min_length=1,
        max_length=253,
        check=_hostname,
    ),
]

Slug = Annotated[
    str,
    shaped(
        r"^[a-z0-9][a-z0-9-]{0,62}$",
        "lowercase letters, digits and '-', 1-63 characters, not starting with '-'",
    ),
]

Id = Annotated[str, shaped(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$", "an opaque identifier")]

ServiceName = Annotated[
    str,
    shaped(
        r"^[A-Za-z0-9][A-Za-z0-9@._-]{0,127}$",
        "a system service (unit) name, e.g. nginx or php8.3-fpm",
    ),
]

DockerName = Annotated[
    str,
    shaped(
        r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
        "a docker container, volume or network name, or a container id",
    ),
]

EnvName = Annotated[str, shaped(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$", "an environment variable name")]

PluginSlug = Annotated[str, shaped(r"^[a-z0-9][a-z0-9_.-]{0,199}$", "a WordPress.org plugin or theme slug")]

PackageName = Annotated[str, shaped(r"^[A-Za-z0-9][A-Za-z0-9+._-]{0,127}$", "an OS package name (deb or rpm)")]

RegistryPackage = Annotated[
    str,
    shaped(
        r"^(?:@[a-z0-9][a-z0-9._-]{0,99}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,213}$",
        "an npm (optionally @scope/) or PyPI package name",
    ),
]

ModelName = Annotated[
    str,
    shaped(
        r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}(?::[A-Za-z0-9][A-Za-z0-9._-]{0,63})?$",
        "an AI model reference, e.g. llama3.1:8b or openai/gpt-4o",
        check=lambda v: _no_dotdot(v, "model name"),
    ),
]

# --- configuration values: keys from the allow-lists of `allowlists` ------------------------------

PhpDirective = Annotated[str, allowed_key(PHP_INI, "a php.ini directive fleetdeck sets (the allow-list)")]
"""Any directive of `allowlists.PHP_INI` (reading, or setting it for a whole version)."""

SitePhpDirective = Annotated[
    str,
    allowed_key(
        PHP_INI_PER_SITE,
        "a php.ini directive of a site's pool (the allow-list)",
        elsewhere={
            name: f"{name} applies to every site of a PHP version: php.ini-global-set (sysadmin) sets it"
            for name in PHP_INI_VERSION_ONLY
        },
    ),
]

IniValue = Annotated[
    str,
    shaped(
        r"^[A-Za-z0-9][A-Za-z0-9_./+-]{0,63}$",
        "the directive's value: its type and bounds depend on the directive (x-allowed)",
    ),
]

MemoryLimit = Annotated[str, setting_value(PHP_INI["memory_limit"], SIZE_PATTERN)]
UploadLimit = Annotated[str, setting_value(PHP_INI["upload_max_filesize"], SIZE_PATTERN)]
"""upload_max_filesize, post_max_size and nginx's client_max_body_size of a site (`site.limits`)."""

SysctlKey = Annotated[str, allowed_key(SYSCTL, "a kernel parameter fleetdeck sets (the allow-list)")]

SysctlValue = Annotated[
    str,
    shaped(
        r"^[0-9]{1,19}(?: [0-9]{1,19}){0,3}$",
        "one to four whole numbers separated by single spaces: their bounds depend on the key (x-allowed)",
    ),
]

Locale = Annotated[str, shaped(r"^[a-z]{2,3}(?:_[A-Z]{2})?(?:\.UTF-8)?$", "a locale, e.g. en_US or de_DE.UTF-8")]

Duration = Annotated[str, shaped(r"^[1-9][0-9]{0,5}[smhd]$", "a duration: a number and s, m, h or d, e.g. 15m")]

BucketName = Annotated[
    str,
    shaped(
        r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
        "an S3 bucket name",
        check=lambda v: _no_dotdot(v, "bucket name"),
    ),
]

AccessKeyId = Annotated[str, shaped(r"^[A-Za-z0-9]{8,128}$", "an S3 access key id (not secret; the secret key is)")]

RegionName = Annotated[str, shaped(r"^[a-z0-9][a-z0-9-]{0,31}$", "a storage region, e.g. us-east-1 or auto")]

PhpModule = Annotated[str, shaped(r"^[a-z][a-z0-9_]{0,63}$", "a PHP extension module, e.g. pdo_mysql or imagick")]

_DNS_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
DnsName = Annotated[
    str,
    shaped(
        rf"^(?:@|{_DNS_LABEL}(?:\.{_DNS_LABEL})*)$",
        "a record name relative to its zone: @ for the apex, or labels such as www or _dmarc",
        max_length=253,
    ),
]

DnsLookupName = Annotated[
    str,
    shaped(
        rf"^{_DNS_LABEL}(?:\.{_DNS_LABEL})*\.?$",
        "a fully qualified name to look up, e.g. www.example.com or _dmarc.example.com",
        max_length=253,
    ),
]

DnsValue = Annotated[
    str,
    shaped(
        _SAFE_TEXT,
        "a record value; its shape is checked against the record type",
        min_length=1,
        max_length=255,
    ),
]

# --- users and mail ---------------------------------------------------------------------------------

RESERVED_USERNAMES = frozenset(
    {
        "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy",
        "www-data", "backup", "list", "irc", "gnats", "nobody", "nogroup", "sshd", "messagebus", "syslog",
        "mysql", "postgres", "redis", "mongodb", "memcache", "nginx", "apache", "docker", "polkitd",
        "postfix", "dovecot", "dovenull", "vmail", "opendkim", "clamav", "fleetdeck", "_apt", "ubuntu",
        "admin", "operator", "halt", "shutdown", "ftp", "adm", "tss", "chrony", "ntp", "landscape",
        "pollinate", "tcpdump", "uuidd", "lxd", "usbmux", "dnsmasq", "avahi", "rtkit", "colord",
    }
)  # fmt: skip


def _not_reserved_user(value: str) -> str:
    if value in RESERVED_USERNAMES or value.startswith("systemd-"):
        raise ValueError(f"{value!r} is a system account and cannot be managed here")
    return value


Username = Annotated[
    str,
    shaped(
        r"^[a-z_][a-z0-9_-]{0,31}$",
        "a POSIX user name (not a system account)",
        check=_not_reserved_user,
    ),
]

SystemUser = Annotated[Username, listed_by("user.list", "users", "username", noun="users", details=("home",))]
"""A user the server has (a new user's name is a plain `Username`)."""

LoginName = Annotated[
    str,
    shaped(
        r"^[a-z_][a-z0-9_.-]{0,31}$",
        "a user name to log in with on a remote host (may be root)",
    ),
]

Email = Annotated[
    str,
    shaped(
        rf"^[A-Za-z0-9_+][A-Za-z0-9._+-]{{0,63}}@{_DOMAIN}$",
        "an e-mail address: local@domain, no quoting or comments",
        max_length=254,
        check=lambda v: _domain(_no_dotdot(v, "address")),
    ),
]

WpUser = Annotated[str, shaped(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,59}$", "a WordPress user login")]

RegistryUser = Annotated[str, shaped(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$", "a container registry user name")]

# --- databases --------------------------------------------------------------------------------------

_RESERVED_DATABASES = frozenset(
    {"mysql", "information_schema", "performance_schema", "sys", "postgres", "template0", "template1",
     "admin", "local", "config"}
)  # fmt: skip
_RESERVED_DB_USERS = frozenset({"root", "mysql.sys", "mysql.session", "mysql.infoschema", "debian-sys-maint",
                                "postgres", "admin"})  # fmt: skip


def _not_reserved_db(value: str) -> str:
    if value.lower() in _RESERVED_DATABASES:
        raise ValueError(f"{value!r} is a system database")
    return value


AGENT_DB_ROLE_PREFIX = "fleetdeck_"
"""The agent's own database accounts (a restore's throw-away importer, a database's owner role)
start with it: no job names one, so none can be made, granted or dropped by hand."""


def _not_reserved_db_user(value: str) -> str:
    if value.lower() in _RESERVED_DB_USERS:
        raise ValueError(f"{value!r} is a system database account")
    if value.lower().startswith(AGENT_DB_ROLE_PREFIX):
        raise ValueError(f"{value!r} starts with {AGENT_DB_ROLE_PREFIX!r}, kept for the agent's own accounts")
    return value


DbName = Annotated[
    str,
    shaped(
        r"^[A-Za-z_][A-Za-z0-9_]{0,63}$",
        "a database name: letters, digits, '_' (not a system database)",
        check=_not_reserved_db,
    ),
]

DbUser = Annotated[
    str,
    shaped(
        r"^[A-Za-z_][A-Za-z0-9_]{0,31}$",
        "a database account name (not a system account, not starting with fleetdeck_)",
        check=_not_reserved_db_user,
    ),
]


def _db_host(value: str) -> str:
    if value in ("localhost", "%"):
        return value
    return str(ipaddress.ip_address(value))


DbHost = Annotated[
    str,
    shaped(
        r"^(?:localhost|%|[0-9A-Fa-f.:]{2,39})$",
        "where a database account may connect from: localhost, % (anywhere) or an IP address",
        check=_db_host,
    ),
]

# --- network ---------------------------------------------------------------------------------------

Port = Annotated[int, Strict(), Field(ge=1, le=65535, description="a TCP/UDP port, 1-65535")]


def _port_range(value: str) -> str:
    low, high = (int(part) for part in value.split("-"))
    if not 1 <= low <= 65535 or not 1 <= high <= 65535:
        raise ValueError("ports are 1-65535")
    if low > high:
        raise ValueError("the range is reversed: the low port comes first")
    return f"{low}-{high}"


PortRange = Annotated[
    str,
    shaped(
        r"^[0-9]{1,5}-[0-9]{1,5}$",
        "a port range low-high, e.g. 8000-8100",
        check=_port_range,
    ),
]


def _ip(version: int | None) -> Callable[[str], str]:
    def check(value: str) -> str:
        address = ipaddress.ip_address(value)
        if version is not None and address.version != version:
            raise ValueError(f"expected an IPv{version} address")
        return str(address)

    return check


def _network(value: str) -> str:
    return str(ipaddress.ip_network(value, strict=True))  # host bits set: refused


def _ip_or_net(value: str) -> str:
    if "/" in value:
        return _network(value)
    return str(ipaddress.ip_address(value))


_V4 = r"^[0-9.]{7,15}$"
_V6 = r"^[0-9A-Fa-f:.]{2,45}$"
_ANY = r"^[0-9A-Fa-f:.]{2,45}$"

IPv4 = Annotated[str, shaped(_V4, None, check=_ip(4), format="ipv4")]
IPv6 = Annotated[str, shaped(_V6, None, check=_ip(6), format="ipv6")]
IPAddress = Annotated[str, shaped(_ANY, "an IPv4 or IPv6 address", check=_ip(None))]
Cidr = Annotated[
    str,
    shaped(
        r"^[0-9A-Fa-f:.]{2,45}/[0-9]{1,3}$",
        "an IPv4 or IPv6 network in CIDR notation, host bits clear",
        check=_network,
    ),
]
IPOrCidr = Annotated[
    str,
    shaped(
        r"^[0-9A-Fa-f:.]{2,45}(?:/[0-9]{1,3})?$",
        "an IP address or a CIDR network",
        check=_ip_or_net,
    ),
]


def _host(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    if not _check(rf"{_HOST}", value) or len(value) > 253:
        raise ValueError("expected an IP address or a host name")
    return _hostname(value)


Host = Annotated[
    str,
    shaped(
        r"^[0-9A-Za-z][0-9A-Za-z.:-]*$",
        "an IP address or a lowercase host name",
        max_length=253,
        check=_host,
    ),
]

# --- paths and URLs -------------------------------------------------------------------------------


def _no_dotdot(value: str, what: str) -> str:
    if ".." in value:
        raise ValueError(f"a {what} may not contain '..'")
    return value


_RELATIVE_PATH = r"^$|^[^-/~\s;|&$`<>(){}'\"\\*?\[\]][^;|&$`<>(){}'\"\\*?\[\]\x00-\x1f\x7f]*$"


def _relative_path(value: str) -> str:
    if value == "":
        return value
    if value.startswith(("/", "~")):
        raise ValueError("the path must be relative (no leading '/' or '~')")
    for part in value.split("/"):
        if part in ("", ".", ".."):
            raise ValueError("the path may not contain empty, '.' or '..' segments")
        if part.startswith("-"):
            raise ValueError("no path segment may begin with '-'")
    return _safe(value)


RelativePath = Annotated[
    str,
    shaped(
        _RELATIVE_PATH,
        "a path relative to the scope root: no '..', no leading '/' or '-', no shell syntax",
        max_length=4096,
        check=_relative_path,
        safe=False,
    ),
]


UrlPath = Annotated[
    str,
    shaped(
        r"^/[A-Za-z0-9_.~/%:@+,=-]*$",
        "an absolute URL path, e.g. /healthz (no query string)",
        max_length=1024,
        check=lambda v: _no_dotdot(v, "URL path"),
    ),
]

HttpsUrl = Annotated[
    str,
    shaped(
        rf"^https://{_HOST}(?::[0-9]{{1,5}})?(?:/[A-Za-z0-9_.~/%:@+,=-]*)?$",
        "an https:// URL without credentials or query string",
        max_length=2048,
        check=lambda v: _no_dotdot(v, "URL"),
    ),
]

_GIT_PATH = r"[A-Za-z0-9_][A-Za-z0-9_.~/-]*"
GitUrl = Annotated[
    str,
    shaped(
        rf"^(?:https://{_HOST}(?::[0-9]{{1,5}})?/{_GIT_PATH}|ssh://git@{_HOST}(?::[0-9]{{1,5}})?/{_GIT_PATH}"
        rf"|git@{_HOST}:{_GIT_PATH}|file:///{_GIT_PATH})$",
        "https://host/path, ssh://git@host/path, git@host:path or file:///path (a repository on the server, "
        "read as the site's user); credentials go in the token field",
        max_length=2048,
        check=lambda v: _no_dotdot(v, "repository URL"),
    ),
]


def _git_ref(value: str) -> str:
    if ".." in value or "//" in value or "@{" in value or value.endswith(("/", ".", ".lock")):
        raise ValueError("not a valid git branch or tag name")
    return value


GitRef = Annotated[str, shaped(r"^[A-Za-z0-9_][A-Za-z0-9_./+-]{0,254}$", "a git branch or tag name", check=_git_ref)]

# The docker/distribution reference grammar: [registry[:port]/]path[:tag][@digest].
_IMG_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMG_REGISTRY = (
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?/)"
)
_IMAGE = (
    rf"^{_IMG_REGISTRY}?{_IMG_COMPONENT}(?:/{_IMG_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)


def _image(value: str) -> str:
    name = value.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last) + last.index(":")]
    if len(name) > 255:
        raise ValueError("an image name is at most 255 characters")
    return value


ImageRef = Annotated[
    str,
    shaped(
        _IMAGE,
        "a docker image reference: [registry[:port]/]name[:tag][@sha256:digest]",
        max_length=512,
        check=_image,
    ),
]


def _port_map(value: str) -> str:
    ports = value.split("/", 1)[0].split(":")
    if not all(1 <= int(port) <= 65535 for port in ports):
        raise ValueError("ports are 1-65535")
    return value


PortMapping = Annotated[
    str,
    shaped(
        r"^[0-9]{1,5}:[0-9]{1,5}(?:/(?:tcp|udp))?$",
        "host_port:container_port[/tcp|/udp], e.g. 8080:80",
        check=_port_map,
    ),
]

VolumeMount = Annotated[
    str,
    shaped(
        r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}:/(?:[A-Za-z0-9_.@+-]+/?)*(?::ro)?$",
        "volume_name:/path/in/container[:ro]",
        max_length=1200,
        check=lambda v: _no_dotdot(v, "mount"),
    ),
]

# --- versions ---------------------------------------------------------------------------------------

SemVer = Annotated[
    str,
    shaped(
        r"^(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)"
        r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$",
        "a semantic version, e.g. 1.4.2",
        max_length=128,
    ),
]

Version = Annotated[
    str,
    shaped(
        r"^v?[0-9]{1,9}(?:\.[0-9A-Za-z]{1,20}){0,3}(?:[-+~][0-9A-Za-z.]{1,40})?$",
        "a version string, e.g. 6.5.2, 20 or v1.2.3-rc1",
    ),
]

PhpVersion = Annotated[str, shaped(r"^[5-8]\.[0-9]$", "a PHP major.minor version, e.g. 8.3")]
InstalledPhpVersion = Annotated[PhpVersion, listed_by("php.versions", "versions", "version", noun="PHP versions")]
"""A PHP version installed on the server (one to install is a plain `PhpVersion`)."""

# --- time -------------------------------------------------------------------------------------------


@cache
def _timezones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def _timezone(value: str) -> str:
    if value not in _timezones():
        raise ValueError("not a known IANA time zone")
    return value


Timezone = Annotated[
    str,
    shaped(
        r"^[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+){0,2}$",
        "an IANA time zone, e.g. Europe/Berlin",
        max_length=64,
        check=_timezone,
    ),
]

_CRON_FIELDS: tuple[tuple[int, int, tuple[str, ...]], ...] = (
    (0, 59, ()),
    (0, 23, ()),
    (1, 31, ()),
    (1, 12, ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")),
    (0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)
CRON_MACROS = ("@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@annually", "@midnight", "@reboot")


def _cron_atom(atom: str, low: int, high: int, names: tuple[str, ...]) -> int | None:
    if atom.isdigit() and atom.isascii():
        number = int(atom)
        return number if low <= number <= high else None
    if atom.lower() in names:  # cron reads names in any case: MON-FRI, Jan
        return names.index(atom.lower()) + (1 if low == 1 else 0)
    return None


def _cron_field(text: str, low: int, high: int, names: tuple[str, ...]) -> bool:
    for item in text.split(","):
        base, slash, step = item.partition("/")
        if slash and not (step.isdigit() and step.isascii() and 1 <= int(step) <= high):
            return False
        if base == "*":
            continue
        start, dash, end = base.partition("-")
        first = _cron_atom(start, low, high, names)
        if first is None:
            return False
        if dash:
            last = _cron_atom(end, low, high, names)
            if last is None or last < first:
                return False
    return True


def is_cron_schedule(value: str) -> bool:
    """Five cron fields (numbers, '*', ',', '-', '/', month and weekday names) or a macro."""
    if value in CRON_MACROS:
        return True
    fields = value.split(" ")
    return len(fields) == 5 and all(
        _cron_field(text, low, high, names) for text, (low, high, names) in zip(fields, _CRON_FIELDS, strict=True)
    )


def _cron_schedule(value: str) -> str:
    if not is_cron_schedule(value):
        raise ValueError("expected five cron fields (e.g. '*/5 * * * *') or @hourly, @daily, @weekly, ...")
    return _safe(value)


CronSchedule = Annotated[
    str,
    shaped(
        r"^(?:@[a-z]+|[0-9A-Za-z*,/-]+(?: [0-9A-Za-z*,/-]+){4})$",
        "five cron fields (numbers, *, ranges, steps, month and weekday names) or "
        "@hourly|@daily|@midnight|@weekly|@monthly|@yearly|@annually|@reboot",
        max_length=200,
        check=_cron_schedule,
        safe=False,
    ),
]


def _command(value: str) -> str:
    tokens = value.split(" ")
    if any(token == "" for token in tokens):
        raise ValueError("tokens are separated by single spaces")
    if tokens[0].startswith("-"):
        raise ValueError("the program may not begin with '-'")
    return _safe(_no_dotdot(value, "command"))


CronCommand = Annotated[
    str,
    shaped(
        r"^[A-Za-z0-9_./=:%+@,][A-Za-z0-9_./=:%+@,-]*(?: [A-Za-z0-9_./=:%+@,-]+)*$",
        "a program path and arguments separated by single spaces; run without a shell",
        max_length=1024,
        check=_command,
        safe=False,
    ),
]
"""A command run without a shell: tokens of `[A-Za-z0-9_./=:%+@,-]`, the first not starting with '-'."""

CommandLine = CronCommand  # the same grammar for daemons, apps and stack services

# --- ssh --------------------------------------------------------------------------------------------


def _ssh_key(value: str) -> str:
    parts = value.split(" ")
    key_type, blob = parts[0], parts[1]
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the key data is not valid base64") from None
    if len(raw) < 4:
        raise ValueError("the key data is too short")
    length = int.from_bytes(raw[:4], "big")
    if raw[4 : 4 + length] != key_type.encode():
        raise ValueError("the key data does not match its type")
    return value


SshPublicKey = Annotated[
    str,
    shaped(
        r"^(?:ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(?:256|384|521)|sk-ssh-ed25519@openssh\.com"
        r"|sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]{16,}={0,3}(?: [A-Za-z0-9_.@+:-]{1,100})?$",
        "one OpenSSH public key line: type, base64 data, optional comment",
        max_length=16384,
        check=_ssh_key,
    ),
]

SshFingerprint = Annotated[str, shaped(r"^SHA256:[A-Za-z0-9+/]{43}$", "an OpenSSH SHA256 key fingerprint")]

# --- secrets ----------------------------------------------------------------------------------------


def _secret(value: SecretStr) -> SecretStr:
    text = value.get_secret_value()
    if any(unicodedata.category(char) in _BANNED_CATEGORIES for char in text):
        raise ValueError("a secret may not contain control or invisible characters")
    if text != text.strip():
        raise ValueError("a secret may not begin or end with white space")
    return value


Secret = Annotated[
    SecretStr,
    Field(min_length=8, max_length=4096),
    AfterValidator(_secret),
]
"""A secret (password, token, key): never put in an argv; it travels in the job's `secrets`."""


def fpm_env_problem(value: str) -> str | None:
    """Why PHP-FPM would not hand `value` to a site's PHP exactly as given, or None. Written as an
    ``env[NAME]`` line of the site's pool in double quotes (``\\``, ``"`` and ``$`` escaped), any
    other text arrives verbatim; but after reading the line FPM replaces a value beginning with
    ``$`` by its own environment variable of that name (``$HOME``: the master's home, ``${X}``: an
    empty value) and ``$pool`` anywhere by the pool's name, and has no escape for either."""
    if any(unicodedata.category(char) in _BANNED_CATEGORIES for char in value):
        return "an environment value is one line: no control or invisible characters (new line, tab, NUL...)"
    if value.startswith("$"):
        return (
            "PHP-FPM replaces a value beginning with '$' by the FPM master's own environment variable of that"
            " name, with no way to escape it: such a value cannot reach the site as given"
        )
    if "$pool" in value:
        return (
            "PHP-FPM replaces '$pool' anywhere in a value by the pool's name, with no way to escape it:"
            " such a value cannot reach the site as given"
        )
    return None


def _fpm_env_value(value: SecretStr) -> SecretStr:
    problem = fpm_env_problem(value.get_secret_value())
    if problem is not None:
        raise ValueError(problem)
    return value


FpmEnvValue = Annotated[
    SecretStr,
    Field(min_length=1, max_length=4096),
    AfterValidator(_fpm_env_value),
]
"""A value of a site's PHP environment (`site.env-set`): travels as a secret; one line, reaching the
site's PHP exactly as given (`fpm_env_problem` says what PHP-FPM cannot pass on)."""

# --- small reusable scalars --------------------------------------------------------------------------

Int = Annotated[int, Strict()]
"""An int that accepts only an int (not "5", not True). Bound it with `Field(ge=..., le=...)`."""
Bool = Annotated[bool, Strict()]
"""A bool that accepts only a bool. In an argv it is a flag, present when true; it defaults to false."""
OnOff = Literal["on", "off"]
