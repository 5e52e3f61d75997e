"""Site certificates through the API, on the hosting server's real nginx, from a real ACME CA:
pebble (the Let's Encrypt test CA, a Debian package) validates each name over HTTP-01 on the
session's nginx, which serves the challenge files the agent writes; the certificate is then
served by the site's TLS server block (a handshake with the site's name gets it).

Its readers of tool output are tested on recorded output too (tests/data/tool_output/): they
run where the tool is absent, and cover what a live machine rarely shows."""

from __future__ import annotations

import datetime
import json
import os
import socket
import ssl
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agent.jobs.ssl import parse_x509, renew_sites_due
from agent.jobs.toolkit.base import JobContext
from agent.jobs.toolkit.host import LayoutFile
from agent.sites import SiteRegistry
from fleetdeck.launcher import free_port
from tests.helpers.hosting import Hosting, JobRun
from tests.helpers.pebble import Pebble, pebble_installed, run_pebble
from tests.helpers.recorded_systemd import RECORDED

pytestmark = pytest.mark.skipif(not pebble_installed(), reason="pebble is not installed (Debian package: pebble)")


@pytest.fixture(scope="module")
def pebble(hosting: Hosting) -> Iterator[Pebble]:
    """Pebble validating on the session's nginx; the agent's layout points the sites' ACME at it
    and gives nginx a TLS listener."""
    assert hosting.nginx is not None
    folder = hosting.folder / f"pebble-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    with run_pebble(folder, http_port=hosting.nginx.port) as running:
        nginx = dict(hosting.layout["nginx"])
        nginx.setdefault("tls_listen", f"127.0.0.1:{free_port()} ssl")
        hosting.configure("nginx", nginx)
        hosting.configure("acme", {"directory_url": running.directory_url, "ca_bundle": str(running.ca_bundle)})
        yield running
        hosting.configure("acme", {})


@pytest.fixture
def site(hosting: Hosting, pebble: Pebble) -> Iterator[str]:
    domain = f"tls-{uuid.uuid4().hex[:8]}.test"
    hosting.run("site.create", domain=domain, profile="static").ok()
    yield domain
    hosting.run("site.delete", domain=domain).ok()


def printed(run: JobRun) -> dict[str, Any]:
    """What a mutation printed as JSON on stdout (the API keeps a `result` for reads only)."""
    found: dict[str, Any] = json.loads("\n".join(run.ok().stdout))
    return found


def tls_port(hosting: Hosting) -> int:
    return int(hosting.layout["nginx"]["tls_listen"].split(":")[1].split()[0])


def served_certificate(hosting: Hosting, name: str) -> x509.Certificate:
    """The certificate nginx presents for `name` (SNI) on the TLS listener."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the chain is checked below, against pebble's root
    raw = socket.create_connection(("127.0.0.1", tls_port(hosting)), timeout=10)
    with context.wrap_socket(raw, server_hostname=name) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def names_of(cert: x509.Certificate) -> list[str]:
    return list(
        cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    )


def issued_by_pebble(cert: x509.Certificate, pebble: Pebble) -> bool:
    intermediate = x509.load_pem_x509_certificate(pebble.fetch("/intermediates/0"))
    return cert.issuer == intermediate.subject


def test_issue_serves_a_certificate_from_the_ca_and_says_so_when_asked_again(
    hosting: Hosting, pebble: Pebble, site: str
) -> None:
    issued = printed(hosting.run("ssl.issue", domain=site))
    assert issued["names"] == [site]
    assert issued["source"] == "acme" and issued["auto_renew"] is True
    served = served_certificate(hosting, site)
    assert names_of(served) == [site]
    assert issued_by_pebble(served, pebble)
    assert f"{served.serial_number:x}" == issued["serial"]
    key = (hosting.state / "ssl" / site.replace(".", "-") / "privkey.pem").resolve()
    assert key.stat().st_mode & 0o777 == 0o600
    assert hosting.get(site).status_code == 200  # plain HTTP still serves the site

    again = hosting.run("ssl.issue", domain=site).ok()
    assert "already has a certificate" in again.text
    assert printed(again)["serial"] == issued["serial"]

    inspected = hosting.run("ssl.inspect", domain=site).ok().result
    assert inspected["serial"] == issued["serial"] and inspected["days_left"] >= 0
    listed = hosting.run("ssl.list").ok().result["certificates"]
    assert any(c["names"] == [site] and c["source"] == "site" for c in listed)


def test_issue_refuses_names_the_site_does_not_serve_and_wildcards(hosting: Hosting, site: str) -> None:
    stranger = hosting.run("ssl.issue", domain=site, aliases=[f"www.other-{site}"])
    assert stranger.exit_code == 1 and "not served by site" in stranger.text
    wildcard = hosting.run("ssl.issue", domain=site, wildcard=True)
    assert wildcard.exit_code == 1 and "DNS-01" in wildcard.text
    assert hosting.run("ssl.inspect", domain=site).exit_code == 1  # nothing was issued


def test_an_alias_is_named_in_the_certificate(hosting: Hosting, pebble: Pebble, site: str) -> None:
    alias = f"shop-{site}"
    hosting.run("site.alias-add", domain=site, alias=alias).ok()
    hosting.run("ssl.issue", domain=site, aliases=[alias]).ok()
    assert sorted(names_of(served_certificate(hosting, alias))) == sorted([site, alias])


def test_renew_waits_until_due_unless_forced_then_serves_a_new_certificate(hosting: Hosting, site: str) -> None:
    first = printed(hosting.run("ssl.issue", domain=site))
    waiting = hosting.run("ssl.renew", domain=site)
    assert "not due" in waiting.text and printed(waiting)["serial"] == first["serial"]
    forced = printed(hosting.run("ssl.renew", domain=site, force=True))
    assert forced["serial"] != first["serial"]
    assert f"{served_certificate(hosting, site).serial_number:x}" == forced["serial"]


def test_the_renewal_loop_renews_due_certificates_whose_auto_renew_is_on(hosting: Hosting, site: str) -> None:
    first = printed(hosting.run("ssl.issue", domain=site))
    other = f"tls-{uuid.uuid4().hex[:8]}.test"
    hosting.run("site.create", domain=other, profile="static").ok()
    try:
        hosting.run("ssl.issue", domain=other).ok()
        hosting.run("ssl.auto-renew", domain=other, state="off").ok()
        ctx = JobContext(
            str(hosting.home),
            str(hosting.state),
            SiteRegistry(str(hosting.state)),
            "test",
            layout=LayoutFile(str(hosting.layout_file)),
        )
        later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=5)  # past two thirds of 6 days
        renewed = trio.run(renew_sites_due, ctx, later)
        assert renewed == [site]  # `other` is due too, but its auto-renew is off
        served = served_certificate(hosting, site)
        assert f"{served.serial_number:x}" != first["serial"]
        assert f"{served.serial_number:x}" == hosting.run("ssl.inspect", domain=site).ok().result["serial"]
    finally:
        hosting.run("site.delete", domain=other).ok()


def test_https_redirect_sends_plain_http_to_the_certificate(hosting: Hosting, site: str) -> None:
    hosting.run("ssl.issue", domain=site).ok()
    hosting.run("site.redirect-set", domain=site, https=True).ok()
    answer = hosting.get(site, "/page?x=1")
    assert answer.status_code == 301
    assert answer.headers["location"] == f"https://{site}/page?x=1"
    challenge = hosting.get(site, "/.well-known/acme-challenge/none")
    assert challenge.status_code == 404  # challenges stay on plain HTTP (a renewal needs them)


def test_auto_renew_is_a_switch_that_says_when_nothing_changes(hosting: Hosting, site: str) -> None:
    hosting.run("ssl.issue", domain=site).ok()
    hosting.run("ssl.auto-renew", domain=site, state="off").ok()
    assert hosting.run("ssl.inspect", domain=site).ok().result["auto_renew"] is False
    assert "already off" in hosting.run("ssl.auto-renew", domain=site, state="off").ok().text
    hosting.run("ssl.auto-renew", domain=site, state="on").ok()
    assert hosting.run("ssl.inspect", domain=site).ok().result["auto_renew"] is True


def test_revoke_tells_the_ca_and_the_site_goes_back_to_http(hosting: Hosting, pebble: Pebble, site: str) -> None:
    serial = printed(hosting.run("ssl.issue", domain=site))["serial"]
    hosting.run("ssl.revoke", domain=site, reason="key_compromise").ok()
    status = json.loads(pebble.fetch(f"/cert-status-by-serial/{serial}"))
    assert status["Status"] == "Revoked"
    assert hosting.run("ssl.inspect", domain=site).exit_code == 1
    assert hosting.get(site).status_code == 200


def test_delete_removes_the_certificate_and_is_idempotent(hosting: Hosting, site: str) -> None:
    hosting.run("ssl.issue", domain=site).ok()
    assert printed(hosting.run("ssl.delete", domain=site))["deleted"] is True
    assert hosting.run("ssl.inspect", domain=site).exit_code == 1
    assert not (hosting.state / "ssl" / site.replace(".", "-")).exists()
    again = printed(hosting.run("ssl.delete", domain=site))
    assert again["deleted"] is False and "nothing to delete" in again["message"]


# --- installing a certificate from the site's files ---------------------------------------------


def self_signed(name: str, days: int = 30) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def put(hosting: Hosting, domain: str, path: str, data: bytes) -> None:
    target = hosting.home / domain.replace(".", "-") / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def test_install_serves_an_uploaded_pair_and_refuses_a_mismatched_one(hosting: Hosting, site: str) -> None:
    cert, key = self_signed(site)
    put(hosting, site, "uploads/site.crt", cert)
    put(hosting, site, "uploads/site.key", key)
    installed = hosting.run("ssl.install", domain=site, cert_path="uploads/site.crt", key_path="uploads/site.key")
    result = printed(installed)
    assert result["source"] == "installed" and result["auto_renew"] is False
    assert served_certificate(hosting, site).public_bytes(serialization.Encoding.PEM) == cert

    _, other_key = self_signed(site)
    put(hosting, site, "uploads/other.key", other_key)
    refused = hosting.run("ssl.install", domain=site, cert_path="uploads/site.crt", key_path="uploads/other.key")
    assert refused.exit_code == 1 and "does not belong" in refused.text
    assert served_certificate(hosting, site).public_bytes(serialization.Encoding.PEM) == cert  # still served
    renew = hosting.run("ssl.renew", domain=site)
    assert renew.exit_code == 1 and "installed from files" in renew.text


def test_install_reads_only_inside_the_site(hosting: Hosting, site: str) -> None:
    dotted = hosting.post("ssl.install", domain=site, cert_path="../../state/sites.json", key_path="x.key")
    assert dotted.status_code == 422  # refused by the API: the catalog's path rule
    cert, key = self_signed(site)
    put(hosting, site, "uploads/site.key", key)
    outside = hosting.folder / f"outside-{uuid.uuid4().hex[:6]}.crt"
    outside.write_bytes(cert)
    link = hosting.home / site.replace(".", "-") / "uploads" / "link.crt"
    link.symlink_to(outside)  # a link out of the site: the jail does not follow it
    escaped = hosting.run("ssl.install", domain=site, cert_path="uploads/link.crt", key_path="uploads/site.key")
    assert escaped.exit_code == 1 and "uploads/link.crt" in escaped.text
    os.mkfifo(link.with_name("fifo.crt"))  # read as root, a FIFO would hold the job forever
    fifo = hosting.run("ssl.install", domain=site, cert_path="uploads/fifo.crt", key_path="uploads/site.key")
    assert fifo.exit_code == 1 and "uploads/fifo.crt" in fifo.text and "not a regular file" in fifo.text
    assert hosting.run("ssl.inspect", domain=site).exit_code == 1


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


# --- openssl x509 -------------------------------------------------------------------------------


def test_certificate_with_alternative_names() -> None:
    cert = parse_x509(recorded("openssl_x509_san.txt"))
    assert cert["subject"] == "CN = example.com, O = Example Ltd"
    assert cert["issuer"] == "C = US, O = Let's Encrypt, CN = R11"
    assert cert["not_after"] == "2126-12-23T15:23:44Z"
    assert cert["expired"] is False and cert["days_left"] > 365 * 99
    assert cert["names"] == ["example.com", "www.example.com", "IP Address:192.0.2.1"]


def test_certificate_without_alternative_names_is_named_by_its_common_name() -> None:
    cert = parse_x509(recorded("openssl_x509_no_san_expired.txt"))
    assert cert["names"] == ["old.example.org"]
    assert cert["not_after"] == "2001-11-24T15:23:45Z"
    assert cert["expired"] is True and cert["days_left"] < 0


def test_an_unreadable_date_is_kept_as_printed_and_no_name_is_invented() -> None:
    cert = parse_x509(recorded("openssl_x509_odd_date.txt"))
    assert cert["not_after"] == "sometime next year"
    assert "expired" not in cert and "days_left" not in cert
    assert cert["names"] == [] and cert["subject"] == "O = No Common Name"


def test_no_openssl_output() -> None:
    assert parse_x509("") == {"subject": None, "issuer": None, "not_after": None, "names": []}


def test_alternative_names_header_as_the_last_line() -> None:
    assert parse_x509("subject=CN = a.example\nX509v3 Subject Alternative Name: \n")["names"] == ["a.example"]
