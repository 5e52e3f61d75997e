"""Pebble, the Let's Encrypt test CA (a Debian package), on loopback for the certificate tests.

Two processes: `pebble-challtestsrv` as the DNS server that resolves every name to 127.0.0.1
(its HTTP-01, HTTPS and TLS-ALPN servers are off: the code under test answers the challenges),
and `pebble` itself, whose HTTP-01 validations go to `127.0.0.1:<http_port>`. `http_port` is
picked free when pebble starts: a test puts its challenge responder (or the load balancer's
port-80 mapping) there. Pebble serves its ACME API over HTTPS with a certificate this helper
makes; `ca_bundle` is the file a client trusts for it.

Environment: no sleep before validations, no random nonce rejections, no reuse of a valid
authorization (every order is validated again, so a renewal is seen by the responder).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fleetdeck.launcher import free_ports

PEBBLE = shutil.which("pebble") or "/usr/bin/pebble"
CHALLTESTSRV = shutil.which("pebble-challtestsrv") or "/usr/bin/pebble-challtestsrv"
STARTUP_TIMEOUT_S = 30.0
CERTIFICATE_LIFETIME_S = 6 * 24 * 3600
PEBBLE_ENV = {"PEBBLE_VA_NOSLEEP": "1", "PEBBLE_WFE_NONCEREJECT": "0", "PEBBLE_AUTHZREUSE": "0"}


def pebble_installed() -> bool:
    return Path(PEBBLE).is_file() and Path(CHALLTESTSRV).is_file()


@dataclass(frozen=True)
class Pebble:
    directory_url: str
    ca_bundle: Path  # trust for pebble's own HTTPS (the ACME API and the management API)
    http_port: int  # where pebble sends its HTTP-01 validations, on 127.0.0.1
    management_url: str
    log_file: Path

    def fetch(self, path: str) -> bytes:
        """GET a page of pebble's management API (e.g. `/roots/0`, `/intermediates/0`)."""
        context = ssl.create_default_context(cafile=str(self.ca_bundle))
        with urllib.request.urlopen(self.management_url + path, context=context, timeout=10) as answer:
            body: bytes = answer.read()
        return body

    def root(self) -> x509.Certificate:
        """The root the certificates pebble issues chain to (a new one each time pebble starts)."""
        return x509.load_pem_x509_certificate(self.fetch("/roots/0"))

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def free_tcp_and_udp_port(besides: Collection[int] = ()) -> int:
    """A port free for both TCP and UDP (the DNS server takes both), none of `besides`."""
    for _ in range(50):
        port = _free_udp_port()
        if port in besides:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no port free for both TCP and UDP")


def write_tls_files(folder: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a certificate it signs for 127.0.0.1/localhost: (ca, cert, key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fleetdeck test pebble TLS CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "tls-ca.pem", folder / "tls-cert.pem", folder / "tls-key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    paths[2].write_bytes(key_pem)
    return paths


def wait_for(ready: Callable[[], object], what: str, process: subprocess.Popen[bytes], log_file: Path) -> None:
    """Poll `ready` until it stops raising OSError; fail with the log when the process dies or it never does."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with {process.returncode}:\n{log_file.read_text()}")
        try:
            ready()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not ready in {STARTUP_TIMEOUT_S} s:\n{log_file.read_text()}") from None
            time.sleep(0.05)


def https_get(url: str, ca_bundle: Path) -> None:
    context = ssl.create_default_context(cafile=str(ca_bundle))
    urllib.request.urlopen(url, context=context, timeout=2).close()


def tcp_connect(port: int) -> None:
    socket.create_connection(("127.0.0.1", port), timeout=2).close()


@contextmanager
def running(argv: list[str], log_file: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A child process, logging to `log_file`, terminated (then killed) and reaped on exit."""
    with log_file.open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def run_pebble(folder: Path, http_port: int | None = None) -> Iterator[Pebble]:
    """Start challtestsrv and pebble on free loopback ports under `folder` (HTTP-01 validations go
    to 127.0.0.1:`http_port`, a free port by default); stop both on exit."""
    ca_bundle, cert, key = write_tls_files(folder)
    acme_port, management_port, tls_port, dns_management_port, any_http_port = free_ports(5)
    http_port = http_port or any_http_port
    dns_port = free_tcp_and_udp_port(besides=(acme_port, management_port, tls_port, dns_management_port, http_port))
    config = {
        "pebble": {
            "listenAddress": f"127.0.0.1:{acme_port}",
            "managementListenAddress": f"127.0.0.1:{management_port}",
            "certificate": str(cert),
            "privateKey": str(key),
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": False,
            # Short-lived, like the certificates CAs move to: renewal at two thirds of the lifetime.
            "certificateValidityPeriod": CERTIFICATE_LIFETIME_S,
        }
    }
    config_file = folder / "pebble-config.json"
    config_file.write_text(json.dumps(config))
    dns_argv = [
        CHALLTESTSRV,
        "-defaultIPv4", "127.0.0.1",
        "-defaultIPv6", "",
        "-dns01", f"127.0.0.1:{dns_port}",
        "-management", f"127.0.0.1:{dns_management_port}",
        "-http01", "",
        "-https01", "",
        "-tlsalpn01", "",
    ]  # fmt: skip
    pebble_argv = [PEBBLE, "-config", str(config_file), "-dnsserver", f"127.0.0.1:{dns_port}"]
    env = {"PATH": "/usr/bin:/bin", **PEBBLE_ENV}
    with ExitStack() as stack:
        dns_log = folder / "challtestsrv.log"
        dns = stack.enter_context(running(dns_argv, dns_log, env))
        wait_for(partial(tcp_connect, dns_port), "challtestsrv's DNS", dns, dns_log)
        log_file = folder / "pebble.log"
        pebble = stack.enter_context(running(pebble_argv, log_file, env))
        directory_url = f"https://127.0.0.1:{acme_port}/dir"
        wait_for(partial(https_get, directory_url, ca_bundle), directory_url, pebble, log_file)
        yield Pebble(directory_url, ca_bundle, http_port, f"https://127.0.0.1:{management_port}", log_file)
