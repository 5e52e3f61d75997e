"""The web side of a site: its nginx server block and, for PHP sites, its PHP-FPM pool.

Both are rendered from the site's registry entry every time (`apply_site_web`), never edited in
place, so whichever kind changed a setting (``site.alias-add``, ``ssl.issue``, ``php.set``...)
only updates the entry and calls `apply_site_web`. The entry's web fields (all optional):

- ``docroot`` (a folder of the site, default ``public_html``): the server block's root. A deploy sets
  it to ``current`` or ``current/<the release's public folder>`` (`agent.jobs.deploy`), so the
  site serves whichever release ``current`` points to. A value that is not a plain relative path
  falls back to ``public_html``;
- ``enabled`` (bool, default true): false serves the parked page (HTTP 503) instead of the docroot;
- ``aliases`` (list of domains): more ``server_name`` values;
- ``https_redirect`` (bool): port 80 answers 301 to https, once the site has a certificate;
- ``www_redirect`` (``keep``/``add``/``remove``): 301 to the www or the bare name;
- ``php`` (a version such as ``8.2``): the PHP-FPM the pool runs on (php and wordpress profiles);
- ``pool`` (``pm``, ``max_children``, ``max_requests``): the pool's process manager;
- ``limits`` (``memory_limit``, ``upload_limit``): ``php_admin_value`` lines and nginx's
  ``client_max_body_size``;
- ``php_ini`` (name -> value): more ``php_admin_value`` lines of the pool;
- ``env`` (name -> {``value``, ``secret``}): the pool's ``env[NAME]`` lines (a secret value is
  masked wherever it is shown; the pool file is root's, mode 0600).

Files: ``<nginx.sites_dir>/fleetdeck-<slug>.conf`` and ``<php.pool_dir>/fleetdeck-<slug>.conf``,
the pool's socket ``<php.run_dir>/fleetdeck-<slug>.sock`` (``fleetdeck-<digest>.sock`` where the
former would not fit a unix socket path's 107 bytes; owned by the site user, group of
nginx's user, mode 0660: only nginx's workers and the site connect). TLS: when
``<state_dir>/ssl/<slug>/fullchain.pem`` and ``privkey.pem`` both exist, a second server block
listens on ``nginx.tls_listen`` with them. ACME HTTP-01: ``/.well-known/acme-challenge/`` of every
name is served from `acme_challenge_dir` (``nginx.acme_dir``), a folder nginx's workers can read
(the agent's state folder is private: 0700). Logs: ``access.log`` and ``error.log`` (opened by
nginx's master, as root) and a PHP site's ``php-error.log`` (written by its pool's workers, as the
site's user) are in `site_log_dir`, ``<system.sites_log_dir>/<slug>``: a folder of root's, which
the site's user may read but not change, never one in the site's tree.

Validation comes first: the pool is checked alone with ``php-fpm<version> -t -y`` before it is put
in place, then nginx's whole configuration with ``nginx -t -c`` with the new server block in place;
a refusal restores the previous files and raises a JobError with `EXIT_REFUSED`. Only then are
the services reloaded (``agent.jobs.toolkit.host.control_service``), each only when its file changed.

Links: the site's user may make symbolic links in its folder (``current`` is one), and nginx's
workers read as www-data, which may enter every site. So a server block has ``disable_symlinks
if_not_owner from=<site folder>``: below the site's folder, nginx follows a link only to what the
link's owner owns (the site's own files), never to another site's or root's.

Missing software: no ``nginx`` binary or no sites folder -> `EXIT_MISSING` naming the Debian
package (``nginx``); a PHP site without ``php-fpm<version>`` or its pool folder -> the same with
``php<version>-fpm``.
"""

from __future__ import annotations

import contextlib
import grp
import logging
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import trio

from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.common import Account, account_by_name, site_account
from agent.jobs.toolkit.host import HostLayout, NginxLayout, PhpLayout, control_service, php_fpm_versions, reload_nginx
from agent.jobs.toolkit.output import EXIT_MISSING, EXIT_REFUSED, JobError
from agent.jobs.toolkit.proc import all_of, capture_command, require, which
from agent.sites import Site, write_atomically
from agent.unix_sockets import SocketPathError, socket_name
from contract.job_kinds.allowlists import PHP_INI_PER_SITE, setting_problem
from contract.job_kinds.argtypes import fpm_env_problem

log = logging.getLogger("fleetdeck.agent.jobs")

PHP_PROFILES = ("php", "wordpress")
DEFAULT_PM = "ondemand"
DEFAULT_MAX_CHILDREN = 5
SOCKET_WAIT_S = 15.0
CONF_NAME = "fleetdeck-{slug}.conf"
PHP_ERROR_LOG = "php-error.log"
PARKED_PAGE = (
    "<!doctype html><html><head><title>Site disabled</title></head>"
    "<body><h1>This site is disabled</h1><p>It will be back soon.</p></body></html>"
)
WwwRedirect = Literal["keep", "add", "remove"]
DEFAULT_DOCROOT = "public_html"
# A docroot is written into nginx's configuration: plain names only, no quoting to get right,
# and none that leads up ('.', '..' cannot match).
DOCROOT_PART = re.compile(r"^[A-Za-z0-9_@+][A-Za-z0-9._@+-]*$")


@dataclass(frozen=True)
class WebSettings:
    """What a site's server block and pool are rendered from (its registry entry, with defaults)."""

    domain: str
    slug: str
    home: str
    profile: str
    docroot: str = DEFAULT_DOCROOT
    enabled: bool = True
    aliases: tuple[str, ...] = ()
    https_redirect: bool = False
    www_redirect: WwwRedirect = "keep"
    php: str | None = None
    pm: str = DEFAULT_PM
    max_children: int = DEFAULT_MAX_CHILDREN
    max_requests: int | None = None
    memory_limit: str | None = None
    upload_limit: str | None = None
    php_ini: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    left_out: tuple[str, ...] = ()  # stored settings the allow-lists do not take: never rendered

    @property
    def uses_php(self) -> bool:
        return self.profile in PHP_PROFILES


def settings_of(entry: dict[str, Any], home: str) -> WebSettings:
    """A registry entry's web settings (fields of the wrong type fall back to their default). PHP
    values the allow-lists do not take (stored before a list changed) are left out, and named in
    `WebSettings.left_out`: a directive not on `PHP_INI_PER_SITE` or out of its bounds, an
    environment value PHP-FPM would not pass on as given (`fpm_env_problem`)."""

    pool, limits, env, ini = (mapping(entry.get(name)) for name in ("pool", "limits", "env", "php_ini"))
    www, docroot = entry.get("www_redirect"), entry.get("docroot")
    left_out: list[str] = []

    def allowed_ini(key: str, value: Any, where: str) -> bool:
        problem = setting_problem(PHP_INI_PER_SITE, key, value)
        if problem is not None and value is not None:
            left_out.append(f"{where} {key}: {problem}")
        return problem is None

    def allowed_env(name: str, item: Any) -> bool:
        value = item.get("value") if isinstance(item, dict) else None
        problem = fpm_env_problem(value) if isinstance(value, str) else "not text"
        if problem is not None:
            left_out.append(f"env {name}: {problem}")
        return problem is None

    memory, upload = limits.get("memory_limit"), limits.get("upload_limit")
    return WebSettings(
        domain=entry["domain"],
        slug=entry["slug"],
        home=home,
        profile=str(entry.get("profile") or "static"),
        docroot=docroot if isinstance(docroot, str) and docroot_error(docroot) is None else DEFAULT_DOCROOT,
        enabled=entry.get("enabled") is not False,
        aliases=tuple(a for a in entry.get("aliases") or () if isinstance(a, str)),
        https_redirect=entry.get("https_redirect") is True,
        www_redirect=www if www in ("keep", "add", "remove") else "keep",
        php=entry.get("php") if isinstance(entry.get("php"), str) else None,
        pm=str(pool["pm"]) if pool.get("pm") in ("dynamic", "static", "ondemand") else DEFAULT_PM,
        max_children=_number(pool.get("max_children")) or DEFAULT_MAX_CHILDREN,
        max_requests=_number(pool.get("max_requests")),
        memory_limit=memory if allowed_ini("memory_limit", memory, "limits") else None,
        upload_limit=upload if allowed_ini("upload_max_filesize", upload, "limits") else None,
        php_ini={k: v for k, v in ini.items() if allowed_ini(k, v, "php_ini")},
        env={k: v["value"] for k, v in env.items() if allowed_env(k, v)},
        left_out=tuple(left_out),
    )


def docroot_error(path: str) -> str | None:
    """Why `path` cannot be a site's docroot (a folder relative to the site's), or None."""
    if len(path) <= 255 and all(DOCROOT_PART.match(part) for part in path.split("/")):
        return None
    return (
        f"{path!r} is not a plain folder of the site: names of letters, digits and '._-@+' (not first: '.', '-'),"
        " separated by '/'"
    )


def mapping(value: Any) -> dict[str, Any]:
    """`value` when it is a dict (a registry field), else an empty one."""
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# --- where things are ------------------------------------------------------------------------


def vhost_path(nginx: NginxLayout, slug: str) -> str:
    """The path of the site `slug`'s nginx server block."""
    return os.path.join(nginx.sites_dir, CONF_NAME.format(slug=slug))


def pool_dir(php: PhpLayout, version: str) -> str:
    return php.pool_dir.format(version=version)


def pool_path(php: PhpLayout, version: str, slug: str) -> str:
    """The path of the site `slug`'s PHP-FPM pool file of `version`."""
    return os.path.join(pool_dir(php, version), CONF_NAME.format(slug=slug))


def socket_path(php: PhpLayout, slug: str, version: str) -> str:
    """The pool's socket: named after the site's folder, or after its digest where a long
    ``run_dir`` would take the path past the kernel's limit (`agent.unix_sockets`)."""
    try:
        return socket_name(php.run_dir.format(version=version), "fleetdeck-", slug)
    except SocketPathError as exc:
        raise JobError(f"{exc} (the host layout's php.run_dir)") from None


def site_log_dir(layout: HostLayout, slug: str) -> str:
    """The folder of a site's logs, ``<system.sites_log_dir>/<slug>``: root's (mode 0750, the site's
    group may read it), never in the site's own tree, since nginx's master opens them as root and a
    link the site's user planted there would lead it anywhere (the pattern of CVE-2016-1247)."""
    return os.path.join(layout.system.sites_log_dir, slug)


def ensure_log_dir(layout: HostLayout, slug: str, account: Account | None, *, php: bool) -> None:
    """Make the site's log folder (and the sites' log folder above it) when missing, root's with
    the site's group (`account`'s; None: the agent's own, not root). A PHP site's ``php-error.log``
    is made there for its user: the pool's workers write it as that user, and cannot create files
    in root's folder."""
    top = layout.system.sites_log_dir
    os.makedirs(top, 0o755, exist_ok=True)
    parent = os.open(top, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(slug, 0o700, dir_fd=parent)
        folder = os.open(slug, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        if account is not None:
            os.fchown(folder, 0, account.gid)
        os.fchmod(folder, 0o750)
        if php:
            fd = os.open(PHP_ERROR_LOG, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640, dir_fd=folder)
            try:
                if account is not None:
                    os.fchown(fd, account.uid, account.gid)
            finally:
                os.close(fd)
    finally:
        os.close(folder)


def acme_challenge_dir(ctx: JobContext) -> str:
    """Where HTTP-01 challenge files go (``<dir>/<token>``); every site's server block serves them.
    The folder is made with the first challenge (`agent.load_balancers.acme.FileChallenges`), not
    with the sites: nginx takes an ``alias`` to a folder that is not there yet, and an agent that
    never asks for a certificate (a demo's, a test stack's) leaves nothing in the system's folders."""
    return ctx.host.nginx.acme_dir


def tls_files(state_dir: str, slug: str) -> tuple[str, str] | None:
    """The site's certificate chain and key, when both exist."""
    folder = os.path.join(state_dir, "ssl", slug)
    chain, key = os.path.join(folder, "fullchain.pem"), os.path.join(folder, "privkey.pem")
    return (chain, key) if os.path.isfile(chain) and os.path.isfile(key) else None


# --- rendering ---------------------------------------------------------------------------------


def _names(s: WebSettings) -> tuple[list[str], list[str], str | None]:
    """(the names the site answers on, the names redirected to the canonical one, that name)."""
    if s.www_redirect == "keep":
        return [s.domain, *s.aliases], [], None
    bare = s.domain.removeprefix("www.")
    www = f"www.{bare}"
    canonical, other = (www, bare) if s.www_redirect == "add" else (bare, www)
    served = [canonical, *(a for a in (s.domain, *s.aliases) if a not in (canonical, other))]
    return served, [other], canonical


def _acme_location(acme_dir: str) -> list[str]:
    return [
        "    location ^~ /.well-known/acme-challenge/ {",
        f"        alias {acme_dir}/;",
        "        disable_symlinks off;",  # root's folder, outside every site
        "        default_type text/plain;",
        "    }",
    ]


def _site_body(s: WebSettings, nginx: NginxLayout, socket: str | None) -> list[str]:
    """The locations that serve the site (or its parked page)."""
    if not s.enabled:
        return [
            "    location / {",
            "        default_type text/html;",
            f"        return 503 '{PARKED_PAGE}';",
            "    }",
        ]
    if socket is None:
        return ["    location / {", "        try_files $uri $uri/ =404;", "    }"]
    return [
        "    location / {",
        "        try_files $uri $uri/ /index.php?$args;",
        "    }",
        "    location ~ \\.php$ {",
        "        try_files $uri =404;",
        f"        include {nginx.fastcgi_params};",
        "        fastcgi_param SCRIPT_FILENAME $realpath_root$fastcgi_script_name;",
        f"        fastcgi_pass unix:{socket};",
        "    }",
    ]


def render_vhost(
    s: WebSettings, nginx: NginxLayout, acme_dir: str, socket: str | None, tls: tuple[str, str] | None, *, logs: str
) -> str:
    """The site's nginx configuration: its server block on `nginx.listen` (and `nginx.tls_listen`
    with a certificate), plus one redirecting block when a www redirect is set. Its logs go to
    the folder `logs` (`site_log_dir`: root's, outside the site)."""
    served, redirected, canonical = _names(s)
    public = os.path.join(s.home, s.docroot)
    lines = [f"# fleetdeck site {s.domain}: written by the agent from its settings; edits are overwritten", ""]
    listeners: list[tuple[str, bool]] = [(nginx.listen, False)]
    if tls is not None:
        listeners.append((nginx.tls_listen, True))
    for listen, secure in listeners:
        to_https = tls is not None and s.https_redirect and not secure
        head = [f"    listen {listen};"]
        if secure and tls is not None:
            head += [f"    ssl_certificate {tls[0]};", f"    ssl_certificate_key {tls[1]};"]
        scheme = "https" if secure or to_https else "$scheme"
        lines += ["server {", *head, f"    server_name {' '.join(served)};"]
        lines += [f"    access_log {logs}/access.log;", f"    error_log {logs}/error.log;"]
        if s.upload_limit:
            lines.append(f"    client_max_body_size {s.upload_limit.lower()};")
        lines += _acme_location(acme_dir)
        if to_https:
            lines += ["    location / {", "        return 301 https://$host$request_uri;", "    }"]
        else:
            lines += [f"    root {public};", f"    disable_symlinks if_not_owner from={s.home};"]
            lines += ["    index index.php index.html index.htm;"]
            lines += _site_body(s, nginx, socket)
        lines += ["}", ""]
        if redirected:
            lines += ["server {", *head, f"    server_name {' '.join(redirected)};"]
            lines += [f"    access_log {logs}/access.log;", f"    error_log {logs}/error.log;"]
            lines += _acme_location(acme_dir)
            lines += ["    location / {", f"        return 301 {scheme}://{canonical}$request_uri;", "    }", "}", ""]
    return "\n".join(lines)


def ini_quote(value: str) -> str:
    """A value for PHP-FPM's INI parser, taken literally: double quotes, with ``\\``, ``"`` and
    ``$`` (which would expand ``${VAR}``) escaped."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise JobError("a value in a PHP-FPM pool may not contain control characters (a new line...)")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def render_pool(s: WebSettings, user: str, group: str, socket: str, listen_group: str, *, logs: str) -> str:
    """The site's PHP-FPM pool: its processes run as the site's user; its socket is for nginx;
    PHP's errors go to ``php-error.log`` in the folder `logs` (written by the workers, as the
    site's user: the file is the user's, the folder root's)."""
    lines = [
        f"; fleetdeck site {s.domain}: written by the agent from its settings; edits are overwritten",
        f"[fleetdeck-{s.slug}]",
        f"user = {user}",
        f"group = {group}",
        f"listen = {socket}",
        f"listen.owner = {user}",
        f"listen.group = {listen_group}",
        "listen.mode = 0660",
        f"pm = {s.pm}",
        f"pm.max_children = {s.max_children}",
    ]
    if s.pm == "dynamic":
        spare = max(1, s.max_children // 4)
        lines += [f"pm.start_servers = {spare}", f"pm.min_spare_servers = {spare}", f"pm.max_spare_servers = {spare}"]
    elif s.pm == "ondemand":
        lines.append("pm.process_idle_timeout = 10s")
    if s.max_requests is not None:
        lines.append(f"pm.max_requests = {s.max_requests}")
    lines += [
        "chdir = /",
        f"php_admin_value[error_log] = {os.path.join(logs, PHP_ERROR_LOG)}",
        "php_admin_flag[log_errors] = on",
    ]
    admin = dict(s.php_ini)
    if s.memory_limit:
        admin["memory_limit"] = s.memory_limit
    if s.upload_limit:
        admin["upload_max_filesize"] = s.upload_limit
        admin["post_max_size"] = s.upload_limit
    lines += [f"php_admin_value[{key}] = {ini_quote(value)}" for key, value in sorted(admin.items())]
    lines += [f"env[{name}] = {ini_quote(value)}" for name, value in sorted(s.env.items())]
    return "\n".join(lines) + "\n"


# --- applying ----------------------------------------------------------------------------------


@dataclass
class Change:
    """One configuration file to put in place (`text`) or remove (None), and what it was."""

    path: str
    text: str | None
    mode: int
    before: bytes | None = None

    @property
    def changed(self) -> bool:
        return self.before != (self.text.encode() if self.text is not None else None)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _put(path: str, data: bytes | None, mode: int) -> None:
    if data is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    else:
        write_atomically(path, data, mode)


def _install(changes: list[Change]) -> None:
    for change in changes:
        change.before = _read(change.path)
    done: list[Change] = []
    try:
        for change in changes:
            if change.changed:
                _put(change.path, change.text.encode() if change.text is not None else None, change.mode)
                done.append(change)
    except BaseException:
        _restore(done)
        raise


def _restore(changes: list[Change]) -> None:
    for change in changes:
        _put(change.path, change.before, change.mode)


def _tool_words(text: str) -> str:
    return " ".join(text.split())[-800:]


def require_nginx(layout: HostLayout) -> str:
    nginx = require("nginx", "serve the sites", package="nginx")
    if not os.path.isdir(layout.nginx.sites_dir):
        raise JobError(
            f"nginx's sites folder {layout.nginx.sites_dir} does not exist (Debian package nginx)", EXIT_MISSING
        )
    return nginx


def require_fpm(layout: HostLayout, version: str | None) -> tuple[str, str]:
    """The ``php-fpm<version>`` binary and version a PHP site's pool runs on."""
    if version is None:
        raise JobError("PHP is not installed on this server (Debian package php-fpm)", EXIT_MISSING)
    binary = require(f"php-fpm{version}", "run the site's PHP", package=f"php{version}-fpm")
    if not os.path.isdir(pool_dir(layout.php, version)):
        raise JobError(
            f"PHP-FPM's pool folder {pool_dir(layout.php, version)} does not exist (Debian package php{version}-fpm)",
            EXIT_MISSING,
        )
    return binary, version


async def check_pool(fpm: str, text: str) -> None:
    """``php-fpm -t`` on the pool alone (with an empty global section), before it is used."""
    with tempfile.TemporaryDirectory(prefix="fleetdeck-pool-") as folder:  # 0700: the pool may hold secrets
        candidate = os.path.join(folder, "candidate.conf")
        whole = f"[global]\nerror_log = {os.devnull}\n{text}".encode()
        await trio.to_thread.run_sync(write_atomically, candidate, whole)
        code, out_text, err = await capture_command([fpm, "-t", "-y", candidate])
    if code != 0:
        said = [line for line in (err + out_text).splitlines() if "ERROR" in line] or [err + out_text]
        raise JobError(f"php-fpm refused the pool: {_tool_words(' '.join(said))}", EXIT_REFUSED)


async def _check_nginx(nginx: str, conf: str) -> None:
    code, text, err = await capture_command([nginx, "-t", "-q", "-c", conf])
    if code != 0:
        raise JobError(f"nginx refused the configuration: {_tool_words(err or text)}", EXIT_REFUSED)


async def _wait_for_socket(path: str) -> None:
    """PHP-FPM reloads in the background: wait (bounded) until the pool's socket is there."""
    with trio.move_on_after(SOCKET_WAIT_S):
        while not await trio.to_thread.run_sync(os.path.exists, path):  # noqa: ASYNC110 (no event to wait on)
            await trio.sleep(0.005)  # one stat a round
        return
    raise JobError(f"PHP-FPM did not open {path} within {SOCKET_WAIT_S:.0f} s after its reload")


def nginx_group(layout: HostLayout) -> str:
    """The group of nginx's worker account (the group a site's folder and socket grant)."""
    account = account_by_name(layout.nginx.user)
    if account is None:
        raise JobError(f"nginx's worker account {layout.nginx.user} does not exist on this server")
    return grp.getgrgid(account.gid).gr_name


def _plan(ctx: JobContext, site: Site, s: WebSettings, version: str | None) -> list[Change]:
    layout = ctx.host
    socket = socket_path(layout.php, s.slug, version) if version is not None else None
    tls = tls_files(ctx.state_dir, s.slug)
    logs = site_log_dir(layout, s.slug)
    vhost = render_vhost(s, layout.nginx, acme_challenge_dir(ctx), socket, tls, logs=logs)
    changes = [Change(vhost_path(layout.nginx, s.slug), vhost, 0o644)]
    kept = pool_path(layout.php, version, s.slug) if version is not None else None
    for path in _pool_paths(layout, s.slug):
        if path != kept:  # a PHP version the site left
            changes.append(Change(path, None, 0o600))
    if version is not None and socket is not None:
        account = site_account(ctx, site)
        group = _group_name(account.gid)
        text = render_pool(s, account.name, group, socket, nginx_group(layout), logs=logs)
        changes.append(Change(pool_path(layout.php, version, s.slug), text, 0o600))
    return changes


def _log_reader(ctx: JobContext, site: Site) -> Account | None:
    """The account whose group may read the site's logs: its own user (as root), else None (not
    root, or a site of root's own, without a user: its logs stay root's alone)."""
    if not ctx.is_root:
        return None
    try:
        return site_account(ctx, site)
    except JobError:
        return None


def _pool_paths(layout: HostLayout, slug: str) -> list[str]:
    """Where a pool of the site may be, once each (a layout without ``{version}`` has one folder)."""
    paths = [pool_path(layout.php, v, slug) for v in php_fpm_versions() if os.path.isdir(pool_dir(layout.php, v))]
    return list(dict.fromkeys(paths))


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


_APPLYING = trio.Lock()  # one site's files at a time: a restore never undoes another job's change


async def apply_site_web(ctx: JobContext, site: Site) -> None:
    """Render the site's server block (and pool) from its registry entry, validate, put in place,
    reload what changed.

    Why: the registry entry is the one truth of a site's web settings; the files are rendered from
    it, checked by ``php-fpm -t`` and ``nginx -t`` before anything serves them.

    Args:
        ctx: the job's context (its host layout).
        site: the site, whose entry is already written.

    Raises:
        JobError: no such site; exit `EXIT_REFUSED` when a check refused the files (the previous
            files are back); exit `EXIT_MISSING` when nginx (or the site's PHP-FPM) is not installed.
    """
    async with _APPLYING:
        await _apply(ctx, site)


async def sweep_site_pools(ctx: JobContext) -> None:
    """At the agent's start: each site whose registry entry holds PHP settings the allow-lists do
    not take (stored before them: an ``auto_prepend_file``, an environment value PHP-FPM expands)
    gets its pool rendered again without them, so none waits for the site's next change. Never
    fails the agent: a site it cannot render is one line in its log."""
    for site in await trio.to_thread.run_sync(ctx.sites.sites):
        entry = await trio.to_thread.run_sync(ctx.sites.entry, site.domain)
        if entry is None or not settings_of(entry, ctx.site_home(site.slug)).left_out:
            continue
        try:
            await apply_site_web(ctx, site)
        except Exception as exc:  # one site's trouble is no reason to stop the agent
            log.warning("site %s: its pool still holds settings off the allow-lists: %s", site.domain, exc)


async def _apply(ctx: JobContext, site: Site) -> None:
    layout = ctx.host
    entry = await trio.to_thread.run_sync(ctx.sites.entry, site.domain)
    if entry is None:
        raise JobError(f"no site {site.domain} on this server")
    s = settings_of(entry, ctx.site_home(site.slug))
    for what in s.left_out:
        log.warning("site %s: left out of its pool (not on the allow-list): %s", site.domain, what)
    nginx = require_nginx(layout)
    fpm, version = require_fpm(layout, s.php) if s.uses_php else (None, None)
    changes = await trio.to_thread.run_sync(_plan, ctx, site, s, version)
    await trio.to_thread.run_sync(
        partial(ensure_log_dir, layout, s.slug, _log_reader(ctx, site), php=version is not None)
    )
    pool = next((c for c in changes[1:] if c.text is not None), None)  # changes[0]: the server block
    if fpm is not None and pool is not None and pool.text is not None:
        await check_pool(fpm, pool.text)
    await trio.to_thread.run_sync(_install, changes)
    try:
        await _check_nginx(nginx, layout.nginx.conf)
    except JobError:
        await trio.to_thread.run_sync(_restore, changes)
        raise
    socket = socket_path(layout.php, s.slug, version) if version is not None else None
    await _reload(ctx, changes, version, socket)


async def _reload(ctx: JobContext, changes: list[Change], version: str | None, socket: str | None) -> None:
    """Reload nginx when the server block changed and each PHP-FPM whose pool came, changed or
    went; return once nginx serves the new block and the site's pool listens on `socket`.

    Why both at once: nginx keeps its old workers accepting for some 100 ms after a reload (its
    master's own pause before it retires them), and the PHP-FPM reload and its new socket fit in
    that time instead of coming after it.
    """
    layout = ctx.host

    async def reload_pools() -> None:
        for change in changes[1:]:
            if change.changed:
                await control_service(
                    layout.php.control, "reload", init=layout.init, version=_version_of(layout, change.path, version)
                )
        if socket is not None:
            await _wait_for_socket(socket)

    if changes[0].changed:
        await all_of(partial(reload_nginx, layout), reload_pools)
    else:
        await reload_pools()


def _version_of(layout: HostLayout, path: str, fallback: str | None) -> str:
    for version in php_fpm_versions():
        if os.path.dirname(path) == pool_dir(layout.php, version).rstrip("/"):
            return version
    return fallback or ""


async def remove_site_web(ctx: JobContext, site: Site) -> list[str]:
    """Take the site's server block and pools away and reload; the files removed.

    Why: ``site.delete`` stops serving the site (and its PHP-FPM pool, which runs as its user)
    before it stops the user's processes. Without nginx (or PHP-FPM) there is nothing to remove.

    Args:
        ctx: the job's context (its host layout).
        site: the site being deleted.

    Raises:
        JobError: a reload failed.
    """
    async with _APPLYING:
        return await _remove(ctx, site)


async def _remove(ctx: JobContext, site: Site) -> list[str]:
    layout = ctx.host
    changes = [Change(vhost_path(layout.nginx, site.slug), None, 0o644)]
    changes += [Change(path, None, 0o600) for path in _pool_paths(layout, site.slug)]
    await trio.to_thread.run_sync(_install, changes)
    removed = [c.path for c in changes if c.changed]
    if changes[0].changed and which("nginx") is not None:
        await reload_nginx(layout)
    for change in changes[1:]:
        if change.changed:
            version = _version_of(layout, change.path, None)
            await control_service(layout.php.control, "reload", init=layout.init, version=version)
            await trio.to_thread.run_sync(_put, socket_path(layout.php, site.slug, version), None, 0)
    return removed


async def change_site(ctx: JobContext, site: Site, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Apply `change` to the site's registry entry and serve the result; the new entry.

    Why: a site setting changed by any domain (``site.*``, ``php.pool-set``, ``deploy.*``) is one
    registry change and one render, undone as a whole: any failure restores the previous entry (and
    `apply_site_web` the previous files).

    Args:
        ctx: the job's context.
        site: the site.
        change: changes the entry (a dict) in place.

    Raises:
        JobError: no such site, or `apply_site_web`'s refusal (the previous entry is back).
    """
    before = await trio.to_thread.run_sync(ctx.sites.entry, site.domain)
    if before is None:
        raise JobError(f"no site {site.domain} on this server")
    after = await trio.to_thread.run_sync(ctx.sites.update, site.domain, change)
    try:
        await apply_site_web(ctx, site)
    except BaseException:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(ctx.sites.update, site.domain, _replace_with(before))
        raise
    return after


def _replace_with(entry: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def replace(current: dict[str, Any]) -> None:
        current.clear()
        current.update(entry)

    return replace
