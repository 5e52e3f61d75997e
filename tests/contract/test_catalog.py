"""The job catalog: the whitelist of kinds, their argument shapes and the argv they build (pure, fast)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, ValidationError

from contract.job_kinds import CATALOG, BuiltJob, JobKind, argtypes, json_schemas, lookup
from contract.job_kinds.base import Args, Argv, kind

REQUIRED_DOMAINS = [
    "site",
    "app",
    "stack",
    "deploy",
    "db",
    "pg",
    "mongo",
    "php",
    "ssl",
    "dns",
    "mail",
    "docker",
    "container",
    "image",
    "volume",
    "network",
    "cron",
    "daemon",
    "service",
    "security",
    "waf",
    "user",
    "wp",
    "cache",
    "ai",
    "litellm",
    "rag",
    "mcp",
    "system",
    "updates",
    "storage",
    "quota",
    "plan",
    "tuning",
    "extension",
    "lb",
    "migrate",
    "logs",
    "metrics",
    "backup",
]

CONTENT = {"site", "wp"}
SYSADMIN = {"service", "security", "waf", "user", "system", "updates", "storage", "backup", "migrate"}
PRO = {"quota", "plan", "tuning", "rag", "mcp", "extension"}

# The last word of an action says whether it changes anything. Every kind's verb must be in one of
# the two sets: a new verb has to be classified here before its kind can exist.
READ_VERBS = {
    "list", "status", "show", "get", "inspect", "info", "tail", "search", "usage", "logs", "history", "versions",
    "templates", "available", "check", "verify", "recommend", "processes", "disks", "inodes", "largest", "events",
    "journal", "stats", "size", "report", "lookup",
    "audit",  # user.key-audit
}  # fmt: skip
MUTATION_VERBS = {
    "create", "add", "delete", "remove", "drop", "install", "uninstall", "issue", "renew", "revoke", "enable",
    "disable", "set", "apply", "restart", "start", "stop", "reload", "pause", "unpause", "resume", "run", "flush",
    "update", "prune", "tag", "pull", "rename", "connect", "disconnect", "up", "down", "scale", "unset", "rollback",
    "git", "import", "export", "dump", "restore", "grant", "password", "quota", "lock", "unlock", "ban", "unban",
    "scan", "deny", "allow", "reboot", "sync", "security", "subscribe", "unsubscribe", "hold", "unhold", "cleanup",
    "schedule", "unschedule", "rotate", "ingest", "reindex", "cancel", "maintenance", "replace", "setup",
    "activate", "deactivate", "reset", "edit", "clone", "limits", "init", "vacuum",
}  # fmt: skip

SHELL_OR_GLOB = set(";|&$`<>(){}'\"\\*?[]")


def verb(entry: JobKind) -> str:
    return entry.action.rsplit("-", 1)[-1]


def argv_is_safe(entry: JobKind, argv: list[str]) -> None:
    """The property every built argv has: [domain, action, ...], no value that looks like a flag or
    carries shell syntax, globs only in a cron schedule, no control characters; a structured
    field's value (after its `--<field>-json` flag) is a JSON array or object whose every string is
    such a value."""
    assert argv[:2] == [entry.domain, entry.action]
    for index, item in enumerate(argv):
        assert isinstance(item, str) and item, (entry.kind, index, item)
        if item.startswith("-"):
            assert item in entry.flags, (entry.kind, item)
        elif argv[index - 1] in entry.flags and argv[index - 1].endswith("-json") and argv[index - 1] != "--json":
            structure = json.loads(item)
            assert isinstance(structure, (list, dict)), (entry.kind, item)
            for text in _strings(structure):
                assert not text or _safe_word(text), (entry.kind, item)
        else:
            assert _safe_word(item), (entry.kind, item)


def _safe_word(item: str) -> bool:
    bad = set(item) & SHELL_OR_GLOB
    return (
        (argtypes.is_cron_schedule(item) if bad == {"*"} else not bad)
        and not any(ord(char) < 32 or ord(char) == 127 for char in item)
        and item == item.strip()
        and not item.startswith("-")
    )


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in [key, *_strings(item)]]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return [value] if isinstance(value, str) else []


# --- the catalog as a whole ------------------------------------------------------------------------


def test_at_least_120_kinds_over_every_domain() -> None:
    assert len(CATALOG) >= 120
    domains = {entry.domain for entry in CATALOG.values()}
    assert set(REQUIRED_DOMAINS) <= domains
    assert domains <= set(REQUIRED_DOMAINS), domains - set(REQUIRED_DOMAINS)
    for domain in REQUIRED_DOMAINS:
        assert sum(entry.domain == domain for entry in CATALOG.values()) >= (1 if domain == "lb" else 4), domain


def test_entries_are_consistent() -> None:
    for name, entry in CATALOG.items():
        assert name == entry.kind == f"{entry.domain}.{entry.action}"
        assert re.fullmatch(r"[a-z]+\.[a-z][a-z0-9]*(-[a-z0-9]+)*", name)
        assert entry.summary and len(entry.summary) <= 100 and "\n" not in entry.summary
        assert issubclass(entry.args, BaseModel)
        assert entry.args.model_config.get("extra") == "forbid"


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_every_kind_builds_its_example(name: str) -> None:
    entry = CATALOG[name]
    assert entry.example is not None, f"{name} has no example"
    built = entry.build(dict(entry.example))
    assert isinstance(built, BuiltJob)
    argv_is_safe(entry, built.argv)
    assert set(built.secrets) <= set(entry.secret_fields)
    json.dumps(built.args)  # JSON-able
    assert set(built.args) == set(entry.args.model_fields)
    # The stored args (secrets included) rebuild the same job.
    again = entry.build(built.args)
    assert again.argv == built.argv and again.secrets == built.secrets and again.args == built.args
    # Read kinds end with --json unless they print raw lines; every kind's verb is classified.
    assert verb(entry) in (READ_VERBS if entry.read else MUTATION_VERBS), name


def test_json_schemas() -> None:
    entries = json_schemas()
    assert [entry["kind"] for entry in entries] == sorted(CATALOG)
    for entry in entries:
        assert set(entry) == {
            "kind", "domain", "action", "read", "group", "min_plan", "args_schema", "secret_fields", "summary", "route",
            "result_schema", "confirm",
        }  # fmt: skip
        assert (entry["route"] is not None) == (entry["domain"] in ("backup", "lb")), entry["kind"]
        schema = entry["args_schema"]
        assert schema and schema["type"] == "object" and schema["additionalProperties"] is False
        assert entry["secret_fields"] == list(CATALOG[entry["kind"]].secret_fields)
        for secret in entry["secret_fields"]:
            prop = schema["properties"][secret]
            alternatives = prop.get("anyOf", [prop])
            assert any(alt.get("format") == "password" and alt.get("writeOnly") for alt in alternatives)
    json.dumps(entries)
    entries[0]["kind"] = "changed"
    assert json_schemas()[0]["kind"] != "changed"  # a fresh copy every time


def _leaves(schema: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    if "$ref" in schema:
        return _leaves(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "anyOf" in schema:
        return [leaf for alt in schema["anyOf"] for leaf in _leaves(alt, defs)]
    if schema.get("type") == "object":
        return [leaf for prop in schema.get("properties", {}).values() for leaf in _leaves(prop, defs)]
    if schema.get("type") == "array":
        assert "maxItems" in schema, schema  # bounded lists
        return _leaves(schema["items"], defs)
    return [schema]


def test_no_free_text_and_no_unbounded_numbers() -> None:
    """Every string is shaped (pattern, enum or format), every integer is bounded and non-negative
    (so it can never print as '-1'), every list has a maximum size."""
    for name, entry in CATALOG.items():
        schema = entry.args.model_json_schema()
        for leaf in _leaves(schema, schema.get("$defs", {})):
            if "enum" in leaf or "const" in leaf:
                for value in leaf.get("enum", [leaf.get("const")]):
                    assert not str(value).startswith("-"), (name, leaf)
            elif leaf.get("type") == "string":
                assert "pattern" in leaf or leaf.get("format") == "password", (name, leaf)
                assert "maxLength" in leaf or "{" in leaf.get("pattern", "{") or leaf["pattern"].endswith("]$"), (
                    name,
                    leaf,
                )
            elif leaf.get("type") == "integer":
                assert leaf.get("minimum", -1) >= 0 and "maximum" in leaf, (name, leaf)
            else:
                assert leaf.get("type") in ("boolean", "null"), (name, leaf)


# --- groups and plans ------------------------------------------------------------------------------


# Kinds whose group is above their domain's: what they change reaches every site of the server.
RAISED_GROUPS = {"php.ini-global-set": "sysadmin"}


def test_groups() -> None:
    for name, entry in CATALOG.items():
        if entry.read:
            assert entry.group == "observe", name
        elif name in RAISED_GROUPS:
            assert entry.group == RAISED_GROUPS[name], name
        elif entry.domain in CONTENT:
            assert entry.group == "content", name
        elif entry.domain in SYSADMIN:
            assert entry.group == "sysadmin", name
        else:
            assert entry.group == "infra", name
    assert any(entry.read for entry in CATALOG.values()) and any(not entry.read for entry in CATALOG.values())
    for domain in CONTENT | SYSADMIN:
        assert any(e.domain == domain and not e.read for e in CATALOG.values()), domain


def test_plans() -> None:
    for name, entry in CATALOG.items():
        if entry.domain in PRO:
            assert entry.min_plan == "pro", name
        elif entry.domain == "litellm" and entry.action.startswith("key-"):
            assert entry.min_plan == "plus", name
        else:
            assert entry.min_plan == "free", name
    assert {"litellm.key-create", "litellm.key-revoke", "litellm.key-list"} <= set(CATALOG)
    assert CATALOG["litellm.model-list"].min_plan == "free"


def test_read_and_mutation_verbs() -> None:
    for name, entry in CATALOG.items():
        v = verb(entry)
        assert v in READ_VERBS or v in MUTATION_VERBS, f"classify the verb of {name}"
        assert entry.read == (v in READ_VERBS), name


# --- lookup ----------------------------------------------------------------------------------------


def test_lookup_is_exact() -> None:
    assert lookup("site.list") is CATALOG["site.list"]
    for variant in ["Site.List", "SITE.LIST", "site.List", " site.list", "site.list ", "site.list\n", "site .list",
                    "site.list\x00", "site..list", "site", "site.", ".list", "", "site.lis", "site.listt",
                    "site\u2024list", "\uff53ite.list"]:  # fmt: skip
        assert lookup(variant) is None, repr(variant)
    assert lookup(None) is None  # type: ignore[arg-type]
    assert lookup(123) is None  # type: ignore[arg-type]


# --- the seam: the kinds the agent really implements -----------------------------------------------

SEAM: list[tuple[str, dict[str, Any], list[str]]] = [
    ("site.list", {}, ["site", "list", "--json"]),
    ("site.inspect", {"domain": "example.com"}, ["site", "inspect", "example.com", "--json"]),
    ("site.create", {"domain": "example.com"}, ["site", "create", "example.com", "--profile", "static", "--json"]),
    ("site.create", {"domain": "shop.example.com", "profile": "php"},
     ["site", "create", "shop.example.com", "--profile", "php", "--json"]),
    ("site.delete", {"domain": "example.com"}, ["site", "delete", "example.com", "--json"]),
    ("site.delete", {"domain": "example.com", "keep_files": True},
     ["site", "delete", "example.com", "--keep-files", "--json"]),
    ("metrics.get", {}, ["metrics", "get", "--json"]),
    ("storage.usage", {}, ["storage", "usage", "--depth", "1", "--json"]),
    ("storage.usage", {"path": "example-com/public_html", "depth": 3},
     ["storage", "usage", "--path", "example-com/public_html", "--depth", "3", "--json"]),
    ("logs.tail", {"domain": "example.com"}, ["logs", "tail", "example.com", "--log", "access", "--lines", "200"]),
    ("logs.tail", {"domain": "example.com", "log": "error", "lines": 1_000_000},
     ["logs", "tail", "example.com", "--log", "error", "--lines", "1000000"]),
    ("cron.list", {}, ["cron", "list", "--json"]),
    ("cron.list", {"domain": None}, ["cron", "list", "--json"]),
    ("cron.list", {"domain": "example.com"}, ["cron", "list", "--domain", "example.com", "--json"]),
    ("cron.add", {"domain": "example.com", "schedule": "*/5 * * * *", "command": "php artisan schedule:run"},
     ["cron", "add", "example.com", "--schedule", "*/5 * * * *", "--command", "php artisan schedule:run", "--json"]),
    ("cron.add", {"domain": "example.com", "schedule": "@daily", "command": "/usr/bin/wget -q -O /dev/null https://x.io"},
     ["cron", "add", "example.com", "--schedule", "@daily", "--command", "/usr/bin/wget -q -O /dev/null https://x.io",
      "--json"]),
    ("cron.pause", {"id": "c1"}, ["cron", "pause", "c1"]),
    ("cron.run", {"id": "c1"}, ["cron", "run", "c1"]),
    ("service.status", {"name": "nginx"}, ["service", "status", "nginx", "--json"]),
    ("service.restart", {"name": "php8.3-fpm"}, ["service", "restart", "php8.3-fpm"]),
    ("system.info", {}, ["system", "info", "--json"]),
    ("updates.list", {}, ["updates", "list", "--json"]),
    ("ssl.list", {}, ["ssl", "list", "--json"]),
]  # fmt: skip

SEAM_CLASS = {
    "site.list": "read", "site.inspect": "read", "site.create": "content", "site.delete": "content",
    "metrics.get": "read", "storage.usage": "read", "logs.tail": "read", "cron.list": "read", "cron.add": "infra",
    "cron.pause": "infra", "cron.run": "infra", "service.status": "read", "service.restart": "sysadmin",
    "system.info": "read", "updates.list": "read", "ssl.list": "read",
}  # fmt: skip


@pytest.mark.parametrize(("name", "args", "argv"), SEAM)
def test_seam_argv(name: str, args: dict[str, Any], argv: list[str]) -> None:
    entry = CATALOG[name]
    built = entry.build(args)
    assert built.argv == argv
    assert built.secrets == {}


def test_seam_classes_and_schemas() -> None:
    for name, cls in SEAM_CLASS.items():
        entry = CATALOG[name]
        assert entry.read == (cls == "read"), name
        assert entry.group == ("observe" if cls == "read" else cls), name
    fields = {name: set(CATALOG[name].args.model_fields) for name in SEAM_CLASS}
    assert fields == {
        "site.list": set(), "site.inspect": {"domain"}, "site.create": {"domain", "profile", "php"},
        "site.delete": {"domain", "keep_files"}, "metrics.get": set(), "storage.usage": {"domain", "path", "depth"},
        "logs.tail": {"domain", "log", "lines"}, "cron.list": {"domain"}, "cron.add": {"domain", "schedule", "command"},
        "cron.pause": {"id"}, "cron.run": {"id"}, "service.status": {"name"}, "service.restart": {"name"},
        "system.info": set(), "updates.list": set(), "ssl.list": set(),
    }  # fmt: skip
    refused: list[tuple[str, dict[str, Any]]] = [
        ("storage.usage", {"depth": 0}), ("storage.usage", {"depth": 6}),
        ("logs.tail", {"domain": "a.com", "lines": 0}),
        ("logs.tail", {"domain": "a.com", "lines": 1_000_001}), ("logs.tail", {"domain": "a.com", "log": "debug"}),
        ("site.list", {"all": True}), ("cron.pause", {"id": "_x"}), ("cron.pause", {"id": "a" * 65}),
        ("service.status", {"name": "a" * 129}), ("site.create", {"domain": "example.com", "profile": "Static"}),
    ]  # fmt: skip
    for name, args in refused:
        with pytest.raises(ValidationError):
            CATALOG[name].build(args)


# --- bad values ------------------------------------------------------------------------------------

INJECTIONS = ["-rf", "--json", "a;b", "$(x)", "`x`", "a|b", "a&b", "a>b", "a<b", "'a'", '"a"', "a\\b", "a\nb",
              "a\rb", "a\x00b", "a\tb", "*", "a?", "[a]", "{a,b}", "", " a", "a ", "a\u202eb", "a\u2028b"]  # fmt: skip
DOTDOT = ["..", "../x", "a/../b", "a/..", "/etc/passwd", "~/x", "a//b", "./a", "a/-rf"]
LONG_DOMAIN = ".".join(["a" * 63, "a" * 63, "a" * 63, "a" * 62])  # 254 characters
BAD_DOMAINS = ["-a.com", "a-.com", "a..com", "ex_ample.com", "Example.com", "com", "a.com.", ".a.com", "1.2.3.4",
               "a b.com", "a;b.com", LONG_DOMAIN, "a" * 64 + ".com", "xn--\u00e9.com"]  # fmt: skip
NO_SPACES = ["a b"]

BAD_VALUES: list[tuple[str, dict[str, Any], str, list[Any]]] = [
    ("site.create", {"domain": "example.com"}, "domain", BAD_DOMAINS + INJECTIONS),
    ("site.create", {"domain": "example.com"}, "profile", INJECTIONS + NO_SPACES + ["..", "A", "a_b"]),
    ("site.inspect", {}, "domain", [*BAD_DOMAINS, None, 5, ["example.com"]]),
    ("storage.usage", {}, "path", [x for x in INJECTIONS if x] + DOTDOT),
    ("cron.add", {"domain": "a.com", "schedule": "@daily", "command": "php -v"}, "command",
     [*INJECTIONS, "a  b", "php ../x", "rm -rf /*"]),
    ("cron.add", {"domain": "a.com", "schedule": "@daily", "command": "php -v"}, "schedule",
     [*INJECTIONS, "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *",
      "* * * * 8", "@often", "*/0 * * * *", "5-1 * * * *", "*;* * * * *"]),
    ("cron.pause", {}, "id", [*INJECTIONS, "-1", "a b", "a.b"]),
    ("service.restart", {}, "name", INJECTIONS + NO_SPACES),
    ("app.create", {"name": "api", "domain": "a.com", "runtime": "node", "port": 3000, "command": "node x.js"},
     "port", [0, 65536, -1, 70000, "80", 80.5, True, None]),
    ("security.firewall-allow", {"port": 22}, "port", [0, 65536, -22, "22", True]),
    ("security.firewall-allow", {"port_range": "8000-8100"}, "port_range",
     ["8100-8000", "0-100", "1-65536", "8000", "8000-", "-8000", "8000:8100", "a-b", "8000 - 8100"]),
    ("deploy.git", {"domain": "a.com", "repo": "https://github.com/a/b.git"}, "repo",
     [*INJECTIONS, "ext::sh -c touch% /tmp/pwned", "file://host/x", "file:///a/../b", "file:///-x", "https://user:pw@github.com/a/b",
      "http://github.com/a/b", "git@github.com:-x/y", "https://github.com/../x", "--upload-pack=x"]),
    ("deploy.git", {"domain": "a.com", "repo": "https://github.com/a/b.git"}, "branch",
     [*INJECTIONS, "a..b", "a/", "a.lock", "@{1}", "a b"]),
    ("image.pull", {"image": "nginx"}, "image", [*INJECTIONS, "NGINX", "a:b:c", "a//b", "nginx@sha256:abc"]),
    ("user.create", {"username": "deploy"}, "username",
     [*INJECTIONS, "root", "www-data", "systemd-x", "Deploy", "a" * 33, "1abc", "a b"]),
    ("db.create", {"name": "shop"}, "name", [*INJECTIONS, "mysql", "information_schema", "a-b", "a b", "1x" * 40]),
    ("pg.user-delete", {"user": "app"}, "user", [*INJECTIONS, "postgres", "fleetdeck_owner_16384", "Fleetdeck_x"]),
    ("db.user-create", {"user": "app", "password": "correct-horse-battery"}, "user",
     [*INJECTIONS, "root", "fleetdeck_importer_0a1b2c3d4e5f"]),
    ("dns.record-add", {"zone": "a.com", "type": "A", "value": "1.2.3.4"}, "value",
     [*INJECTIONS, "::1", "1.2.3", "example.com", "1.2.3.4 5"]),
    ("php.set", {"domain": "a.com", "version": "8.3"}, "version", ["9.0", "8.10", "8", "8.3 ", "-8.3", 8.3]),
    ("system.timezone-set", {"timezone": "UTC"}, "timezone", [*INJECTIONS, "Mars/Olympus", "../etc", "utc x"]),
    ("security.fail2ban-ban", {"jail": "sshd", "ip": "1.2.3.4"}, "ip",
     [*INJECTIONS, "1.2.3.256", "1.2.3", "01.2.3.4", "fe80::1%eth0", "1.2.3.4/32"]),
    ("network.create", {"name": "n", "subnet": "10.0.0.0/24"}, "subnet", ["10.0.0.1/24", "10.0.0.0/33", "x/24"]),
    ("mail.alias-add", {"source": "a@a.com", "destination": "b@a.com"}, "source",
     [*INJECTIONS, "-a@a.com", "a@b", "a b@a.com", "a..b@a.com", "a@-a.com", "a@a.com;b"]),
    ("user.ssh-key-add", {"username": "deploy", "key": "x"}, "key",
     [*INJECTIONS, "ssh-ed25519", "ssh-ed25519 AAAA", "ssh-dss AAAAB3NzaC1kc3MAAACBAP", "ssh-ed25519 AAAA$(x)"]),
    ("wp.install", {"domain": "a.com", "title": "t", "admin_user": "u", "admin_email": "u@a.com",
                    "admin_password": "long-enough-1"}, "title", [*INJECTIONS, "x" * 201]),
    ("logs.search", {"domain": "a.com", "text": "x"}, "text", INJECTIONS),
    ("php.ini-set", {"version": "8.2", "key": "memory_limit", "value": "1G", "domain": "a.com"}, "key",
     [*INJECTIONS, "opcache.preload", "opcache.preload_user", "auto_prepend_file", "sendmail_path", "open_basedir",
      "MEMORY_LIMIT", "opcache.memory_consumption", "user_ini.filename", "extension", "error_log"]),
    ("php.ini-set", {"version": "8.2", "key": "memory_limit", "value": "1G", "domain": "a.com"}, "value",
     [*INJECTIONS, "17G", "15M", "1g", "1T", "-1", "0", "1 G", "01G", "1024"]),
    ("php.ini-global-set", {"version": "8.2", "key": "display_errors", "value": "On"}, "value",
     [*INJECTIONS, "on", "1", "true", "stderr"]),
    ("php.ini-global-set", {"version": "8.2", "key": "date.timezone", "value": "UTC"}, "value",
     [*INJECTIONS, "Mars/Base", "../UTC", "utc"]),
    ("tuning.sysctl-set", {"key": "vm.swappiness", "value": "10"}, "key",
     [*INJECTIONS, "kernel.randomize_va_space", "fs.protected_hardlinks", "fs.protected_symlinks",
      "fs.suid_dumpable", "kernel.core_pattern", "kernel.yama.ptrace_scope", "net.ipv4.ip_forward",
      "net.ipv4.tcp_syncookies", "kernel.kptr_restrict", "vm.mmap_min_addr", "kernel.modules_disabled"]),
    ("tuning.sysctl-set", {"key": "vm.swappiness", "value": "10"}, "value", [*INJECTIONS, "101", "10 10", "1e2"]),
    ("site.env-set", {"domain": "a.com", "key": "K"}, "value",
     ["", "$HOME", "${PATH}", "$pool", "a$poolb", "a\nb", "a\x00b", "a\tb", "a\u202eb", "x" * 4097, 5]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "base", "field", "values"), BAD_VALUES, ids=lambda x: x if isinstance(x, str) else "")
def test_bad_values_are_refused(name: str, base: dict[str, Any], field: str, values: list[Any]) -> None:
    entry = CATALOG[name]
    for value in values:
        with pytest.raises(ValidationError):
            entry.build({**base, field: value})
            pytest.fail(f"{name}.{field} accepted {value!r}")


def test_allowed_values_and_their_schema() -> None:
    """Values of the allow-lists' types within their bounds build; the schema says each key's type."""
    ini_set, sysctl = CATALOG["php.ini-set"], CATALOG["tuning.sysctl-set"]
    site = {"version": "8.2", "domain": "a.com"}
    for key, value in [("memory_limit", "16M"), ("memory_limit", "16G"), ("upload_max_filesize", "64K"),
                       ("max_execution_time", "0"), ("error_reporting", "22527"), ("date.timezone", "Europe/Berlin"),
                       ("session.cookie_samesite", "Lax"), ("opcache.jit", "tracing")]:  # fmt: skip
        assert ini_set.build({**site, "key": key, "value": value}).argv[2:5] == ["8.2", key, value]
    for key, value in [("net.ipv4.tcp_rmem", "4096 131072 6291456"), ("net.ipv4.ip_local_port_range", "1024 65535"),
                       ("vm.overcommit_memory", "1"), ("fs.inotify.max_user_watches", "524288")]:  # fmt: skip
        assert sysctl.build({"key": key, "value": value}).argv == ["tuning", "sysctl-set", key, value]
    with pytest.raises(ValidationError):
        sysctl.build({"key": "net.ipv4.ip_local_port_range", "value": "65535 1024"})
    properties = sysctl.args.model_json_schema()["properties"]
    assert properties["value"]["x-allowed"]["vm.swappiness"] == {
        "type": "integer", "minimum": 0, "maximum": 100, "description": "how readily memory is swapped out"
    }  # fmt: skip
    assert sorted(properties["value"]["x-allowed"]) == properties["key"]["enum"]
    limits = CATALOG["site.limits"]
    assert limits.build({"domain": "a.com", "memory_limit": "16G", "upload_limit": "64K"}).args["memory_limit"] == "16G"
    for bad in ("17G", "15M", "999999G"):
        with pytest.raises(ValidationError):
            limits.build({"domain": "a.com", "memory_limit": bad})
    env = CATALOG["site.env-set"].build({"domain": "a.com", "key": "K", "value": 'a"b ${X} $HOME\\ ;#'})
    assert env.secrets == {"value": 'a"b ${X} $HOME\\ ;#'} and "${X}" not in " ".join(env.argv)


def test_record_types_and_cross_field_rules() -> None:
    add = CATALOG["dns.record-add"]
    assert add.build({"zone": "a.com", "type": "AAAA", "value": "2001:DB8::1"}).args["value"] == "2001:db8::1"
    bad: list[dict[str, Any]] = [
        {"zone": "a.com", "type": "AAAA", "value": "1.2.3.4"},
        {"zone": "a.com", "type": "MX", "value": "mail.a.com"},  # MX needs a priority
        {"zone": "a.com", "type": "A", "value": "1.2.3.4", "priority": 5},
        {"zone": "a.com", "type": "CNAME", "value": "1.2.3.4"},
        {"zone": "a.com", "type": "CAA", "value": "0 issue x;y"},
        {"zone": "a.com", "type": "PTR", "value": "a.com"},
        {"zone": "a.com", "type": "CNAME", "value": "b.com"},  # not at the apex
    ]
    for args in bad:
        with pytest.raises(ValidationError):
            add.build(args)
    with pytest.raises(ValidationError):
        CATALOG["image.pull"].build({"image": "nginx", "registry_user": "bob"})  # a user without a password
    with pytest.raises(ValidationError):
        CATALOG["network.create"].build({"name": "n", "subnet": "10.0.0.0/24", "gateway": "10.0.1.1"})
    with pytest.raises(ValidationError):
        CATALOG["quota.set"].build({"username": "deploy", "soft_mb": 10, "hard_mb": 5})
    with pytest.raises(ValidationError):
        CATALOG["security.firewall-deny"].build({})  # a rule must be scoped
    with pytest.raises(ValidationError):
        CATALOG["security.firewall-allow"].build({"port": 22, "port_range": "1-2"})
    for name in ("service.stop", "service.disable"):
        with pytest.raises(ValidationError):
            CATALOG[name].build({"name": "sshd"})
    with pytest.raises(ValidationError):
        CATALOG["rag.create"].build({"name": "d", "embedding_model": "m", "chunk_size": 200, "chunk_overlap": 200})


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_unknown_fields_and_wrong_types_are_refused(name: str) -> None:
    entry = CATALOG[name]
    with pytest.raises(ValidationError):
        entry.build({**entry.example, "evil": "x"})
    with pytest.raises(ValidationError):
        entry.build("site.list")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        entry.build(["a"])  # type: ignore[arg-type]


def test_strict_scalars() -> None:
    with pytest.raises(ValidationError):
        CATALOG["storage.usage"].build({"depth": "2"})  # no str -> int coercion
    with pytest.raises(ValidationError):
        CATALOG["storage.usage"].build({"depth": True})
    with pytest.raises(ValidationError):
        CATALOG["site.delete"].build({"domain": "a.com", "keep_files": "yes"})
    with pytest.raises(ValidationError):
        CATALOG["site.delete"].build({"domain": "a.com", "keep_files": 1})


# --- secrets ---------------------------------------------------------------------------------------

EXPECTED_SECRETS = {
    "deploy.git": ("token",),
    "image.pull": ("registry_password",),
    "updates.subscribe": ("token",),
    "db.user-create": ("password",),
    "mail.mailbox-add": ("password",),
    "wp.install": ("admin_password",),
    "backup.target-set": ("secret_access_key",),
    "litellm.model-add": ("api_key",),
    "app.env-set": ("value",),
    "site.env-set": ("value",),
    "mcp.env-set": ("value",),
    "migrate.pull": ("password",),
    "user.password-set": ("password",),
}


def test_secret_fields_are_declared() -> None:
    for name, fields in EXPECTED_SECRETS.items():
        assert CATALOG[name].secret_fields == fields, name
    for name, entry in CATALOG.items():
        for field_name in entry.args.model_fields:
            if re.search(r"(password|token|secret|secret_key|api_key)$", field_name):
                assert field_name in entry.secret_fields, (name, field_name)


@pytest.mark.parametrize("name", sorted(n for n, e in CATALOG.items() if e.secret_fields))
def test_secrets_never_enter_the_argv(name: str) -> None:
    entry = CATALOG[name]
    args = dict(entry.example)
    for field_name in entry.secret_fields:
        args[field_name] = f"Sup3r-secret-{field_name}-value"
    if name == "image.pull":
        args["registry_user"] = "acme-bot"
    built = entry.build(args)
    for field_name in entry.secret_fields:
        value = args[field_name]
        assert built.secrets[field_name] == value
        assert built.args[field_name] == value  # the caller masks them
        assert not any(value in item for item in built.argv)
        assert f"--{field_name.replace('_', '-')}" not in built.argv
    assert "**********" not in " ".join(built.argv)


def test_optional_secret_absent() -> None:
    built = CATALOG["deploy.git"].build({"domain": "a.com", "repo": "git@github.com:acme/site.git"})
    assert built.secrets == {} and built.args["token"] is None
    assert built.argv == ["deploy", "git", "a.com", "--repo", "git@github.com:acme/site.git", "--branch", "main",
                          "--json"]  # fmt: skip


def test_secret_shapes() -> None:
    entry = CATALOG["updates.subscribe"]
    for bad in ["short", "a" * 4097, "abc\ndefghijk", "abcdefgh\x00", " leading-space", 12345678, None]:
        with pytest.raises(ValidationError):
            entry.build({"vendor": "rhel", "token": bad})
    # A secret may not double as another argument (it would then be in the argv).
    with pytest.raises(ValidationError):
        CATALOG["image.pull"].build(
            {"image": "nginx", "registry_user": "same-value-1", "registry_password": "same-value-1"}
        )


# --- the central rule --------------------------------------------------------------------------------


def test_value_problem() -> None:
    for good in ["a", "example.com", "a b", "Café", "8000-8100", "*/5 * * * *", "/", "x=y", "user@host"]:
        assert argtypes.value_problem(good) is None, good
    for bad in [*INJECTIONS, "a*", "* * * *", "x" * 9000, "a\xa0b", "a\u200bb"]:
        assert argtypes.value_problem(bad) is not None, repr(bad)


class _Loose(Args):
    text: str  # deliberately unshaped: the central check must still catch it


def test_the_final_check_catches_an_unshaped_field() -> None:
    loose = kind("site.loose-test", _Loose, "test only", positional=("text",), example={"text": "ok"})
    assert loose.build({"text": "fine"}).argv == ["site", "loose-test", "fine"]
    for bad in INJECTIONS:
        with pytest.raises(ValidationError):
            loose.build({"text": bad})
            pytest.fail(repr(bad))


def test_the_central_rule_holds_inside_an_unshaped_structure_on_both_sides() -> None:
    class Unshaped(Args):
        names: list[str] = Field(default_factory=list)  # deliberately unshaped
        labels: dict[str, str] = Field(default_factory=dict)

    entry = kind("site.unshaped-test", Unshaped, "test only", example={})
    good = {"names": ["a=b,c"], "labels": {"k=1,2": "v=é"}}
    built = entry.build(good)
    assert built.argv == ["site", "unshaped-test", "--names-json", '["a=b,c"]', "--labels-json", '{"k=1,2":"v=é"}']
    assert entry.parse(built.argv).model_dump() == good
    for bad in ["a;b", "-x", 'a"b', "a\u2028b", " a"]:
        for name, value in [("names", [bad]), ("labels", {bad: "v"}), ("labels", {"k": bad})]:
            with pytest.raises(ValidationError, match="holds a string that"):
                entry.build({name: value})
            with pytest.raises(ValidationError, match="holds a string that"):
                entry.parse(["site", "unshaped-test", f"--{name}-json", json.dumps(value)])


def test_a_builder_cannot_emit_foreign_flags_or_secrets() -> None:
    def rogue(model: Any) -> Argv:
        argv = Argv("site", "rogue-test")
        argv.flag("--exec", "x")
        return argv

    entry = kind("site.rogue-test", _Loose, "test only", builder=rogue, example={"text": "ok"})
    with pytest.raises(RuntimeError):
        entry.build({"text": "ok"})

    class WithSecret(Args):
        token: argtypes.Secret

    def leaky(model: Any) -> Argv:
        argv = Argv("site", "leaky-test")
        argv.value(model.token)  # a SecretStr, not a str
        return argv

    leaky_kind = kind("site.leaky-test", WithSecret, "test only", builder=leaky, example={})
    with pytest.raises(RuntimeError):
        leaky_kind.build({"token": "0123456789abc"})

    def revealing(model: Any) -> Argv:
        argv = Argv("site", "reveal-test")
        argv.value(model.token.get_secret_value())
        return argv

    reveal_kind = kind("site.reveal-test", WithSecret, "test only", builder=revealing, example={})
    with pytest.raises(ValidationError):
        reveal_kind.build({"token": "0123456789abc"})

    class Listed(Args):
        names: list[str] = Field(default_factory=list)  # deliberately unshaped

    def unsafe_structure(model: Any) -> Argv:
        argv = Argv("site", "structure-test")
        argv.structure("--names-json", argtypes.dump_structure(model.names))
        return argv

    structured = kind("site.structure-test", Listed, "test only", builder=unsafe_structure, example={})
    assert structured.build({"names": ["a=b,c"]}).argv[-1] == '["a=b,c"]'
    for bad in [["a;b"], ["-x"], ["a\u2028b"]]:
        with pytest.raises(ValidationError, match="holds a string that"):
            structured.build({"names": bad})


def test_catalog_rules_are_enforced_at_declaration() -> None:
    class Lax(BaseModel):
        domain: argtypes.DomainName

    class TrueByDefault(Args):
        on: argtypes.Bool = True

    class Secretive(Args):
        token: argtypes.Secret

    with pytest.raises(TypeError):
        kind("site.lax-test", Lax, "test only", example={})
    with pytest.raises(TypeError):
        kind("site.flag-test", TrueByDefault, "test only", example={})
    with pytest.raises(TypeError):
        kind("site.secret-test", Secretive, "test only", positional=("token",), example={})

    class Listed(Args):
        names: list[argtypes.Slug]

    class ListedByDefault(Args):
        names: list[argtypes.Slug] = Field(default_factory=lambda: ["a"])

    class SameFlag(Args):
        names: list[argtypes.Slug] = Field(default_factory=list)
        names_json: argtypes.Slug | None = None

    with pytest.raises(TypeError):  # a structure is never a positional value
        kind("site.listed-test", Listed, "test only", positional=("names",), example={})
    with pytest.raises(TypeError):  # an empty list is left out, so it must be what the default is
        kind("site.default-test", ListedByDefault, "test only", example={})
    with pytest.raises(TypeError):  # `--names-json` twice
        kind("site.same-test", SameFlag, "test only", example={})

    class Named(Args):
        domain: argtypes.DomainName

    named = {"positional": ("domain",), "example": {"domain": "example.com"}}
    assert kind("site.confirm-test", Named, "test only", confirm="domain", **named).confirm == "domain"
    with pytest.raises(TypeError):  # the value to type again is a positional argument…
        kind("site.confirm-test", Named, "test only", confirm="domain", example={"domain": "example.com"})
    with pytest.raises(TypeError):  # …of a mutation
        kind("site.confirm-test", Named, "test only", read=True, confirm="domain", **named)
    with pytest.raises(ValueError, match="no catalog module for the domain 'nosuchdomain'"):
        kind("nosuchdomain.list", Args, "test only", example={})
    with pytest.raises(ValueError):
        kind("Site.List", Args, "test only", example={})
    for lower in ("observe", "content", "infra"):  # a group may raise a kind above its domain's, never lower it
        with pytest.raises(ValueError):
            kind("php.lower-test", Args, "test only", example={}, group=lower)
    with pytest.raises(ValueError):
        kind("php.read-test", Args, "test only", read=True, example={}, group="sysadmin")


# --- argv conventions ----------------------------------------------------------------------------------


def test_flag_conventions() -> None:
    for name, entry in CATALOG.items():
        built = entry.build(dict(entry.example))
        assert (built.argv[-1] == "--json") == entry.json, name
        for flag in entry.flags:
            assert re.fullmatch(r"--[a-z][a-z0-9]*(-[a-z0-9]+)*", flag), (name, flag)
        positional = built.argv[2 : 2 + len(entry.positional)]
        assert not any(item.startswith("-") for item in positional), name
    reads_without_json = sorted(n for n, e in CATALOG.items() if e.read and not e.json)
    assert all(verb(CATALOG[n]) in {"tail", "search", "logs", "journal"} for n in reads_without_json)


def test_lb_apply_carries_the_whole_spec() -> None:
    spec = {
        "id": "lb-1", "name": "web", "revision": 7, "port": 443, "hostname": "shop.example.com", "engine": "nginx",
        "backends": [{"id": "b1", "server_id": "s1", "address": "10.0.0.5"},
                     {"id": "b2", "server_id": "s2", "address": "fd00::5", "port": 9000, "weight": 3, "drained": True}],
    }  # fmt: skip
    built = CATALOG["lb.apply"].build(spec)
    assert built.argv == [
        "lb", "apply", "lb-1", "--name", "web", "--revision", "7", "--port", "443", "--tls",
        "--hostname", "shop.example.com", "--engine", "nginx", "--algorithm", "round_robin",
        "--health-check-json", '{"path":"/","interval_s":10,"healthy_threshold":2,"unhealthy_threshold":3}',
        "--backends-json",
        '[{"id":"b1","server_id":"s1","address":"10.0.0.5","port":8080,"weight":1,"drained":false},'
        '{"id":"b2","server_id":"s2","address":"fd00::5","port":9000,"weight":3,"drained":true}]', "--json",
    ]  # fmt: skip
    assert built.args["tls"] is True and built.args["health_check"]["path"] == "/"
    longest = [
        {"id": f"{index:064}", "server_id": "s" * 64, "address": ".".join(["a" * 63] * 3 + ["a" * 61]),
         "port": 65535, "weight": 256, "drained": True}
        for index in range(256)
    ]  # fmt: skip
    largest = CATALOG["lb.apply"].build({**spec, "backends": longest})  # one argument, as Linux takes it
    assert len(largest.argv[largest.argv.index("--backends-json") + 1]) <= argtypes.MAX_STRUCTURE_LENGTH
    for bad in [
        {**spec, "port": 8080},
        {key: value for key, value in spec.items() if key != "hostname"},  # TLS needs the certificate's name
        {**spec, "engine": "caddy"},
        {**spec, "backends": [{"id": "b1", "server_id": "s1", "address": "10.0.0.5", "weight": 0}]},
        {**spec, "backends": [{"id": "b1", "server_id": "s1", "address": "10.0.0.5", "extra": 1}]},
        {**spec, "backends": [{"id": "b1", "server_id": "s1", "address": "a,b=c"}]},
        {**spec, "backends": [{"id": "b", "server_id": "s", "address": "10.0.0.1"}] * 2},
        {**spec, "health_check": {"path": "/x;y"}},
        {**spec, "health_check": {"interval_s": 1}},
    ]:
        with pytest.raises(ValidationError):
            CATALOG["lb.apply"].build(bad)


def test_lists_travel_as_json() -> None:
    built = CATALOG["ssl.issue"].build({"domain": "a.com", "aliases": ["www.a.com", "cdn.a.com"]})
    assert built.argv[3:5] == ["--aliases-json", '["www.a.com","cdn.a.com"]']
    assert "--aliases-json" not in CATALOG["ssl.issue"].build({"domain": "a.com"}).argv  # empty: left out
    shared = CATALOG["deploy.init"].build({"domain": "a.com", "shared": ["a=b,c", "données", "x,y/z=1"]})
    assert shared.argv[5:7] == ["--shared-json", '["a=b,c","données","x,y/z=1"]']  # once refused: ',' and '='


def test_a_structured_value_is_one_json_array_or_object_of_safe_strings() -> None:
    assert argtypes.load_structure('{ "a": [1, "b", null] }') == {"a": [1, "b", None]}  # a person's layout
    assert argtypes.structure_problem({"k": ["a=b,c", "", "Café", 3, True]}) is None
    for text, said in [
        ("", "is not JSON"),
        ("[1,", "is not JSON"),
        ('"x"', "JSON array or object"),
        ("3", "JSON array or object"),
        ('{"a":1,"a":2}', "a key twice"),
        ("[NaN]", "NaN"),
        ("[Infinity]", "Infinity"),
        ("[" * 40 + "]" * 40, "more than 16 deep"),
        ("[" * 100_000, "more than 16 deep"),
        ('["' + "x" * argtypes.MAX_STRUCTURE_LENGTH + '"]', "at most"),
    ]:
        with pytest.raises(ValueError, match=said):
            argtypes.load_structure(text)
    for bad in [x for x in INJECTIONS if x]:  # "" inside JSON is a value, not a missing one
        assert argtypes.structure_problem(["ok", {"k": bad}]) is not None, repr(bad)
        assert argtypes.structure_problem({bad: "v"}) is not None, repr(bad)


# --- property test -----------------------------------------------------------------------------------

NASTY = st.sampled_from(INJECTIONS + DOTDOT + BAD_DOMAINS + ["example.com", "a", "0", "@", "*/5 * * * *", "a=b"])


def _text_for(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    alternatives = schema.get("anyOf", [schema])
    patterns = [alt["pattern"] for alt in alternatives if "pattern" in alt]
    options: list[st.SearchStrategy[str]] = [st.text(max_size=80), NASTY]
    options += [st.from_regex(pattern, fullmatch=True) for pattern in patterns]
    options += [st.sampled_from(alt["enum"]) for alt in alternatives if "enum" in alt]
    # Valid-looking values with an injection spliced in somewhere.
    options += [
        st.tuples(st.from_regex(pattern, fullmatch=True), NASTY, st.integers(0, 80)).map(
            lambda t: t[0][: t[2]] + t[1] + t[0][t[2] :]
        )
        for pattern in patterns
    ]
    return st.one_of(options)


PROPERTY_KINDS = ["site.create", "cron.add", "storage.usage", "wp.install", "deploy.git", "dns.record-add",
                  "logs.search", "user.ssh-key-add", "image.pull", "security.firewall-allow", "mail.alias-add",
                  "php.ini-set", "app.create", "lb.remove", "backup.target-set"]  # fmt: skip
PROPERTY_BASE = {"security.firewall-allow": {"source": "10.0.0.0/8"}}  # port and port_range exclude each other
PROPERTY_FIELDS = [
    (name, field_name)
    for name in PROPERTY_KINDS
    for field_name, prop in CATALOG[name].args.model_json_schema()["properties"].items()
    if any(alt.get("type") == "string" and alt.get("format") != "password" for alt in prop.get("anyOf", [prop]))
]


@pytest.mark.parametrize(("name", "field_name"), PROPERTY_FIELDS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_random_text_is_refused_or_safe(name: str, field_name: str, data: st.DataObject) -> None:
    entry = CATALOG[name]
    prop = entry.args.model_json_schema()["properties"][field_name]
    value = data.draw(_text_for(prop))
    args = {**PROPERTY_BASE.get(name, entry.example), field_name: value}
    try:
        built = entry.build(args)
    except ValidationError:
        return
    argv_is_safe(entry, built.argv)
    assert not built.secrets or all(s not in " ".join(built.argv) for s in built.secrets.values())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_random_text_in_every_string_field_of_the_cron_kinds(text: str) -> None:
    for name in ("cron.add", "cron.list", "cron.run", "cron.pause"):
        entry = CATALOG[name]
        for field_name in entry.args.model_fields:
            try:
                built = entry.build({**entry.example, field_name: text})
            except ValidationError:
                continue
            argv_is_safe(entry, built.argv)
