"""Job kinds of `php`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from contract.job_kinds.allowlists import PHP_INI, PHP_INI_PER_SITE, allowed_values, value_of_its_key
from contract.job_kinds.argtypes import (
    IniValue,
    InstalledPhpVersion,
    Int,
    PhpDirective,
    PhpModule,
    PhpVersion,
    SiteDomain,
    SitePhpDirective,
)
from contract.job_kinds.base import INFRA, Args, DomainArgs, JobKind, NoArgs, Result, kind

_D = {"domain": "example.com"}


class PhpVersionArgs(Args):
    version: InstalledPhpVersion


class PhpInstall(Args):
    version: PhpVersion  # one not installed yet: nothing to pick


class PhpSet(Args):
    domain: SiteDomain
    version: InstalledPhpVersion


class PhpIniGet(Args):
    version: InstalledPhpVersion
    key: PhpDirective
    domain: SiteDomain | None = None  # None: the version's global php.ini


class PhpIniSet(Args):
    """A directive of one site's pool (``php_admin_value``): the allow-list of the site's directives."""

    version: InstalledPhpVersion
    key: SitePhpDirective
    value: IniValue = Field(json_schema_extra=allowed_values(PHP_INI_PER_SITE))
    domain: SiteDomain

    _allowed_value = value_of_its_key(PHP_INI_PER_SITE)


class PhpIniGlobalSet(Args):
    """A directive of every site of a PHP version (``99-fleetdeck.ini``): the whole allow-list."""

    version: InstalledPhpVersion
    key: PhpDirective
    value: IniValue = Field(json_schema_extra=allowed_values(PHP_INI))

    _allowed_value = value_of_its_key(PHP_INI)


class PhpModuleArgs(Args):
    version: InstalledPhpVersion
    module: PhpModule


class PhpPool(Args):
    domain: SiteDomain
    pm: Literal["dynamic", "static", "ondemand"] = "ondemand"
    max_children: Int = Field(default=10, ge=1, le=1000)
    max_requests: Int | None = Field(default=None, ge=0, le=1_000_000)


# --- results -------------------------------------------------------------------------------------


class PhpVersionRow(Result):
    version: str = Field(description="the PHP version (8.2)")
    default: bool = Field(description="it is the version `php` runs")
    cli: bool = Field(description="its CLI is installed")
    fpm: bool = Field(description="its FPM is installed")
    fpm_running: bool = Field(description="its FPM master runs")
    fpm_pid: int | None = Field(description="the pid of its FPM master (null: not running)")


class PhpVersions(Result):
    default: str | None = Field(description="the version `php` runs (null: no Debian alternative)")
    versions: list[PhpVersionRow] = Field(description="the installed versions, oldest first")


class PhpIniValue(Result):
    version: str = Field(description="the PHP version")
    key: str = Field(description="the directive")
    value: str = Field(description="its value where it applies (the site's, else the global one)")
    scope: Literal["global", "site"] = Field(description="where the value comes from")
    domain: str | None = Field(default=None, description="the site asked about (null: the global php.ini)")
    global_value: str | None = Field(default=None, description="the global value, when a site was asked about")


class PhpModuleRow(Result):
    name: str = Field(description="the module's name")
    fpm: bool = Field(description="loaded by the FPM")
    cli: bool = Field(description="loaded by the CLI")
    builtin: bool = Field(description="compiled into PHP (it cannot be turned off)")


class PhpModules(Result):
    version: str = Field(description="the PHP version")
    modules: list[PhpModuleRow] = Field(description="its modules, by name")


class PhpFpmProcess(Result):
    pid: int = Field(description="the worker's pid")
    user: str = Field(description="the user it runs as")


class PhpFpmPool(Result):
    name: str = Field(description="the pool's name")
    file: str = Field(description="the pool's configuration file")
    user: str | None = Field(description="the user its workers run as")
    group: str | None = Field(description="their group")
    listen: str | None = Field(description="its socket or address")
    pm: str | None = Field(description="its process manager: dynamic, static or ondemand")
    max_children: int | None = Field(description="workers at most")
    processes: list[PhpFpmProcess] = Field(description="its workers running now, by pid")
    status: dict[str, Any] | None = Field(
        description="its status page as PHP-FPM reports it (null: no pm.status_path, or no answer)"
    )


class PhpFpmStatus(Result):
    version: str = Field(description="the PHP version")
    running: bool = Field(description="its FPM master runs")
    master_pid: int | None = Field(description="the master's pid (null: not running)")
    pools: list[PhpFpmPool] = Field(description="its pools, running or not")


_V = {"version": "8.3"}

# php.install, php.uninstall and php.extension-install print apt's lines: no --json, no result.
# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("php.versions", NoArgs, "List the installed PHP versions", read=True, example={}, result=PhpVersions),
    kind("php.install", PhpInstall, "Install a PHP version", positional=("version",), json=False, example=_V),
    kind("php.uninstall", PhpVersionArgs, "Remove a PHP version no site uses", positional=("version",), json=False,
         example=_V),
    kind("php.set", PhpSet, "Switch a site to a PHP version", positional=("domain", "version"),
         example={"domain": "example.com", "version": "8.3"}),
    kind("php.restart", PhpVersionArgs, "Restart the FPM service of a PHP version", positional=("version",),
         example=_V),
    kind("php.reload", PhpVersionArgs, "Reload the FPM service of a PHP version (new workers, same master)",
         positional=("version",), example=_V),
    kind("php.ini-get", PhpIniGet, "Show a php.ini directive", read=True, positional=("version", "key"),
         example={"version": "8.3", "key": "memory_limit"}, result=PhpIniValue),
    kind("php.ini-set", PhpIniSet, "Set a php.ini directive of one site (from the allow-list)",
         positional=("version", "key", "value"),
         example={"version": "8.3", "key": "memory_limit", "value": "512M", "domain": "example.com"}),
    kind("php.ini-global-set", PhpIniGlobalSet, "Set a php.ini directive for every site of a PHP version",
         positional=("version", "key", "value"), group="sysadmin",
         example={"version": "8.3", "key": "opcache.memory_consumption", "value": "256"}),
    kind("php.module-list", PhpVersionArgs, "List the extension modules of a PHP version", read=True,
         positional=("version",), example=_V, result=PhpModules),
    kind("php.module-enable", PhpModuleArgs, "Enable a PHP extension module", positional=("version", "module"),
         example={"version": "8.3", "module": "imagick"}),
    kind("php.module-disable", PhpModuleArgs, "Disable a PHP extension module", positional=("version", "module"),
         example={"version": "8.3", "module": "xdebug"}),
    kind("php.extension-install", PhpModuleArgs, "Install a PHP extension from Debian (php<version>-<module>)",
         positional=("version", "module"), json=False, example={"version": "8.3", "module": "imagick"}),
    kind("php.fpm-status", PhpVersionArgs, "Show the FPM pools of a PHP version", read=True,
         positional=("version",), example=_V, result=PhpFpmStatus),
    kind("php.pool-set", PhpPool, "Size the FPM pool of a site", positional=("domain",),
         example={"domain": "example.com", "pm": "dynamic", "max_children": 20}),
    kind("php.opcache-reset", DomainArgs, "Empty the opcache of the FPM serving a site", positional=("domain",),
         example=_D),
]  # fmt: skip
