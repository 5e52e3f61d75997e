"""``php.*``: PHP versions, their FPM services, ini directives, extension modules and the FPM
pools of the sites (see docs/jobs.md, "php")."""

from __future__ import annotations

from agent.jobs.base import handler
from agent.jobs.php import ini, modules, pools, versions

KINDS = [
    handler("php.versions", versions._versions),
    handler("php.install", versions._install),
    handler("php.uninstall", versions._uninstall),
    handler("php.extension-install", versions._extension_install),
    handler("php.restart", versions._restart),
    handler("php.reload", versions._reload),
    handler("php.fpm-status", versions._fpm_status),
    handler("php.ini-get", ini._ini_get),
    handler("php.ini-set", ini._ini_set),
    handler("php.module-list", modules._module_list),
    handler("php.module-enable", modules._module_enable),
    handler("php.module-disable", modules._module_disable),
    handler("php.set", pools._set),
    handler("php.pool-set", pools._pool_set),
    handler("php.opcache-reset", pools._opcache_reset),
]
