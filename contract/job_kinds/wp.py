"""Job kinds of `wp`."""

from __future__ import annotations

from typing import Literal

from contract.job_kinds.argtypes import (
    Bool,
    DomainName,
    Email,
    Locale,
    OnOff,
    PluginSlug,
    RelativePath,
    SafeText,
    Secret,
    SiteDomain,
    Version,
    WpUser,
)
from contract.job_kinds.base import CONTENT, Args, JobKind, ScopedPath, kind


class WpList(Args):
    domain: SiteDomain | None = None


class WpTarget(Args):
    domain: SiteDomain
    path: RelativePath = ""  # the install's folder inside the site, "" = the site root


class WpInstall(WpTarget):
    title: SafeText
    admin_user: WpUser
    admin_email: Email
    admin_password: Secret
    locale: Locale = "en_US"
    version: Version | None = None


class WpUpdate(WpTarget):
    scope: Literal["all", "plugins", "themes", "translations"] = "all"


class WpCoreUpdate(WpTarget):
    version: Version | None = None
    minor: Bool = False


class WpPlugin(WpTarget):
    plugin: PluginSlug


class WpPluginInstall(WpPlugin):
    version: Version | None = None
    activate: Bool = False


class WpPluginUpdate(WpTarget):
    plugin: PluginSlug | None = None  # None: every plugin


class WpTheme(WpTarget):
    theme: PluginSlug


class WpThemeInstall(WpTheme):
    version: Version | None = None
    activate: Bool = False


class WpUserCreate(WpTarget):
    login: WpUser
    email: Email
    role: Literal["administrator", "editor", "author", "contributor", "subscriber"] = "subscriber"
    password: Secret | None = None  # None: WordPress mails a reset link


class WpSearchReplace(WpTarget):
    search: DomainName
    replace: DomainName
    dry_run: Bool = False


class WpMaintenance(WpTarget):
    state: OnOff


_W = {"domain": "example.com", "path": "blog"}
_IN_SITE = (ScopedPath("path", site="domain"),)  # the install's folder, in the site
_WPLUG = {"domain": "example.com", "plugin": "wordpress-seo"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = CONTENT

KINDS: list[JobKind] = [
    kind("wp.list", WpList, "List the WordPress installs", read=True, example={"domain": "example.com"}),
    kind("wp.info", WpTarget, "Show a WordPress install (versions, plugins needing updates)", read=True,
         positional=("domain",), example=_W, paths=_IN_SITE),
    kind("wp.check", WpTarget, "Verify the core and plugin checksums of an install", read=True,
         positional=("domain",), example=_W, paths=_IN_SITE),
    kind("wp.install", WpInstall, "Install WordPress in a site", positional=("domain",),
         example={"domain": "example.com", "title": "My blog", "admin_user": "admin-jo",
                  "admin_email": "jo@example.com", "admin_password": "correct-horse-battery", "locale": "de_DE"},
         paths=_IN_SITE),
    kind("wp.update", WpUpdate, "Update plugins, themes and translations", positional=("domain",),
         example={"domain": "example.com", "scope": "plugins"}, paths=_IN_SITE),
    kind("wp.core-update", WpCoreUpdate, "Update WordPress core", positional=("domain",),
         example={"domain": "example.com", "version": "6.5.2"}, paths=_IN_SITE),
    kind("wp.plugin-list", WpTarget, "List the plugins of an install", read=True, positional=("domain",), example=_W,
         paths=_IN_SITE),
    kind("wp.plugin-install", WpPluginInstall, "Install a plugin from WordPress.org", positional=("domain", "plugin"),
         example={**_WPLUG, "version": "22.5", "activate": True}, paths=_IN_SITE),
    kind("wp.plugin-activate", WpPlugin, "Activate a plugin", positional=("domain", "plugin"), example=_WPLUG,
         paths=_IN_SITE),
    kind("wp.plugin-deactivate", WpPlugin, "Deactivate a plugin", positional=("domain", "plugin"), example=_WPLUG,
         paths=_IN_SITE),
    kind("wp.plugin-update", WpPluginUpdate, "Update one plugin, or all of them", positional=("domain",),
         example=_WPLUG, paths=_IN_SITE),
    kind("wp.plugin-delete", WpPlugin, "Delete a plugin", positional=("domain", "plugin"), example=_WPLUG,
         paths=_IN_SITE),
    kind("wp.theme-list", WpTarget, "List the themes of an install", read=True, positional=("domain",), example=_W,
         paths=_IN_SITE),
    kind("wp.theme-install", WpThemeInstall, "Install a theme from WordPress.org", positional=("domain", "theme"),
         example={"domain": "example.com", "theme": "twentytwentyfour", "activate": True}, paths=_IN_SITE),
    kind("wp.theme-activate", WpTheme, "Activate a theme", positional=("domain", "theme"),
         example={"domain": "example.com", "theme": "twentytwentyfour"}, paths=_IN_SITE),
    kind("wp.theme-delete", WpTheme, "Delete a theme", positional=("domain", "theme"),
         example={"domain": "example.com", "theme": "twentytwentyone"}, paths=_IN_SITE),
    kind("wp.cache-flush", WpTarget, "Flush the object cache of an install", positional=("domain",), example=_W,
         paths=_IN_SITE),
    kind("wp.user-list", WpTarget, "List the users of an install", read=True, positional=("domain",), example=_W,
         paths=_IN_SITE),
    kind("wp.user-create", WpUserCreate, "Create a WordPress user", positional=("domain", "login"),
         example={"domain": "example.com", "login": "editor1", "email": "ed@example.com", "role": "editor",
                  "password": "correct-horse-battery"}, paths=_IN_SITE),
    kind("wp.search-replace", WpSearchReplace, "Move an install to another domain in its database",
         positional=("domain",),
         example={"domain": "example.com", "search": "old.example.com", "replace": "example.com", "dry_run": True},
         paths=_IN_SITE),
    kind("wp.maintenance", WpMaintenance, "Turn maintenance mode on or off", positional=("domain", "state"),
         example={"domain": "example.com", "state": "on"}, paths=_IN_SITE),
]  # fmt: skip
