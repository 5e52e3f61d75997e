"""``user.*`` through the API against the real root agent: real accounts (``useradd``), their
password and lock (``passwd -S``, the shadow file), their authorized_keys and a sudo drop-in in
the session's own sudoers folder (checked with ``visudo -c -f``; sudo itself only reads
/etc/sudoers, which the tests leave alone). Every account made here is removed (``userdel -r``)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from agent.jobs.toolkit.output import EXIT_MISSING, EXIT_REFUSED, JobError
from agent.jobs.user import (
    fingerprint,
    install_checked,
    key_of_line,
    measure_keys,
    parse_keygen_list,
    parse_lastlog,
    parse_passwd_status,
    weak_reason,
)
from tests.helpers import wait_until
from tests.helpers.hosting import Hosting
from tests.helpers.sshd import Sshd, running_sshd

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("visudo") is None,
    reason="needs root, useradd and visudo",
)


def _tool(*argv: str, stdin: str | None = None) -> str:
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, check=True).stdout


def _remove_user(name: str) -> None:
    if subprocess.run(["id", name], capture_output=True).returncode == 0:
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)


@pytest.fixture(scope="module")
def sudoers_dir(hosting: Hosting) -> Path:
    folder = hosting.folder / "users" / "sudoers.d"
    folder.mkdir(parents=True, exist_ok=True)
    hosting.configure("system", {**hosting.layout.get("system", {}), "sudoers_dir": str(folder)})
    return folder


@pytest.fixture(scope="module")
def sshd(hosting: Hosting) -> Iterator[Sshd]:
    yield from running_sshd(hosting)


@pytest.fixture
def username(sudoers_dir: Path) -> Iterator[str]:
    name = f"fdu{uuid.uuid4().hex[:8]}"
    yield name
    _remove_user(name)


@pytest.fixture
def created(hosting: Hosting, username: str) -> str:
    hosting.run("user.create", username=username).ok()
    return username


def _keypair(folder: Path, kind: str = "ed25519", bits: int | None = None, comment: str = "jo@laptop") -> str:
    path = folder / f"key-{uuid.uuid4().hex[:6]}"
    _tool(
        "ssh-keygen", "-q", "-t", kind, *(["-b", str(bits)] if bits else []), "-N", "", "-C", comment, "-f", str(path)
    )
    return Path(f"{path}.pub").read_text().strip()


def _shadow_hash(name: str) -> str:
    for line in Path("/etc/shadow").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == name:
            return fields[1]
    raise AssertionError(f"{name} is not in /etc/shadow")


# --- through the API -----------------------------------------------------------------------


def test_create_makes_a_login_user_with_a_password_and_sudo(hosting: Hosting, username: str, sudoers_dir: Path) -> None:
    run = hosting.run("user.create", username=username, shell="sh", sudo=True, password="correct-horse-9").ok()
    assert "correct-horse-9" not in run.text and "correct-horse-9" not in str(run.job.get("argv"))
    account = pwd.getpwnam(username)
    assert account.pw_uid >= 1000 and account.pw_shell == "/bin/sh" and os.path.isdir(account.pw_dir)
    assert _tool("passwd", "-S", username).split()[1] == "P"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

    stored = _shadow_hash(username)
    assert crypt.crypt("correct-horse-9", stored) == stored
    dropin = sudoers_dir / f"fleetdeck-{username}"
    assert dropin.read_text().splitlines()[-1] == f"{username} ALL=(ALL:ALL) ALL"
    assert stat.S_IMODE(dropin.stat().st_mode) == 0o440
    subprocess.run(["visudo", "-c", "-q", "-f", str(dropin)], check=True)

    again = hosting.run("user.create", username=username).ok()
    assert "exists already" in again.text

    listed = hosting.run("user.list").ok().result["users"]
    mine = next(u for u in listed if u["username"] == username)
    assert mine["password"] == "set" and mine["sudo"] is True and mine["site"] is None
    assert all(u["uid"] != 0 for u in listed)


def test_delete_removes_the_account_its_home_and_its_sudo(hosting: Hosting, created: str, sudoers_dir: Path) -> None:
    hosting.run("user.sudo-set", username=created, state="on").ok()
    home = pwd.getpwnam(created).pw_dir
    hosting.run("user.delete", username=created).ok()
    with pytest.raises(KeyError):
        pwd.getpwnam(created)
    assert not os.path.exists(home)
    assert not (sudoers_dir / f"fleetdeck-{created}").exists()
    assert "nothing to delete" in hosting.run("user.delete", username=created).ok().text


def test_delete_stops_the_users_processes_and_removes_its_home_through_descriptors(
    hosting: Hosting, created: str
) -> None:
    """Before, userdel refused a user with a process still running (the job failed, the user could
    keep itself), and --remove walked the home by path as root."""
    account = pwd.getpwnam(created)
    outside = Path(tempfile.mkdtemp(prefix="fleetdeck-outside-"))
    try:
        (outside / "kept").write_text("root's")
        os.symlink(outside, Path(account.pw_dir) / "link-out")  # removed as a link, never followed
        setpriv = ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--clear-groups"]
        sleeper = subprocess.Popen([*setpriv, "sleep", "600"])
        try:
            hosting.run("user.delete", username=created).ok()
            assert sleeper.wait(timeout=10) == -9  # stopped by the delete
        finally:
            sleeper.kill()
        with pytest.raises(KeyError):
            pwd.getpwnam(created)
        assert not os.path.lexists(account.pw_dir)
        assert (outside / "kept").read_text() == "root's"
    finally:
        shutil.rmtree(outside)


def test_lock_and_unlock(hosting: Hosting, created: str) -> None:
    hosting.run("user.password-set", username=created, password="another-pass-42").ok()
    hosting.run("user.lock", username=created).ok()
    assert _tool("passwd", "-S", created).split()[1] == "L"
    assert "Jan 02, 1970" in _tool("chage", "-l", created)  # expired: key logins end too
    inspected = hosting.run("user.inspect", username=created).ok().result
    assert inspected["locked"] is True and inspected["password"] == "locked"
    assert inspected["last_login"] is None and inspected["groups"] == [created]

    hosting.run("user.unlock", username=created).ok()
    assert _tool("passwd", "-S", created).split()[1] == "P"
    assert "Account expires\t\t\t\t\t\t: never" in _tool("chage", "-l", created)
    assert hosting.run("user.inspect", username=created).ok().result["locked"] is False


def test_a_key_login_works_until_the_user_is_locked(hosting: Hosting, created: str, sshd: Sshd, tmp_path: Path) -> None:
    key = _keypair(tmp_path)
    identity = str(tmp_path / next(p.stem for p in tmp_path.glob("key-*.pub")))
    hosting.run("user.ssh-key-add", username=created, key=key).ok()
    wait_until(lambda: sshd.login(created, identity).stdout.strip() == created)  # a real SSH login
    hosting.run("user.lock", username=created).ok()
    refused = sshd.login(created, identity)
    assert refused.returncode != 0 and "expired" in refused.stderr
    hosting.run("user.unlock", username=created).ok()
    assert sshd.login(created, identity).stdout.strip() == created


def test_unlocking_a_key_only_user_leaves_it_without_a_password(hosting: Hosting, created: str) -> None:
    hosting.run("user.lock", username=created).ok()
    run = hosting.run("user.unlock", username=created).ok()
    assert "key login only" in run.text
    assert "Account expires\t\t\t\t\t\t: never" in _tool("chage", "-l", created)


def test_password_set_changes_the_hash_without_showing_the_password(hosting: Hosting, created: str) -> None:
    before = _shadow_hash(created)
    run = hosting.run("user.password-set", username=created, password="s3cret-enough").ok()
    assert "s3cret-enough" not in run.text and "s3cret-enough" not in str(run.job)
    after = _shadow_hash(created)
    assert after != before and not after.startswith("!")


def test_ssh_keys_add_list_remove(hosting: Hosting, created: str, tmp_path: Path) -> None:
    key = _keypair(tmp_path)
    print_ = _tool("ssh-keygen", "-l", "-f", "-", stdin=key).split()[1]
    assert "authorised" in hosting.run("user.ssh-key-add", username=created, key=key).ok().text
    account = pwd.getpwnam(created)
    folder = Path(account.pw_dir) / ".ssh"
    authorized = folder / "authorized_keys"
    assert authorized.read_text().splitlines() == [key]
    assert stat.S_IMODE(authorized.stat().st_mode) == 0o600 and stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert (authorized.stat().st_uid, folder.stat().st_uid) == (account.pw_uid, account.pw_uid)

    assert "already authorised" in hosting.run("user.ssh-key-add", username=created, key=key).ok().text
    assert authorized.read_text().splitlines() == [key]

    keys = hosting.run("user.ssh-key-list", username=created).ok().result["keys"]
    assert [(k["fingerprint"], k["type"], k["bits"], k["flags"]) for k in keys] == [(print_, "ssh-ed25519", 256, [])]

    hosting.run("user.ssh-key-remove", username=created, fingerprint=print_).ok()
    assert authorized.read_text() == ""
    assert "nothing changed" in hosting.run("user.ssh-key-remove", username=created, fingerprint=print_).ok().text


def test_key_audit_flags_weak_and_unknown_keys(hosting: Hosting, created: str, tmp_path: Path) -> None:
    good = _keypair(tmp_path)
    weak = _keypair(tmp_path, "rsa", 1024, "old@box")
    refused = hosting.run("user.ssh-key-add", username=created, key=weak)
    assert refused.exit_code == EXIT_REFUSED and "1024 bits" in refused.text
    hosting.run("user.ssh-key-add", username=created, key=good).ok()
    authorized = Path(pwd.getpwnam(created).pw_dir) / ".ssh" / "authorized_keys"
    with authorized.open("a") as f:  # someone else's doing, outside the agent
        f.write(f'from="10.0.0.0/8" {weak}\n')

    audit = hosting.run("user.key-audit", username=created).ok().result
    flags = {k["comment"]: (k["bits"], k["flags"]) for k in audit["keys"]}
    assert flags == {"jo@laptop": (256, []), "old@box": (1024, ["weak", "unknown"])}
    assert (audit["weak"], audit["unknown"], audit["flagged"]) == (1, 1, 1)
    everyone = hosting.run("user.key-audit").ok().result["keys"]
    assert {k["comment"] for k in everyone if k["username"] == created} == {"jo@laptop", "old@box"}


def test_sudo_on_and_off(hosting: Hosting, created: str, sudoers_dir: Path) -> None:
    dropin = sudoers_dir / f"fleetdeck-{created}"
    assert "granted" in hosting.run("user.sudo-set", username=created, state="on").ok().text
    subprocess.run(["visudo", "-c", "-q", "-f", str(dropin)], check=True)
    assert "already" in hosting.run("user.sudo-set", username=created, state="on").ok().text
    assert hosting.run("user.inspect", username=created).ok().result["sudo"] is True
    hosting.run("user.sudo-set", username=created, state="off").ok()
    assert not dropin.exists()
    assert [p.name for p in sudoers_dir.iterdir() if created in p.name] == []  # no candidate left


def test_a_sites_user_keeps_to_its_site(hosting: Hosting, sudoers_dir: Path, tmp_path: Path) -> None:
    """A site's user (made by site.create as site.create does: --system, marked by its comment)
    is listed and its keys are managed, but it is not deleted or given sudo here."""
    name = f"fds{uuid.uuid4().hex[:8]}"
    home = hosting.folder / "users" / name
    subprocess.run(
        ["useradd", "--system", "--user-group", "--create-home", "--home-dir", str(home),
         "--shell", "/usr/sbin/nologin", "--comment", "fleetdeck site shop.example", name],
        check=True,
    )  # fmt: skip
    try:
        listed = {u["username"]: u for u in hosting.run("user.list").ok().result["users"]}
        assert listed[name]["site"] == "shop.example" and listed[name]["uid"] < 1000
        hosting.run("user.ssh-key-add", username=name, key=_keypair(tmp_path)).ok()
        assert len((home / ".ssh" / "authorized_keys").read_text().splitlines()) == 1
        for kind, args in (("user.delete", {}), ("user.sudo-set", {"state": "on"})):
            run = hosting.run(kind, username=name, **args)
            assert run.exit_code == 1 and "user of site shop.example" in run.text
        assert pwd.getpwnam(name).pw_dir == str(home)
    finally:
        _remove_user(name)


@pytest.mark.skipif(shutil.which("zsh") is not None, reason="zsh is installed here")
def test_a_missing_shell_names_its_package(hosting: Hosting, username: str) -> None:
    run = hosting.run("user.create", username=username, shell="zsh")
    assert run.exit_code == EXIT_MISSING and "Debian package zsh" in run.text
    with pytest.raises(KeyError):
        pwd.getpwnam(username)


def test_system_accounts_and_unknown_users_are_refused(hosting: Hosting, sudoers_dir: Path) -> None:
    name = f"fds{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--system", "--no-create-home", name], check=True)
    try:
        run = hosting.run("user.lock", username=name)
        assert run.exit_code == 1 and "system account" in run.text
        assert _tool("passwd", "-S", name).split()[1] != "P"
        assert "Account expires\t\t\t\t\t\t: never" in _tool("chage", "-l", name)
    finally:
        _remove_user(name)
    missing = hosting.run("user.inspect", username="fdnobody-here")
    assert missing.exit_code == 1 and "no user fdnobody-here" in missing.text


# --- the validation that keeps the previous state and the parsers --------------------------


def test_a_sudo_rule_visudo_refuses_leaves_the_previous_one(tmp_path: Path) -> None:
    target = tmp_path / "fleetdeck-jo"
    target.write_text("jo ALL=(ALL:ALL) ALL\n")

    async def install() -> None:
        await install_checked(str(target), "jo ALL=(ALL:ALL ALL\n", ["visudo", "-c", "-q", "-f"])

    with pytest.raises(JobError) as refused:
        trio.run(install)
    assert refused.value.exit_code == EXIT_REFUSED
    assert target.read_text() == "jo ALL=(ALL:ALL) ALL\n"
    assert [p.name for p in tmp_path.iterdir()] == ["fleetdeck-jo"]


def test_parse_lastlog() -> None:
    header = "Username         Port     From                                       Latest\n"
    assert (
        parse_lastlog(
            header + "deploy                                                              **Never logged in**\n"
        )
        is None
    )
    seen = "deploy           pts/0    203.0.113.9                                Mon Nov 23 20:01:02 +0000 2026\n"
    assert parse_lastlog(header + seen) == "Mon Nov 23 20:01:02 +0000 2026"
    assert parse_lastlog("") is None


def test_parse_passwd_status() -> None:
    assert parse_passwd_status("deploy P 2026-11-23 0 99999 7 -1\n") == {
        "name": "deploy",
        "password": "set",
        "changed": "2026-11-23",
    }
    assert parse_passwd_status("deploy L 2026-11-23 0 99999 7 -1")["password"] == "locked"
    assert parse_passwd_status("deploy NP 2026-11-23 0 99999 7 -1")["password"] == "none"
    with pytest.raises(ValueError):
        parse_passwd_status("passwd: user 'x' does not exist")


def test_parse_keygen_list_and_the_fingerprint_agree_with_ssh_keygen(tmp_path: Path) -> None:
    listed = (
        "1024 SHA256:I2cBlMpnOifnVLeccmgqUIpVw5h5JKrpdQUYv7e6y/8 weak@x (RSA)\n"
        "256 SHA256:PhcyQFHu7AvDY9VoAV/QXrF9IwSjj4fEdMYhlh4VaKM no comment (ED25519)\n"
    )
    assert parse_keygen_list(listed) == {
        "SHA256:I2cBlMpnOifnVLeccmgqUIpVw5h5JKrpdQUYv7e6y/8": {"bits": 1024, "type": "RSA"},
        "SHA256:PhcyQFHu7AvDY9VoAV/QXrF9IwSjj4fEdMYhlh4VaKM": {"bits": 256, "type": "ED25519"},
    }
    key = _keypair(tmp_path, "ecdsa", 384, "a@b")
    parsed = key_of_line(f'command="true",no-pty {key}')
    assert parsed is not None and parsed["type"] == "ecdsa-sha2-nistp384" and parsed["comment"] == "a@b"
    assert parsed["fingerprint"] == _tool("ssh-keygen", "-l", "-f", "-", stdin=key).split()[1]
    assert key_of_line("# a comment") is None and key_of_line("ssh-rsa not!base64") is None
    assert fingerprint("%%%") is None
    assert weak_reason("ssh-dss", 1024) is not None and weak_reason("ssh-rsa", 2048) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the agent's identity that must not parse keys)")
def test_keys_a_user_wrote_are_parsed_by_an_account_without_privileges(monkeypatch: pytest.MonkeyPatch) -> None:
    """ssh-keygen parsed authorized_keys (which a login user writes) as root; it runs as nobody now.
    A stand-in for ssh-keygen prints the identity it ran with in a key's line."""
    folder = Path(tempfile.mkdtemp(prefix="fleetdeck-keygen-"))  # outside pytest's 0700 folder: nobody runs it
    try:
        folder.chmod(0o755)
        stand_in = folder / "ssh-keygen"
        stand_in.write_text('#!/bin/sh\nprintf "256 SHA256:%043d x (%s)\\n" "$(id -u)" "$(id -G | tr " " -)"\n')
        stand_in.chmod(0o755)
        monkeypatch.setattr("agent.jobs.user.require", lambda *_args, **_kw: str(stand_in))
        measured = trio.run(measure_keys, "ssh-ed25519 AAAA x\n")
    finally:
        shutil.rmtree(folder)
    nobody = pwd.getpwnam("nobody")
    assert measured == {f"SHA256:{nobody.pw_uid:043d}": {"bits": 256, "type": str(nobody.pw_gid)}}
