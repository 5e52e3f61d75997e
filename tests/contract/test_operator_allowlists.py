"""An operator cannot become root: every argument of every kind an operator may run (the groups
observe, content and infra) that names a file, a user, a directive or a program is checked against
its allow-list, over the whole catalog (pure, fast).

Each string argument is identified by its type (the shapes of `contract.job_kinds.argtypes`, an
enum, a secret) and classified by that type and by its name: a path, an account, a directive (a
configuration key) or a program (a command, a package, an image, a URL...). A classified argument
must have a type approved for its class (`APPROVED`, each with the reason it cannot reach root), a
path must also be declared as a `ScopedPath` of its kind (the control plane scopes it, the agent
resolves it through the site's jail). A new argument of an operator's kind that names one of these
with free text, or with a type not approved for it, fails here unless `EXCEPTIONS` says why it
is safe. Then each classified argument is fed hostile values (`/etc/shadow`, `../../root`, `root`,
`opcache.preload`, `-oProxyCommand=x`, `$(id)`, new lines, NUL...): the catalog's build must refuse
every one at that argument, which the jobs route answers with 422 before a job exists.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import pytest
from pydantic import TypeAdapter, ValidationError

from contract.job_kinds import CATALOG, JobKind, argtypes

OPERATOR_GROUPS = frozenset({"observe", "content", "infra"})

Class = Literal["path", "account", "directive", "program"]

# The classes the type alone gives.
CLASS_OF_TYPE: dict[str, Class] = {
    "RelativePath": "path",
    "VolumeMount": "path",
    "Username": "account",
    "DbUser": "account",
    "WpUser": "account",
    "RegistryUser": "account",
    "LoginName": "account",
    "PhpDirective": "directive",
    "SitePhpDirective": "directive",
    "SysctlKey": "directive",
    "EnvName": "directive",
    "CommandLine": "program",
    "PhpModule": "program",
    "PackageName": "program",
    "RegistryPackage": "program",
    "PluginSlug": "program",
    "ImageRef": "program",
    "ModelName": "program",
    "GitUrl": "program",
    "HttpsUrl": "program",
    "ServiceName": "program",
}

PROGRAM_WORDS = ("command", "program", "exec", "script", "package", "module", "plugin", "theme", "image", "model",
                 "models", "repo", "url", "template", "service", "unit", "extension", "binary", "shell")  # fmt: skip

# The classes a field's name gives (its last word): whatever its type, it must then be approved.
CLASS_OF_WORD: dict[str, Class] = {
    **dict.fromkeys(("path", "file", "dir", "directory", "folder", "archive", "public", "shared", "docroot"), "path"),
    **dict.fromkeys(("user", "username", "owner", "login", "account", "group"), "account"),
    **dict.fromkeys(("key", "directive", "parameter", "setting", "option"), "directive"),
    **dict.fromkeys(PROGRAM_WORDS, "program"),
}

# The approved types of each class, and why none of them can reach root.
APPROVED: dict[Class, dict[str, str]] = {
    "path": {
        "RelativePath": "relative, no '..', no leading '/', '~' or '-'; declared a ScopedPath: in a site (or the "
        "home, owners only), resolved by the agent beneath that scope through the jail",
        "VolumeMount": "a named docker volume and a path inside the container: never a host path",
    },
    "account": {
        "Username": "a login user that is not a system account (RESERVED_USERNAMES, systemd-*): never root",
        "SystemUser": "a Username (the same rule) whose schema names user.list as where to pick it from",
        "DbUser": "a database account that is not a system one (root, postgres, debian-sys-maint...)",
        "WpUser": "an account in WordPress's own database, not one of the system",
        "RegistryUser": "the login at a container registry, not one of the system",
    },
    "directive": {
        "PhpDirective": "the php.ini allow-list (allowlists.PHP_INI): no file, user, program or code to load",
        "SitePhpDirective": "the per-site part of the php.ini allow-list",
        "SysctlKey": "the kernel parameter allow-list (allowlists.SYSCTL): none of the security knobs",
        "EnvName": "a variable of the site's or the app's own processes, which already run as its user",
    },
    "program": {
        "CommandLine": "tokens without shell syntax, the program not an option; run without a shell as the site's "
        "user (cron, supervisor); app.create has no handler yet and must do the same",
        "PhpModule": "a name: apt-get installs php<version>-<module> from the server's signed archives, or a "
        "module's mods-available ini the package put there is linked",
        "RegistryPackage": "an npm or PyPI name (no path, URL or option); mcp.install has no handler yet and must "
        "run it as an unprivileged user",
        "PluginSlug": "a WordPress.org slug (no path or URL); the wp kinds have no handler yet and must run wp-cli "
        "as the site's user",
        "ImageRef": "a registry reference (no path or option); the container kinds have no handler yet and must run "
        "it without privileges, host mounts (VolumeMount: named volumes only) or the host's network",
        "ModelName": "a model reference the AI runtime downloads: data, not a program of the server",
        "GitUrl": "https, ssh or file:/// without '..', credentials or options (no ext::); git runs as the site's "
        "user, and refuses a file:/// repository another user owns",
        "HttpsUrl": "an https endpoint without credentials or query, which the AI gateway calls",
        "ServiceName": "a unit whose state or journal is read (observe), or a service of the operator's own stack: "
        "nothing is started from it as root",
    },
}

# Arguments whose name says nothing but whose kind makes them name a program.
CLASS_OF_ARGUMENT: dict[tuple[str, str], Class] = {
    ("extension.install", "name"): "program",
    ("extension.update", "name"): "program",
}

# Classified arguments whose type is not approved for their class, and why they are safe.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("extension.install", "name"): "one of the extensions of the agent's catalogue (extension.available), by name; "
    "the extension kinds have no handler yet and must take only those",
    ("extension.update", "name"): "as extension.install",
    ("lb.apply", "health_check.path"): "the URL path health checks request over HTTP, not a file; lb.* kinds are "
    "made only by the load-balancer routes, from their own rows",
    ("stack.create", "template"): "one of the stack templates the agent ships, by name: not a program",
    ("migrate.check", "user"): "the login on the remote server a migration reads from (root there is allowed): "
    "the check connects out with it, nothing runs here as that user",
}

COMMON_HOSTILE = ["-oProxyCommand=sh", "$(id)", "`id`", "a;id", "a|id", "a&&id", "a\nid", "a\rid", "a\x00b",
                  "../../root", "a\u202eb"]  # fmt: skip
HOSTILE_OF_CLASS: dict[Class, list[str]] = {
    "path": ["/etc/shadow", "~root/.ssh/authorized_keys", "public_html/../../../etc/shadow", "./x", "a//b", "/"],
    "account": [],
    "directive": [],
    "program": [],
}
# fmt: off
HOSTILE_OF_TYPE: dict[str, list[str]] = {
    "Username": ["root", "www-data", "daemon", "nobody", "systemd-network", "postgres", "fleetdeck"],
    "DbUser": ["root", "postgres", "debian-sys-maint", "mysql.sys", "admin"],
    "PhpDirective": [
        "opcache.preload", "opcache.preload_user", "auto_prepend_file", "auto_append_file", "sendmail_path",
        "open_basedir", "user_ini.filename", "extension", "zend_extension", "error_log", "include_path",
        "disable_functions", "allow_url_include", "mysqli.default_pw", "session.save_path", "upload_tmp_dir",
    ],
    "SysctlKey": [
        "kernel.randomize_va_space", "fs.protected_hardlinks", "fs.protected_symlinks", "fs.suid_dumpable",
        "kernel.core_pattern", "kernel.modprobe", "kernel.yama.ptrace_scope", "net.ipv4.ip_forward",
        "kernel.unprivileged_bpf_disabled", "vm.mmap_min_addr",
    ],
    "EnvName": ["opcache.preload", "LD_PRELOAD=x", "A B"],
    "CommandLine": ["sh -c 'id'", "/bin/sh -c $(id)", "x  y", "php ../../../root/x.php"],
    "GitUrl": ["ext::sh -c id", "file:///a/../root", "--upload-pack=id", "https://user:pw@example.com/x",
               "http://example.com/x"],
    "ImageRef": ["--privileged", "-v /:/host"],
    "VolumeMount": ["/:/host", "/etc:/etc", "../x:/y", "x:/a/../b"],
}
# fmt: on
HOSTILE_OF_TYPE["SitePhpDirective"] = [*HOSTILE_OF_TYPE["PhpDirective"], "opcache.memory_consumption"]


# --- identifying an argument's type -----------------------------------------------------------------


def _identity(schema: dict[str, Any]) -> tuple[Any, Any]:
    return schema.get("pattern"), schema.get("description")


@cache
def argtype_names() -> dict[tuple[Any, Any], str]:
    """(pattern, description) -> the argtypes name of each string shape (the first of aliases)."""
    names: dict[tuple[Any, Any], str] = {}
    for name in sorted(vars(argtypes)):
        shape = getattr(argtypes, name)
        if typing.get_origin(shape) is typing.Annotated and not name.startswith("_"):
            schema = TypeAdapter(shape).json_schema()
            if schema.get("type") == "string" and ("pattern" in schema or "enum" in schema):
                names.setdefault(_identity(schema), name)
    names[_identity(TypeAdapter(argtypes.CronCommand).json_schema())] = "CommandLine"  # the same shape
    return names


@dataclass(frozen=True)
class Argument:
    kind: JobKind
    path: tuple[str, ...]  # field names from the model down ("[]": an item of a list)
    schema: dict[str, Any]

    @property
    def name(self) -> str:
        return ".".join(part for part in self.path if part != "[]")

    @property
    def type_name(self) -> str:
        if self.schema.get("format") == "password":
            return "Secret"
        found = argtype_names().get(_identity(self.schema))
        if found is not None:
            return found
        return "enum" if "enum" in self.schema or "const" in self.schema else "unknown"

    @property
    def classes(self) -> set[Class]:
        found: set[Class] = set()
        if self.type_name in CLASS_OF_TYPE:
            found.add(CLASS_OF_TYPE[self.type_name])
        if (self.kind.kind, self.name) in CLASS_OF_ARGUMENT:
            found.add(CLASS_OF_ARGUMENT[(self.kind.kind, self.name)])
        word = self.name.rsplit(".", 1)[-1].rsplit("_", 1)[-1]
        if word in CLASS_OF_WORD and self.type_name not in ("enum", "Secret"):  # an enum is an allow-list
            found.add(CLASS_OF_WORD[word])
        return found

    def with_value(self, value: str) -> dict[str, Any]:
        """The kind's example with this argument set to `value` (in a list: its first item)."""
        args: dict[str, Any] = json.loads(json.dumps(dict(self.kind.example)))
        _put(args, list(self.path), value)
        return args


def _put(target: dict[str, Any], path: list[str], value: str) -> None:
    name, rest = path[0], path[1:]
    if rest[:1] == ["[]"]:
        items = list(target.get(name) or [])
        if len(rest) == 1:
            target[name] = [value, *items[1:]]
            return
        first = dict(items[0]) if items else {}
        _put(first, rest[1:], value)
        target[name] = [first, *items[1:]]
    elif rest:
        inner = dict(target.get(name) or {})
        _put(inner, rest, value)
        target[name] = inner
    else:
        target[name] = value


def _strings(
    schema: dict[str, Any], defs: dict[str, Any], path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    if "$ref" in schema:
        yield from _strings(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, path)
    elif "anyOf" in schema:
        for alternative in schema["anyOf"]:
            if alternative.get("type") != "null":
                yield from _strings(alternative, defs, path)
    elif schema.get("type") == "object":
        for name, prop in schema.get("properties", {}).items():
            yield from _strings(prop, defs, (*path, name))
    elif schema.get("type") == "array":
        yield from _strings(schema["items"], defs, (*path, "[]"))
    elif schema.get("type") == "string" or "enum" in schema or "const" in schema:
        yield path, schema


def operator_kinds() -> list[JobKind]:
    return [entry for entry in CATALOG.values() if entry.group in OPERATOR_GROUPS]


def arguments() -> list[Argument]:
    found = []
    for entry in operator_kinds():
        schema = entry.args.model_json_schema()
        for path, leaf in _strings(schema, schema.get("$defs", {}), ()):
            found.append(Argument(entry, path, leaf))
    return found


def classified() -> list[tuple[Argument, Class]]:
    return [(argument, cls) for argument in arguments() for cls in sorted(argument.classes)]


# --- the whole catalog --------------------------------------------------------------------------------


def test_the_operators_kinds_are_most_of_the_catalog() -> None:
    kinds = {entry.kind for entry in operator_kinds()}
    assert len(CATALOG) >= 369 and len(kinds) >= 300
    assert {"php.ini-set", "tuning.sysctl-set", "site.env-set", "cron.add", "lb.apply"} <= kinds
    assert "php.ini-global-set" not in kinds  # version-wide: sysadmin


def test_every_string_argument_has_a_type_of_the_catalog() -> None:
    """No ad-hoc shape: a string argument is an argtype, an enum (an allow-list) or a secret."""
    unknown = [(a.kind.kind, a.name, a.schema) for a in arguments() if a.type_name == "unknown"]
    assert unknown == []


def test_arguments_that_name_a_file_a_user_a_directive_or_a_program_are_allow_listed() -> None:
    problems = []
    used = set()
    for argument, cls in classified():
        key = (argument.kind.kind, argument.name)
        if argument.type_name in APPROVED[cls]:
            continue
        if key in EXCEPTIONS:
            used.add(key)
            continue
        problems.append(f"{argument.kind.kind} {argument.name}: names a {cls}, with type {argument.type_name}")
    assert problems == [], "add an approved type (or an exception saying why it is safe):\n" + "\n".join(problems)
    assert used == set(EXCEPTIONS), f"exceptions no longer needed: {set(EXCEPTIONS) - used}"


def test_paths_are_scoped() -> None:
    """A path names its scope: the control plane checks it (the home: owners only), the agent
    resolves it beneath that scope through its jail."""
    for argument, cls in classified():
        if cls == "path" and argument.type_name == "RelativePath":
            declared = {scoped.field: scoped.site for scoped in argument.kind.paths}
            assert argument.path[0] in declared, f"{argument.kind.kind} {argument.name} is not a ScopedPath"
            site = declared[argument.path[0]]
            assert site is None or site in argument.kind.args.model_fields, (argument.kind.kind, site)


CASES = [
    pytest.param(argument, value, id=f"{argument.kind.kind}:{argument.name}:{value!r}")
    for argument, cls in classified()
    if (argument.kind.kind, argument.name) not in EXCEPTIONS
    for value in dict.fromkeys(COMMON_HOSTILE + HOSTILE_OF_CLASS[cls] + HOSTILE_OF_TYPE.get(argument.type_name, []))
]


@pytest.mark.parametrize(("argument", "value"), CASES)
def test_hostile_values_are_refused_at_their_argument(argument: Argument, value: str) -> None:
    with pytest.raises(ValidationError) as refused:
        built = argument.kind.build(argument.with_value(value))
        pytest.fail(f"{argument.kind.kind} built {built.argv} with {argument.name}={value!r}")
    where = {error["loc"][0] for error in refused.value.errors() if error["loc"]}
    assert where & {argument.path[0], "argv"}, (argument.kind.kind, argument.name, value, refused.value.errors())
