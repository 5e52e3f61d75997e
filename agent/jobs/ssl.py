"""``ssl``: the sites' certificates, and every certificate of the server listed.

A site's certificate is issued by an ACME CA over HTTP-01 through the site's own nginx (the same
ACME code as the load balancers' TLS, `agent.load_balancers.acme`: the answers are files in the
challenge folder every site's server block serves), or installed from files in the site.

On disk, in the agent's state folder::

    ssl/<slug>                 -> the site's current certificate folder (fullchain.pem, privkey.pem
                                  0600): a symbolic link, swapped atomically
    ssl-acme/                  the ACME account and the issued certificates (account/, certs/<domain>/current)
    ssl-installed/<slug>/<n>/  a certificate installed from the site's files
    ssl-sites/<slug>.json      how the site's certificate came and whether it renews itself

The site's server block (`agent.jobs.toolkit.site_web`) adds its TLS listener while ``ssl/<slug>`` holds
both files; every change here re-renders it, and when nginx refuses the result (``nginx -t``)
the previous link comes back and the job ends 78. Renewal: `ssl.renew` now, and the agent's
renewal loop (`keep_sites_renewed`) for the certificates whose auto-renew is on.
"""

from __future__ import annotations

import datetime
import glob
import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC
from datetime import datetime as dt
from pathlib import Path
from typing import Any

import trio
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from agent.jobs.toolkit.base import JobContext, handler, rfc3339
from agent.jobs.toolkit.common import find_site
from agent.jobs.toolkit.host import reload_nginx
from agent.jobs.toolkit.output import JobError, Output
from agent.jobs.toolkit.proc import capture_command, require
from agent.jobs.toolkit.site_files import open_site_input
from agent.load_balancers.acme import (
    LETS_ENCRYPT_DIRECTORY,
    RENEWAL_CHECK_S,
    AcmeError,
    AcmeSettings,
    CertFiles,
    FileChallenges,
    certificate_names,
    current_certificate,
    ensure_certificate,
    renew_due,
    revoke_certificate,
)
from agent.sites import Site, write_atomically
from contract.job_kinds.base import DomainArgs, NoArgs
from contract.job_kinds.ssl import SslAutoRenew, SslInstall, SslIssue, SslRenew, SslRevoke

log = logging.getLogger("fleetdeck.agent.jobs")

LETSENCRYPT_LIVE = "/etc/letsencrypt/live"
MAX_PEM_BYTES = 1024 * 1024
# Each provider's ACME directory: (production, staging). A directory given to the agent
# (--acme-directory, or the layout's `acme` section) serves every provider instead.
PROVIDERS = {
    "letsencrypt": (LETS_ENCRYPT_DIRECTORY, "https://acme-staging-v02.api.letsencrypt.org/directory"),
    "buypass": ("https://api.buypass.com/acme/directory", "https://api.test4.buypass.no/acme/directory"),
}


# --- where a site's certificate lives ----------------------------------------------------------


@dataclass
class SiteCert:
    """How a site's certificate came (``ssl-sites/<slug>.json``)."""

    source: str  # "acme" or "installed"
    auto_renew: bool = False
    provider: str = "letsencrypt"
    staging: bool = False
    key_type: str = "ec256"
    email: str | None = None
    names: list[str] = field(default_factory=list)


def _link(ctx: JobContext, site: Site) -> str:
    return os.path.join(ctx.state_dir, "ssl", site.slug)


def _meta_path(ctx: JobContext, site: Site) -> str:
    return os.path.join(ctx.state_dir, "ssl-sites", f"{site.slug}.json")


def read_site_cert(ctx: JobContext, site: Site) -> SiteCert | None:
    try:
        with open(_meta_path(ctx, site), "rb") as f:
            return SiteCert(**json.loads(f.read()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        raise JobError(f"the certificate record of {site.domain} is unreadable: {exc}") from exc


def _write_meta(ctx: JobContext, site: Site, meta: SiteCert | None) -> None:
    path = _meta_path(ctx, site)
    if meta is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    write_atomically(path, json.dumps(asdict(meta)).encode())


def _point(ctx: JobContext, site: Site, target: str | None) -> None:
    """Point ``ssl/<slug>`` at `target` (None: remove it), atomically."""
    link = _link(ctx, site)
    if target is None:
        if os.path.isdir(link) and not os.path.islink(link):  # a folder put there by hand
            shutil.rmtree(link)
        else:
            try:
                os.unlink(link)
            except FileNotFoundError:
                pass
        return
    os.makedirs(os.path.dirname(link), mode=0o700, exist_ok=True)  # in the private state: nginx's master reads as root
    temporary = os.path.join(os.path.dirname(link), f".{site.slug}.new")
    try:
        os.unlink(temporary)
    except FileNotFoundError:
        pass
    os.symlink(target, temporary)
    os.replace(temporary, link)


def _pointed(ctx: JobContext, site: Site) -> str | None:
    try:
        return os.readlink(_link(ctx, site))
    except OSError:
        return None


async def _switch(
    ctx: JobContext, site: Site, target: str | None, meta: SiteCert | None, *, new_files: bool = False
) -> None:
    """Make `target` the site's certificate and re-render its server block; when nginx refuses
    it, the previous certificate and record come back (and the JobError goes on). `new_files`:
    the files behind an unchanged `target` changed (a renewal), so nginx reloads to read them."""
    from agent.jobs.toolkit.site_web import apply_site_web

    before, before_meta = _pointed(ctx, site), read_site_cert(ctx, site)
    await trio.to_thread.run_sync(_point, ctx, site, target)
    await trio.to_thread.run_sync(_write_meta, ctx, site, meta)
    try:
        await apply_site_web(ctx, site)
    except BaseException:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_point, ctx, site, before)
            await trio.to_thread.run_sync(_write_meta, ctx, site, before_meta)
        raise
    if new_files and before == target:  # the server block did not change, so nothing reloaded it
        await reload_nginx(ctx.host)


# --- ACME ------------------------------------------------------------------------------------------


def acme_settings(ctx: JobContext, meta: SiteCert) -> AcmeSettings:
    """The CA of a site's certificate: the layout's directory, else the agent's own when it was
    given one, else the provider's (production or staging)."""
    agent = getattr(ctx.lb, "settings", None)
    agent_directory = getattr(agent, "acme_directory", LETS_ENCRYPT_DIRECTORY)
    directory = ctx.host.acme.directory_url
    if directory is None and agent_directory != LETS_ENCRYPT_DIRECTORY:
        directory = agent_directory
    if directory is None:
        if meta.provider not in PROVIDERS:
            raise JobError(
                f"{meta.provider} needs an External Account Binding key, which this agent does not take yet:"
                " use letsencrypt or buypass"
            )
        directory = PROVIDERS[meta.provider][1 if meta.staging else 0]
    bundle = ctx.host.acme.ca_bundle or getattr(agent, "acme_ca_bundle", None)
    return AcmeSettings(
        Path(ctx.state_dir) / "ssl-acme",
        directory_url=directory,
        ca_bundle=Path(bundle) if bundle else None,
        email=meta.email,
    )


def _challenges(ctx: JobContext) -> FileChallenges:
    from agent.jobs.toolkit.site_web import acme_challenge_dir

    return FileChallenges(Path(acme_challenge_dir(ctx)))


async def _obtain(ctx: JobContext, site: Site, meta: SiteCert, out: Output, *, force: bool) -> tuple[CertFiles, bool]:
    """The site's ACME certificate for `meta.names`: (files, whether the CA issued a new one)."""
    settings = acme_settings(ctx, meta)
    before = await trio.to_thread.run_sync(current_certificate, settings, site.domain)
    out.stderr(f"asking {settings.directory_url} for a certificate for {', '.join(meta.names)}")
    try:
        files = await ensure_certificate(
            settings,
            site.domain,
            _challenges(ctx),
            aliases=meta.names[1:],
            key_type=meta.key_type,  # type: ignore[arg-type]  # the catalog's Literal, the same values
            force=force,
        )
    except AcmeError as exc:
        raise JobError(f"no certificate for {site.domain}: {exc}") from exc
    fresh = before is None or (before.not_before, before.names) != (files.not_before, files.names)
    return files, fresh


def _served_names(ctx: JobContext, site: Site) -> set[str]:
    """The names the site's server blocks answer, each with its challenge folder: its domain, its
    aliases, and the www or bare form its www redirect adds. Blocking."""
    from agent.jobs.toolkit.site_web import settings_of

    web = settings_of(ctx.sites.entry(site.domain) or {}, ctx.site_home(site.slug))
    names = {web.domain, *web.aliases}
    if web.www_redirect != "keep":
        bare = web.domain.removeprefix("www.")
        names |= {bare, f"www.{bare}"}
    return names


async def _issue(args: SslIssue, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    if args.wildcard:
        raise JobError(
            "a wildcard certificate needs DNS-01 validation, which this agent does not do: name the hosts as aliases"
        )
    names = list(dict.fromkeys([site.domain, *args.aliases]))
    unserved = [name for name in names if name not in await trio.to_thread.run_sync(_served_names, ctx, site)]
    if unserved:
        raise JobError(
            f"{', '.join(unserved)} not served by site {site.domain}: the CA validates each name through the"
            " site's server block (add it with site.alias-add first)"
        )
    meta = SiteCert("acme", True, args.provider, args.staging, args.key_type, args.email, names)
    files, fresh = await _obtain(ctx, site, meta, out, force=False)
    if not fresh:
        until = rfc3339(files.not_after.timestamp())
        out.stderr(f"{site.domain} already has a certificate for these names, valid until {until}")
    await _switch(ctx, site, str(files.fullchain.parent), meta, new_files=fresh)
    out.result(await _describe(ctx, site), as_json=ctx.as_json)
    return 0


async def _renew(args: SslRenew, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    meta = await trio.to_thread.run_sync(read_site_cert, ctx, site)
    if meta is None:
        raise JobError(f"site {site.domain} has no certificate (ssl.issue makes one)")
    if meta.source != "acme":
        raise JobError(f"the certificate of {site.domain} was installed from files: install its successor instead")
    files, fresh = await _obtain(ctx, site, meta, out, force=args.force)
    if not fresh:
        out.stderr(
            f"not due: the certificate of {site.domain} renews from {rfc3339(files.renew_at.timestamp())}"
            " (--force renews now)"
        )
    await _switch(ctx, site, str(files.fullchain.parent), meta, new_files=fresh)
    out.result(await _describe(ctx, site), as_json=ctx.as_json)
    return 0


async def _revoke(args: SslRevoke, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    meta = await trio.to_thread.run_sync(read_site_cert, ctx, site)
    if meta is None or meta.source != "acme":
        raise JobError(f"site {site.domain} has no certificate from an ACME CA to revoke")
    settings = acme_settings(ctx, meta)
    try:
        revoked = await revoke_certificate(settings, site.domain, args.reason)
    except AcmeError as exc:
        raise JobError(f"the CA did not revoke the certificate of {site.domain}: {exc}") from exc
    out.stderr(f"revoked the certificate of {site.domain} ({args.reason}); the site serves HTTP only now")
    await _switch(ctx, site, None, None)
    await trio.to_thread.run_sync(_remove_files, ctx, site)
    out.result({"domain": site.domain, "revoked": True, "names": list(revoked.names)}, as_json=ctx.as_json)
    return 0


async def _delete(args: DomainArgs, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    if _pointed(ctx, site) is None and await trio.to_thread.run_sync(read_site_cert, ctx, site) is None:
        message = f"site {site.domain} has no certificate: nothing to delete"
        out.result({"domain": site.domain, "deleted": False, "message": message}, as_json=ctx.as_json)
        return 0
    await _switch(ctx, site, None, None)
    await trio.to_thread.run_sync(_remove_files, ctx, site)
    message = f"deleted the certificate of {site.domain}; the site serves HTTP only now"
    out.result({"domain": site.domain, "deleted": True, "message": message}, as_json=ctx.as_json)
    return 0


def _remove_files(ctx: JobContext, site: Site) -> None:
    shutil.rmtree(os.path.join(ctx.state_dir, "ssl-acme", "certs", site.domain), ignore_errors=True)
    shutil.rmtree(os.path.join(ctx.state_dir, "ssl-installed", site.slug), ignore_errors=True)


def forget_site_certificates(ctx: JobContext, site: Site) -> bool:
    """Remove everything of a deleted site's certificates (its link, record and files): whether
    it had one. Blocking."""
    had = os.path.lexists(_link(ctx, site)) or os.path.exists(_meta_path(ctx, site))
    _point(ctx, site, None)
    _write_meta(ctx, site, None)
    _remove_files(ctx, site)
    return had


async def forget_site(ctx: JobContext, site: Site, out: Output) -> bool:
    """`forget_site_certificates` for ``site delete`` (`agent.jobs.toolkit.site_teardown`)."""
    return await trio.to_thread.run_sync(forget_site_certificates, ctx, site)


async def _auto_renew(args: SslAutoRenew, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    meta = await trio.to_thread.run_sync(read_site_cert, ctx, site)
    if meta is None:
        raise JobError(f"site {site.domain} has no certificate (ssl.issue makes one)")
    wanted = args.state == "on"
    if wanted and meta.source != "acme":
        raise JobError(f"the certificate of {site.domain} was installed from files: the agent cannot renew it")
    if meta.auto_renew == wanted:
        out.stdout(f"automatic renewal of {site.domain} is already {args.state}")
        return 0
    meta.auto_renew = wanted
    await trio.to_thread.run_sync(_write_meta, ctx, site, meta)
    out.stdout(f"automatic renewal of {site.domain} is {args.state}")
    return 0


# --- installing a certificate from the site's files ---------------------------------------------


def _read_in_site(ctx: JobContext, site: Site, path: str) -> bytes:
    """A file of the site, through the boundary (`open_site_input`: no way out of the site's
    folder by link or ``..``; a FIFO, a device or a hard link to another user's file refused)."""
    try:
        fd = open_site_input(ctx, site, path)
    except OSError as exc:
        raise JobError(f"{path}: {exc.strerror}") from exc
    try:
        data = os.read(fd, MAX_PEM_BYTES + 1)
    except OSError as exc:
        raise JobError(f"{path}: {exc.strerror}") from exc
    finally:
        os.close(fd)
    if len(data) > MAX_PEM_BYTES:
        raise JobError(f"{path} is larger than {MAX_PEM_BYTES} bytes: not a PEM certificate or key")
    return data


def checked_pair(cert_pem: bytes, key_pem: bytes, chain_pem: bytes = b"") -> tuple[list[x509.Certificate], bytes]:
    """The certificates (the site's first, then its chain) and the key, once they are known to
    belong together: the key is the certificate's, and the certificate is valid now."""
    try:
        certs = x509.load_pem_x509_certificates(cert_pem + b"\n" + chain_pem)
    except ValueError as exc:
        raise JobError(f"not a PEM certificate: {exc}") from exc
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise JobError(f"not an unencrypted PEM private key: {exc}") from exc
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.DER
    if key.public_key().public_bytes(encoding, public) != certs[0].public_key().public_bytes(encoding, public):
        raise JobError("the key does not belong to the certificate: nothing was installed")
    now = datetime.datetime.now(UTC)
    if not certs[0].not_valid_before_utc <= now <= certs[0].not_valid_after_utc:
        raise JobError(
            f"the certificate is not valid now (valid until {rfc3339(certs[0].not_valid_after_utc.timestamp())})"
        )
    encoded = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return certs, encoded


def _store_installed(ctx: JobContext, site: Site, certs: list[x509.Certificate], key_pem: bytes) -> str:
    folder = os.path.join(ctx.state_dir, "ssl-installed", site.slug, f"{time.time_ns():x}")
    os.makedirs(folder, mode=0o700)  # nginx's master reads it as root
    chain = b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in certs)
    write_atomically(os.path.join(folder, "fullchain.pem"), chain, 0o644)
    write_atomically(os.path.join(folder, "privkey.pem"), key_pem, 0o600)
    return folder


async def _install(args: SslInstall, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    cert_pem = await trio.to_thread.run_sync(_read_in_site, ctx, site, args.cert_path)
    key_pem = await trio.to_thread.run_sync(_read_in_site, ctx, site, args.key_path)
    chain_pem = await trio.to_thread.run_sync(_read_in_site, ctx, site, args.chain_path) if args.chain_path else b""
    certs, key = checked_pair(cert_pem, key_pem, chain_pem)
    names = list(certificate_names(certs[0]))
    if site.domain not in names:
        out.stderr(f"note: the certificate names {', '.join(names) or 'no DNS name'}, not {site.domain}")
    previous = _pointed(ctx, site)
    folder = await trio.to_thread.run_sync(_store_installed, ctx, site, certs, key)
    try:
        await _switch(ctx, site, folder, SiteCert("installed", names=names))
    except BaseException:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(shutil.rmtree, folder, True)
        raise
    if previous and previous.startswith(os.path.join(ctx.state_dir, "ssl-installed", site.slug) + os.sep):
        await trio.to_thread.run_sync(shutil.rmtree, previous, True)
    out.result(await _describe(ctx, site), as_json=ctx.as_json)
    return 0


# --- reading -------------------------------------------------------------------------------------


def describe_site_cert(ctx: JobContext, site: Site) -> dict[str, Any] | None:
    """The site's certificate as the kinds print it (None: it has none). Blocking."""
    meta = read_site_cert(ctx, site)
    path = os.path.join(_link(ctx, site), "fullchain.pem")
    try:
        cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
    except (OSError, ValueError):
        return None
    not_after = cert.not_valid_after_utc
    return {
        "domain": site.domain,
        "source": meta.source if meta else "unknown",
        "auto_renew": bool(meta and meta.auto_renew),
        "names": list(certificate_names(cert)),
        "issuer": cert.issuer.rfc4514_string(),
        "serial": f"{cert.serial_number:x}",
        "not_before": rfc3339(cert.not_valid_before_utc.timestamp()),
        "not_after": rfc3339(not_after.timestamp()),
        "days_left": int((not_after - datetime.datetime.now(UTC)).total_seconds() // 86400),
        "path": path,
    }


async def _describe(ctx: JobContext, site: Site) -> dict[str, Any]:
    found = await trio.to_thread.run_sync(describe_site_cert, ctx, site)
    if found is None:
        raise JobError(f"site {site.domain} has no certificate")
    return found


async def _inspect(args: DomainArgs, ctx: JobContext, out: Output) -> int:
    site = await find_site(ctx, args.domain)
    out.result(await _describe(ctx, site), as_json=ctx.as_json)
    return 0


def certificate_paths(state_dir: str, letsencrypt_live: str = LETSENCRYPT_LIVE) -> list[str]:
    """Every certificate file of the server: certbot's, the sites' (``ssl/<slug>/fullchain.pem``)
    and loose ``ssl/*.pem`` files."""
    ssl_dir = glob.escape(os.path.join(state_dir, "ssl"))
    paths = sorted(glob.glob(os.path.join(glob.escape(letsencrypt_live), "*", "cert.pem")))
    paths += sorted(glob.glob(os.path.join(ssl_dir, "*", "fullchain.pem")))
    paths += sorted(glob.glob(os.path.join(ssl_dir, "*.pem")))
    return paths


def parse_x509(text: str) -> dict[str, Any]:
    """The fields of ``openssl x509 -noout -subject -enddate -issuer -ext subjectAltName``."""
    result: dict[str, Any] = {"subject": None, "issuer": None, "not_after": None, "names": []}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("subject="):
            result["subject"] = line.removeprefix("subject=").strip()
        elif line.startswith("issuer="):
            result["issuer"] = line.removeprefix("issuer=").strip()
        elif line.startswith("notAfter="):
            raw = " ".join(line.removeprefix("notAfter=").split())
            try:
                when = dt.strptime(raw, "%b %d %H:%M:%S %Y GMT").replace(tzinfo=UTC)
            except ValueError:
                result["not_after"] = raw
            else:
                result["not_after"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
                result["days_left"] = int((when.timestamp() - time.time()) // 86400)
                result["expired"] = when.timestamp() < time.time()
        elif line.startswith("X509v3 Subject Alternative Name") and i + 1 < len(lines):
            names = [n.strip() for n in lines[i + 1].split(",") if n.strip()]
            result["names"] = [n.split(":", 1)[1] if n.startswith("DNS:") else n for n in names]
    subject = result["subject"] or ""
    if not result["names"] and "CN = " in subject:
        result["names"] = [subject.split("CN = ", 1)[1].split(",")[0].strip()]
    return result


def _source(state_dir: str, path: str) -> str:
    if path.startswith(LETSENCRYPT_LIVE + "/"):
        return "letsencrypt"
    return "site" if os.path.basename(path) == "fullchain.pem" else "agent"


async def read_certificate(openssl: str, path: str, state_dir: str = "") -> dict[str, Any]:
    argv = [openssl, "x509", "-noout", "-subject", "-enddate", "-issuer", "-ext", "subjectAltName", "-in", path]
    code, text, err = await capture_command(argv)
    source = _source(state_dir, path)
    if code != 0 or "notAfter=" not in text:
        first = next((line for line in err.splitlines() if line.strip()), f"exit {code}")
        return {"path": path, "source": source, "error": f"not a readable certificate: {first.strip()}"}
    return {"path": path, "source": source, **parse_x509(text)}


async def _list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    paths = certificate_paths(ctx.state_dir)
    certificates = []
    if paths:
        openssl = require("openssl", "read the certificates")
        certificates = [await read_certificate(openssl, path, ctx.state_dir) for path in paths]
    out.result({"certificates": certificates}, as_json=ctx.as_json)
    return 0


# --- the renewal loop ----------------------------------------------------------------------------


async def renew_sites_due(ctx: JobContext, now: datetime.datetime | None = None) -> list[str]:
    """Renew the due ACME certificates of the sites whose auto-renew is on (due at `now`, the
    clock by default), and serve the new ones; the domains renewed (a failure is logged and
    retried at the next round)."""
    renewed = []
    for site in await trio.to_thread.run_sync(ctx.sites.sites):
        meta = await trio.to_thread.run_sync(read_site_cert, ctx, site)
        if meta is None or meta.source != "acme" or not meta.auto_renew:
            continue
        settings = acme_settings(ctx, meta)
        for renewal in await renew_due(settings, [site.domain], _challenges(ctx), now):
            if renewal.files is not None:
                await _switch(ctx, site, str(renewal.files.fullchain.parent), meta, new_files=True)
                renewed.append(site.domain)
    return renewed


async def keep_sites_renewed(ctx: JobContext, check_every_s: float = RENEWAL_CHECK_S) -> None:
    """The agent's renewal loop for the sites' certificates (in its nursery)."""
    while True:
        try:
            await renew_sites_due(ctx)
        except JobError as exc:
            log.warning("site certificate renewal: %s", exc)
        await trio.sleep(check_every_s)


KINDS = [
    handler("ssl.list", _list),
    handler("ssl.inspect", _inspect),
    handler("ssl.issue", _issue),
    handler("ssl.renew", _renew),
    handler("ssl.revoke", _revoke),
    handler("ssl.delete", _delete),
    handler("ssl.install", _install),
    handler("ssl.auto-renew", _auto_renew),
]
