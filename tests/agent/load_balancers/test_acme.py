"""Load-balancer certificates (`agent/load_balancers/acme.py`) from a real ACME CA: pebble on loopback.

Each validation is a real HTTP-01 request from pebble to the responder on `pebble.http_port`."""

from __future__ import annotations

import datetime
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from cryptography.x509.verification import PolicyBuilder, Store

from agent.load_balancers.acme import (
    AcmeError,
    AcmeSettings,
    CertFiles,
    Http01Challenges,
    Http01Responder,
    current_certificate,
    ensure_certificate,
    needs_renewal,
    renew_due,
)
from fleetdeck.launcher import free_port
from tests.helpers.pebble import Pebble, pebble_installed, run_pebble

needs_pebble = pytest.mark.skipif(not pebble_installed(), reason="pebble is not installed (Debian package: pebble)")
UTC = datetime.UTC


@pytest.fixture(scope="module")
def pebble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pebble]:
    if not pebble_installed():
        pytest.skip("pebble is not installed (Debian package: pebble)")
    with run_pebble(tmp_path_factory.mktemp("pebble")) as running:
        yield running


def settings_for(pebble: Pebble, folder: Path) -> AcmeSettings:
    return AcmeSettings(folder / "acme", directory_url=pebble.directory_url, ca_bundle=pebble.ca_bundle)


def verify_chain(files: CertFiles, root: x509.Certificate, hostname: str) -> x509.Certificate:
    """The leaf of `files`, after checking its chain leads to `root` and it names `hostname`."""
    leaf, *intermediates = x509.load_pem_x509_certificates(files.fullchain.read_bytes())
    assert intermediates, "the full chain carries the intermediate"
    verifier = PolicyBuilder().store(Store([root])).build_server_verifier(x509.DNSName(hostname))
    chain = verifier.verify(leaf, intermediates)
    assert chain[-1] == root
    return leaf


def key_matches(files: CertFiles, leaf: x509.Certificate) -> bool:
    key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
    return key.public_key() == leaf.public_key()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@needs_pebble
@pytest.mark.anyio
async def test_certificate_issued_over_http01_verifies_and_is_reused(pebble: Pebble, tmp_path: Path) -> None:
    settings, challenges = settings_for(pebble, tmp_path), Http01Challenges()
    responder = Http01Responder(challenges, port=pebble.http_port)
    async with trio.open_nursery() as nursery:
        await nursery.start(responder.run)
        files = await ensure_certificate(settings, "app.fleetdeck.test", challenges)
        # pebble validates from several perspectives, as Let's Encrypt does: one token, asked more than once
        assert len(set(responder.served)) == 1, "pebble fetched the token from the responder"
        assert challenges.answer(responder.served[0]) is None, "the answer is withdrawn once the order is done"

        leaf = verify_chain(files, await trio.to_thread.run_sync(pebble.root), "app.fleetdeck.test")
        assert key_matches(files, leaf)
        assert files.not_after == leaf.not_valid_after_utc
        assert (
            b"PRIVATE KEY" in files.bundle.read_bytes()
            and leaf.public_bytes(serialization.Encoding.PEM) in files.bundle.read_bytes()
        )
        for private in (files.key, files.bundle, settings.account_dir / "account-key.pem"):
            assert mode(private) == 0o600, private
        for folder in (settings.acme_dir, settings.account_dir, settings.certs_dir, files.key.resolve().parent):
            assert mode(folder) == 0o700, folder

        again = await ensure_certificate(settings, "APP.fleetdeck.test", challenges)
        assert again == files and len(set(responder.served)) == 1, "a valid certificate is reused: no new order"
        assert x509.load_pem_x509_certificate(again.fullchain.read_bytes()).serial_number == leaf.serial_number
        nursery.cancel_scope.cancel()


@needs_pebble
@pytest.mark.anyio
async def test_certificate_due_for_renewal_is_renewed_with_a_new_key(pebble: Pebble, tmp_path: Path) -> None:
    settings, challenges = settings_for(pebble, tmp_path), Http01Challenges()
    account_key = settings.account_dir / "account-key.pem"
    responder = Http01Responder(challenges, port=pebble.http_port)
    async with trio.open_nursery() as nursery:
        await nursery.start(responder.run)
        first = await ensure_certificate(settings, "renew.fleetdeck.test", challenges)
        first_leaf = x509.load_pem_x509_certificate(first.fullchain.read_bytes())
        first_key, first_account = first.key.read_bytes(), account_key.read_bytes()

        not_yet = first.renew_at - datetime.timedelta(seconds=1)
        assert await renew_due(settings, ["renew.fleetdeck.test", "none-yet.fleetdeck.test"], challenges, not_yet) == []
        assert len(set(responder.served)) == 1

        later = first.renew_at + datetime.timedelta(seconds=1)
        [renewal] = await renew_due(settings, ["renew.fleetdeck.test"], challenges, later)
        assert renewal.error is None and renewal.files is not None
        # A CA may reuse the name's recent authorization (Let's Encrypt does, for 30 days; pebble
        # now and then despite PEBBLE_AUTHZREUSE=0): a new validation is not required.
        validated = len(set(responder.served))
        renewed = renewal.files
        assert renewed.fullchain == first.fullchain, "configurations keep naming the same paths"
        leaf = verify_chain(renewed, await trio.to_thread.run_sync(pebble.root), "renew.fleetdeck.test")
        assert leaf.serial_number != first_leaf.serial_number and key_matches(renewed, leaf)
        assert renewed.key.read_bytes() != first_key, "each issuance gets a key of its own"
        assert account_key.read_bytes() == first_account, "the account key is kept"
        assert mode(renewed.key) == 0o600
        before_its_own_renewal = renewed.renew_at - datetime.timedelta(seconds=1)
        assert await ensure_certificate(settings, "renew.fleetdeck.test", challenges, before_its_own_renewal) == renewed
        assert len(set(responder.served)) == validated, "a valid certificate is reused without asking the CA"
        nursery.cancel_scope.cancel()


@needs_pebble
@pytest.mark.anyio
async def test_refused_validation_is_a_clean_error_with_pebbles_words(pebble: Pebble, tmp_path: Path) -> None:
    """Nothing listens on the validation port: pebble's connection fails, and says so."""
    settings, challenges = settings_for(pebble, tmp_path), Http01Challenges()
    with pytest.raises(AcmeError) as refused:
        await ensure_certificate(settings, "refused.fleetdeck.test", challenges)
    text = str(refused.value)
    # pebble's problem detail, e.g. 'Get "http://refused...": dial tcp 127.0.0.1:P: connect: connection refused'
    assert text.startswith("the CA could not validate refused.fleetdeck.test: "), text
    assert f"dial tcp 127.0.0.1:{pebble.http_port}: connect: connection refused" in text, text
    assert text.endswith("(connection)"), text
    assert current_certificate(settings, "refused.fleetdeck.test") is None
    assert not (settings.certs_dir / "refused.fleetdeck.test" / "current").exists()


@pytest.mark.anyio
async def test_unreachable_directory_is_a_clean_error(tmp_path: Path) -> None:
    settings = AcmeSettings(tmp_path / "acme", directory_url=f"https://127.0.0.1:{free_port()}/dir")
    with pytest.raises(AcmeError, match=r"cannot reach the ACME directory https://127\.0\.0\.1:"):
        await ensure_certificate(settings, "app.fleetdeck.test", Http01Challenges())


@pytest.mark.anyio
async def test_unusable_storage_is_a_clean_error(tmp_path: Path) -> None:
    (tmp_path / "acme").write_text("a file where the folder should be")
    settings = AcmeSettings(tmp_path / "acme", directory_url=f"https://127.0.0.1:{free_port()}/dir")
    with pytest.raises(AcmeError, match="cannot keep the certificate under"):
        await ensure_certificate(settings, "app.fleetdeck.test", Http01Challenges())


@pytest.mark.anyio
async def test_unusable_hostname_is_refused_before_any_request(tmp_path: Path) -> None:
    settings = AcmeSettings(tmp_path / "acme", directory_url="https://127.0.0.1:9/dir")
    for bad in ["../etc", "*.fleetdeck.test", "localhost", "a b.test", ""]:
        with pytest.raises(AcmeError, match="not a DNS name"):
            await ensure_certificate(settings, bad, Http01Challenges())
    assert not settings.acme_dir.exists()


@pytest.mark.anyio
async def test_responder_answers_known_tokens_only(tmp_path: Path) -> None:
    challenges = Http01Challenges()
    challenges.add("tok-EN_1", "tok-EN_1.thumbprint")
    responder = Http01Responder(challenges)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(responder.run)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            found = await http.get("/.well-known/acme-challenge/tok-EN_1")
            assert (found.status_code, found.text) == (200, "tok-EN_1.thumbprint")
            for path in ["/.well-known/acme-challenge/other", "/.well-known/acme-challenge/", "/", "/tok-EN_1"]:
                assert (await http.get(path)).status_code == 404, path
            assert (await http.post("/.well-known/acme-challenge/tok-EN_1")).status_code == 404
            challenges.discard("tok-EN_1")
            assert (await http.get("/.well-known/acme-challenge/tok-EN_1")).status_code == 404
        assert list(responder.served) == ["tok-EN_1"]
        nursery.cancel_scope.cancel()


def certificate(lifetime: datetime.timedelta, start: datetime.datetime) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rule.fleetdeck.test")])
    builder = x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
    builder = builder.serial_number(1).not_valid_before(start).not_valid_after(start + lifetime)
    return builder.sign(key, hashes.SHA256())


@pytest.mark.parametrize(
    ("lifetime_days", "due_after_days"),
    [(90, 60), (365, 335), (6, 4), (1, 16 / 24)],
    ids=["90-days", "one-year", "6-days", "1-day"],
)
def test_needs_renewal_from_30_days_before_expiry_or_two_thirds_of_a_short_life(
    lifetime_days: float, due_after_days: float
) -> None:
    start = datetime.datetime(2030, 1, 1, tzinfo=UTC)
    cert = certificate(datetime.timedelta(days=lifetime_days), start)
    due = start + datetime.timedelta(days=due_after_days)
    assert not needs_renewal(cert, start)
    assert not needs_renewal(cert, due - datetime.timedelta(minutes=1))
    assert needs_renewal(cert, due)
    assert needs_renewal(cert, start + datetime.timedelta(days=lifetime_days + 1))
