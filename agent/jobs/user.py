"""``user list|inspect|create|delete|lock|unlock|password-set|ssh-key-*|sudo-set|key-audit``.

Which accounts: the login users (uid from ``UID_MIN`` to ``UID_MAX`` of ``/etc/login.defs``, 1000
to 60000 by default) and the sites' own users (``site.create`` makes them with ``useradd --system``,
so below 1000, and marks them with the comment ``fleetdeck site <domain>``). Root and every other
system account are refused. A site's user belongs to its site: it is not created, deleted or given
sudo here (``site.create``/``site.delete`` own it; its PHP runs as it), but its keys, password and
lock are managed like a login user's.

Tools: ``useradd``, ``userdel``, ``usermod``, ``passwd -S|-l|-u``, ``chpasswd`` (the password on
its stdin), ``ssh-keygen -l`` (keys checked and measured), ``visudo -c -f`` (a sudo drop-in is
checked as a candidate, then renamed into place). Locking locks the password (``passwd -l``) and
expires the account (``usermod --expiredate 1``), so key logins stop too.

The keys the agent added are recorded in ``<state_dir>/ssh-keys.json`` (user -> fingerprints):
``key-audit`` flags a key as ``unknown`` when it is not there, ``weak`` for DSA and RSA below
2048 bits.
"""

from __future__ import annotations

import base64
import binascii
import errno
import fcntl
import grp
import hashlib
import os
import pwd
import re
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson
import trio

from agent.files.fdops import CancelToken
from agent.jobs.toolkit.base import JobContext, handler
from agent.jobs.toolkit.boundary import as_user, in_thread, remove_root_folder, stop_user_processes
from agent.jobs.toolkit.common import Account, account_by_name
from agent.jobs.toolkit.needs import Tool
from agent.jobs.toolkit.output import EXIT_REFUSED, JobError, Output
from agent.jobs.toolkit.proc import capture_command, require, which
from agent.sites import write_atomically
from agent.state import open_lock_file
from contract.job_kinds.base import NoArgs, UserArgs
from contract.job_kinds.user import KeyAudit, PasswordSet, SshKeyAdd, SshKeyRemove, SudoSet, UserCreate, UserDelete

SITE_COMMENT = "fleetdeck site "  # the comment site.create gives its users
KEYS_FILE = "ssh-keys.json"
SHELLS = {"bash": "/bin/bash", "sh": "/bin/sh", "zsh": "/bin/zsh", "nologin": "/usr/sbin/nologin"}
MIN_RSA_BITS = 2048
PARSER_ACCOUNT = "nobody"  # who ssh-keygen reads untrusted keys as, when the agent is root
KEY_LINE = re.compile(
    r"(?:^|\s)(?P<type>ssh-ed25519|ssh-rsa|ssh-dss|ecdsa-sha2-nistp(?:256|384|521)|sk-ssh-ed25519@openssh\.com"
    r"|sk-ecdsa-sha2-nistp256@openssh\.com)\s+(?P<blob>[A-Za-z0-9+/]+={0,3})(?:\s+(?P<comment>.*))?$"
)
KEYGEN_LINE = re.compile(
    r"^(?P<bits>\d+) (?P<fingerprint>SHA256:[A-Za-z0-9+/]{43}) (?P<comment>.*?) ?\((?P<type>[A-Z0-9-]+)\)$"
)


# --- which accounts ------------------------------------------------------------------------


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: str
    shell: str
    site: str | None  # the site's domain, for a site's user


def uid_range(login_defs: str = "/etc/login.defs") -> tuple[int, int]:
    """(UID_MIN, UID_MAX) of login.defs: the range of login users' uids."""
    values = {"UID_MIN": 1000, "UID_MAX": 60000}
    try:
        with open(login_defs, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0] in values and parts[1].isdigit():
                    values[parts[0]] = int(parts[1])
    except OSError:
        pass
    return values["UID_MIN"], values["UID_MAX"]


def _user(pw: pwd.struct_passwd) -> User | None:
    """`pw` as a managed user, or None for root and the other system accounts."""
    low, high = uid_range()
    site = pw.pw_gecos[len(SITE_COMMENT) :].split(",")[0] if pw.pw_gecos.startswith(SITE_COMMENT) else None
    if pw.pw_uid == 0 or (site is None and not low <= pw.pw_uid <= high):
        return None
    return User(pw.pw_name, pw.pw_uid, pw.pw_gid, pw.pw_dir, pw.pw_shell, site)


def find_user(name: str) -> User | None:
    """The managed user `name`; None when there is no such account; JobError for a system account."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return None
    user = _user(pw)
    if user is None:
        raise JobError(
            f"{name} is a system account (uid {pw.pw_uid}): only login users and the sites' users are managed here"
        )
    return user


def existing_user(name: str) -> User:
    user = find_user(name)
    if user is None:
        raise JobError(f"no user {name} on this server")
    return user


def login_user(name: str, action: str) -> User:
    user = existing_user(name)
    if user.site is not None:
        raise JobError(f"{name} is the user of site {user.site}: it cannot {action} here (the site's jobs own it)")
    return user


def _require_root(ctx: JobContext) -> None:
    if not ctx.is_root:
        raise JobError("the agent does not run as root: it cannot change system users")


# --- passwd -S and the shadow file ---------------------------------------------------------

PASSWORD_STATUS = {"P": "set", "L": "locked", "NP": "none"}


def parse_passwd_status(text: str) -> dict[str, Any]:
    """``passwd -S NAME``: ``name L|NP|P date min max warn inactive``."""
    parts = text.split()
    if len(parts) < 2 or parts[1] not in PASSWORD_STATUS:
        raise ValueError(f"unexpected passwd -S output: {text.strip()!r}")
    return {"name": parts[0], "password": PASSWORD_STATUS[parts[1]], "changed": parts[2] if len(parts) > 2 else None}


async def password_status(name: str) -> str:
    code, text, err = await capture_command([require("passwd", "read the password status"), "-S", name])
    if code != 0:
        raise JobError(f"passwd -S {name} failed (exit {code}): {' '.join(err.split())}")
    status: str = parse_passwd_status(text)["password"]
    return status


def account_expired(name: str, shadow: str = "/etc/shadow") -> bool:
    """The account's expiry day (field 8 of the shadow file) has come: `lock` sets it to day 1."""
    try:
        with open(shadow, encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.rstrip("\n").split(":")
                if fields[0] == name and len(fields) > 7 and fields[7].isdigit():
                    return int(fields[7]) <= time.time() // 86400
    except OSError:
        pass
    return False


def parse_lastlog(text: str) -> str | None:
    """``lastlog -u NAME``: the Latest column of its one line (None: never logged in)."""
    lines = text.splitlines()
    if len(lines) < 2 or "Latest" not in lines[0] or "Never logged in" in lines[1]:
        return None
    latest = lines[1][lines[0].index("Latest") :].strip()
    return latest or None


async def last_login(name: str) -> str | None:
    lastlog = which("lastlog")
    if lastlog is None:
        return None
    code, text, _ = await capture_command([lastlog, "-u", name])
    return parse_lastlog(text) if code == 0 else None


# --- authorized_keys -----------------------------------------------------------------------


def fingerprint(blob_base64: str) -> str | None:
    """The OpenSSH SHA256 fingerprint of a key's base64 blob (None when it is not base64)."""
    try:
        blob = base64.b64decode(blob_base64, validate=True)
    except (binascii.Error, ValueError):
        return None
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def key_of_line(line: str) -> dict[str, Any] | None:
    """An authorized_keys line's key (type, fingerprint, comment), or None for comments and junk."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None
    match = KEY_LINE.search(stripped)
    if match is None:
        return None
    print_ = fingerprint(match["blob"])
    if print_ is None:
        return None
    return {"type": match["type"], "fingerprint": print_, "comment": (match["comment"] or "").strip() or None}


def parse_keygen_list(text: str) -> dict[str, dict[str, Any]]:
    """``ssh-keygen -l -f FILE``: fingerprint -> {bits, type (RSA, ED25519, ...)}."""
    found: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        match = KEYGEN_LINE.match(line.strip())
        if match:
            found[match["fingerprint"]] = {"bits": int(match["bits"]), "type": match["type"]}
    return found


def weak_reason(key_type: str, bits: int | None) -> str | None:
    if key_type in ("ssh-dss", "DSA"):
        return "DSA keys are broken (OpenSSH no longer accepts them)"
    if key_type in ("ssh-rsa", "RSA") and bits is not None and bits < MIN_RSA_BITS:
        return f"RSA key of {bits} bits (fewer than {MIN_RSA_BITS})"
    return None


async def measure_keys(text: str) -> dict[str, dict[str, Any]]:
    """The bits and type of every key in `text` (authorized_keys lines), by fingerprint."""
    if not text.strip():
        return {}
    keygen = require("ssh-keygen", "read SSH keys")
    # The keys are text a login user (or the caller) wrote: parsed with no privilege at all.
    parser = account_by_name(PARSER_ACCOUNT)
    unprivileged = as_user(parser) if parser is not None else {}
    code, listed, _ = await capture_command([keygen, "-l", "-f", "-"], stdin=text.encode(), **unprivileged)
    return parse_keygen_list(listed) if code == 0 else {}


@contextmanager
def _ssh_dir(user: User, create: bool) -> Iterator[int | None]:
    """The user's ``~/.ssh`` opened without following links (made 0700, owned by the user, when
    `create`); None when it does not exist. Every file below is reached relative to it."""
    try:
        home = os.open(user.home, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise JobError(f"the home of {user.name} ({user.home}) is missing") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise JobError(
                f"the home of {user.name} ({user.home}) is not a folder (a link?): it is left alone"
            ) from None
        raise
    try:
        if create:
            try:
                os.mkdir(".ssh", 0o700, dir_fd=home)
                os.chown(".ssh", user.uid, user.gid, dir_fd=home, follow_symlinks=False)
            except FileExistsError:
                pass
        try:
            folder = os.open(".ssh", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=home)
        except FileNotFoundError:
            yield None
            return
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise JobError(f"{user.home}/.ssh is not a folder (a link?): it is left alone") from None
            raise
        try:
            yield folder
        finally:
            os.close(folder)
    finally:
        os.close(home)


def read_authorized_keys(user: User) -> str:
    """The user's authorized_keys ("" when there is none). Its folder and the user may be hostile
    (a site's user writes its own home): a link, a FIFO (O_NONBLOCK: the open never waits for a
    writer) or a hard link to another user's file (``/etc/shadow`` where the kernel does not
    protect hard links) is refused, never read."""
    with _ssh_dir(user, create=False) as folder:
        if folder is None:
            return ""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            fd = os.open("authorized_keys", flags, dir_fd=folder)
        except FileNotFoundError:
            return ""
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise JobError(f"{user.home}/.ssh/authorized_keys is a link: it is left alone") from None
            if exc.errno in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):  # a socket, a device
                raise JobError(f"{user.home}/.ssh/authorized_keys is not a regular file: it is left alone") from None
            raise
        with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise JobError(f"{user.home}/.ssh/authorized_keys is not a regular file: it is left alone")
            if st.st_nlink > 1 and st.st_uid != user.uid:
                raise JobError(
                    f"{user.home}/.ssh/authorized_keys has other hard links and is not {user.name}'s own file:"
                    " it is left alone"
                )
            return f.read()


def write_authorized_keys(user: User, text: str) -> None:
    """Replace the user's authorized_keys: a 0600 file of the user's, renamed into place."""
    with _ssh_dir(user, create=True) as folder:
        assert folder is not None
        temporary = f".authorized_keys.{secrets.token_hex(6)}.tmp"
        fd = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder
        )
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fchown(f.fileno(), user.uid, user.gid)
                os.fchmod(f.fileno(), 0o600)
                os.fsync(f.fileno())
            os.rename(temporary, "authorized_keys", src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            try:
                os.unlink(temporary, dir_fd=folder)
            except FileNotFoundError:
                pass
            raise


async def list_keys(user: User, added: set[str]) -> list[dict[str, Any]]:
    """Every key of the user's authorized_keys with its bits, weakness and whether we added it."""
    text = await trio.to_thread.run_sync(read_authorized_keys, user)
    measured = await measure_keys(text)
    keys = []
    for number, line in enumerate(text.splitlines(), start=1):
        key = key_of_line(line)
        if key is None:
            continue
        bits = measured.get(key["fingerprint"], {}).get("bits")
        weak = weak_reason(key["type"], bits)
        known = key["fingerprint"] in added
        flags = [flag for flag, on in (("weak", weak is not None), ("unknown", not known)) if on]
        keys.append({**key, "line": number, "bits": bits, "weak": weak, "added_here": known, "flags": flags})
    return keys


# --- the record of keys added here ---------------------------------------------------------


class KeyRecord:
    """``ssh-keys.json``: user -> the fingerprints this agent added (blocking: use a thread)."""

    def __init__(self, state_dir: str) -> None:
        self.path = os.path.join(state_dir, KEYS_FILE)

    def read(self) -> dict[str, list[str]]:
        try:
            with open(self.path, "rb") as f:
                document = orjson.loads(f.read())
        except (FileNotFoundError, orjson.JSONDecodeError):
            return {}
        return (
            {k: [str(x) for x in v] for k, v in document.items() if isinstance(v, list)}
            if isinstance(document, dict)
            else {}
        )

    def added(self, user: str) -> set[str]:
        return set(self.read().get(user, []))

    def change(self, user: str, add: str | None = None, remove: str | None = None, forget: bool = False) -> None:
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        with open_lock_file(self.path + ".lock") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            document = self.read()
            prints = [p for p in document.get(user, []) if p != remove]
            if add is not None and add not in prints:
                prints.append(add)
            if forget or not prints:
                document.pop(user, None)
            else:
                document[user] = prints
            write_atomically(self.path, orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n", 0o600)


# --- sudo ----------------------------------------------------------------------------------


def sudo_dropin(ctx: JobContext, name: str) -> str:
    # No dot in the name: sudo's @includedir skips files whose name holds one (our candidates do).
    return os.path.join(ctx.host.system.sudoers_dir, f"fleetdeck-{name}")


async def install_checked(path: str, content: str, check: list[str], mode: int = 0o440) -> None:
    """Write `content` as a candidate beside `path`, run `check` + [candidate]; rename it into
    place when the check passes, else remove it and raise JobError(EXIT_REFUSED): `path` keeps
    its previous content."""
    folder, base = os.path.split(path)
    candidate = os.path.join(folder, f".{base}.{secrets.token_hex(6)}.candidate")
    await trio.to_thread.run_sync(write_atomically, candidate, content.encode(), mode)
    try:
        code, text, err = await capture_command([*check, candidate])
        if code != 0:
            said = " ".join((err or text).replace(candidate, path).split())
            raise JobError(f"{check[0]} refused the new {path} (exit {code}): {said}; nothing changed", EXIT_REFUSED)
        await trio.to_thread.run_sync(os.replace, candidate, path)
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_remove, candidate)


def _remove(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


async def set_sudo(ctx: JobContext, name: str, on: bool) -> bool:
    """Grant or revoke sudo through the user's drop-in; whether anything changed."""
    path = sudo_dropin(ctx, name)
    if not on:
        return bool(await trio.to_thread.run_sync(_remove, path))
    content = f"# made by the fleetdeck agent (user.sudo-set)\n{name} ALL=(ALL:ALL) ALL\n"
    if await trio.to_thread.run_sync(_read_or_none, path) == content:
        return False
    visudo = require("visudo", "check the sudo rule")
    await trio.to_thread.run_sync(lambda: os.makedirs(os.path.dirname(path), mode=0o750, exist_ok=True))
    await install_checked(path, content, [visudo, "-c", "-q", "-f"])
    return True


def _read_or_none(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return None


# --- handlers ------------------------------------------------------------------------------


async def _describe(ctx: JobContext, user: User, detailed: bool = False) -> dict[str, Any]:
    status = await password_status(user.name) if ctx.is_root else None
    described: dict[str, Any] = {
        "username": user.name,
        "uid": user.uid,
        "home": user.home,
        "shell": user.shell,
        "site": user.site,
        "password": status,
        "locked": await trio.to_thread.run_sync(account_expired, user.name),
        "sudo": await trio.to_thread.run_sync(os.path.exists, sudo_dropin(ctx, user.name)),
    }
    if detailed:
        described["groups"] = await trio.to_thread.run_sync(groups_of, user)
        added = await trio.to_thread.run_sync(KeyRecord(ctx.state_dir).added, user.name)
        described["keys"] = await list_keys(user, added)
        described["last_login"] = await last_login(user.name)
    return described


def groups_of(user: User) -> list[str]:
    """The user's primary group first, then the others it is a member of."""
    every = grp.getgrall()
    primary = next((g.gr_name for g in every if g.gr_gid == user.gid), str(user.gid))
    return [primary, *sorted(g.gr_name for g in every if user.name in g.gr_mem and g.gr_name != primary)]


def _all_users() -> list[User]:
    users = (_user(pw) for pw in pwd.getpwall())
    return sorted((u for u in users if u is not None), key=lambda u: u.uid)


async def _list(args: NoArgs, ctx: JobContext, out: Output) -> int:
    users = [await _describe(ctx, user) for user in await trio.to_thread.run_sync(_all_users)]
    out.result({"users": users}, as_json=ctx.as_json)
    return 0


async def _inspect(args: UserArgs, ctx: JobContext, out: Output) -> int:
    user = existing_user(args.username)
    out.result(await _describe(ctx, user, detailed=True), as_json=ctx.as_json)
    return 0


async def _chpasswd(name: str, password: str) -> None:
    chpasswd = require("chpasswd", "set the password")
    code, _, err = await capture_command([chpasswd], stdin=f"{name}:{password}\n".encode())
    if code != 0:
        raise JobError(f"chpasswd failed for {name} (exit {code}): {' '.join(err.split())}")


async def _run_tool(argv: list[str]) -> None:
    code, text, err = await capture_command(argv)
    if code != 0:
        raise JobError(f"{' '.join(argv)} failed (exit {code}): {' '.join((err or text).split())}")


async def _create(args: UserCreate, ctx: JobContext, out: Output) -> int:
    _require_root(ctx)
    if find_user(args.username) is not None:
        user = login_user(args.username, "be created")
        message = f"user {args.username} exists already: nothing changed"
        out.result({"user": await _describe(ctx, user), "created": False, "message": message}, as_json=ctx.as_json)
        return 0
    shell = SHELLS[args.shell]
    if not await trio.to_thread.run_sync(os.path.exists, shell):
        require(args.shell, f"be the login shell of {args.username}")
    useradd = require("useradd", "create the user")
    await _run_tool(
        [useradd, "--create-home", "--user-group", "--shell", shell, "--comment", "fleetdeck user", args.username]
    )
    if args.password is not None:
        await _chpasswd(args.username, args.password.get_secret_value())
    if args.sudo:
        await set_sudo(ctx, args.username, True)
    message = f"user {args.username} created" + (" with sudo" if args.sudo else "")
    described = await _describe(ctx, existing_user(args.username))
    out.result({"user": described, "created": True, "message": message}, as_json=ctx.as_json)
    return 0


async def _delete(args: UserDelete, ctx: JobContext, out: Output) -> int:
    _require_root(ctx)
    if find_user(args.username) is None:
        message = f"no user {args.username} on this server: nothing to delete"
        out.result({"username": args.username, "deleted": False, "message": message}, as_json=ctx.as_json)
        return 0
    user = login_user(args.username, "be deleted")
    await _lock_account(args.username)  # no new login, cron run or su while it goes
    crontab = which("crontab")
    if crontab is not None:  # userdel leaves the user's crontab behind
        await capture_command([crontab, "-u", args.username, "-r"])
    await stop_user_processes(Account(user.name, user.uid, user.gid, user.home))
    if not args.keep_home:
        await in_thread(lambda token: _remove_home(user, token))
    await _run_tool([require("userdel", "delete the user"), args.username])
    await set_sudo(ctx, args.username, False)
    await trio.to_thread.run_sync(lambda: KeyRecord(ctx.state_dir).change(args.username, forget=True))
    message = f"user {args.username} deleted" + (f" ({user.home} kept)" if args.keep_home else "")
    out.result({"username": args.username, "deleted": True, "message": message}, as_json=ctx.as_json)
    return 0


async def _lock_account(name: str) -> None:
    """Lock the password and expire the account: no login of any kind (keys too), no cron run."""
    await _run_tool([require("passwd", "lock the password"), "-l", name])
    await _run_tool([require("usermod", "expire the account"), "--expiredate", "1", name])


def _remove_home(user: User, token: CancelToken) -> None:
    """The user's home and all it holds, through descriptors beneath its parent (userdel
    --remove walks it by path, as root, where another account the user let write in it could
    exchange a folder for a link meanwhile). Only beneath a parent of root's that nobody else
    may change (``/home``); another home is kept, and said so."""
    parent, name = os.path.split(os.path.normpath(user.home))
    st = os.stat(parent)
    if not name or st.st_uid != 0 or st.st_mode & 0o022:
        raise JobError(
            f"the home {user.home} is not in a folder of root's alone: the account is locked, nothing else"
            " changed (delete it with keep_home, or move its home first)"
        )
    remove_root_folder(parent, name, token)


async def _lock(args: UserArgs, ctx: JobContext, out: Output) -> int:
    _require_root(ctx)
    existing_user(args.username)
    await _lock_account(args.username)
    out.stdout(f"user {args.username} locked (password locked, account expired: key logins refused too)")
    return 0


async def _unlock(args: UserArgs, ctx: JobContext, out: Output) -> int:
    _require_root(ctx)
    existing_user(args.username)
    await _run_tool([require("usermod", "end the account's expiry"), "--expiredate", "", args.username])
    if await password_status(args.username) == "locked":
        code, _, err = await capture_command([require("passwd", "unlock the password"), "-u", args.username])
        if code != 0 and "passwordless" in err:
            out.stdout(f"user {args.username} unlocked (it has no password: key login only)")
            return 0
        if code != 0:
            raise JobError(f"passwd -u {args.username} failed (exit {code}): {' '.join(err.split())}")
    out.stdout(f"user {args.username} unlocked")
    return 0


async def _password_set(args: PasswordSet, ctx: JobContext, out: Output) -> int:
    _require_root(ctx)
    existing_user(args.username)
    await _chpasswd(args.username, args.password.get_secret_value())
    out.stdout(f"password of {args.username} set")
    return 0


async def _key_list(args: UserArgs, ctx: JobContext, out: Output) -> int:
    user = existing_user(args.username)
    added = await trio.to_thread.run_sync(KeyRecord(ctx.state_dir).added, user.name)
    out.result({"username": user.name, "keys": await list_keys(user, added)}, as_json=ctx.as_json)
    return 0


async def _key_add(args: SshKeyAdd, ctx: JobContext, out: Output) -> int:
    _require_root(ctx)
    user = existing_user(args.username)
    key = key_of_line(args.key)
    measured = await measure_keys(args.key + "\n")
    if key is None or key["fingerprint"] not in measured:
        raise JobError("ssh-keygen does not read this as a public key: nothing changed", EXIT_REFUSED)
    weak = weak_reason(key["type"], measured[key["fingerprint"]]["bits"])
    if weak is not None:
        raise JobError(f"refused: {weak}; nothing changed", EXIT_REFUSED)
    record = KeyRecord(ctx.state_dir)
    text = await trio.to_thread.run_sync(read_authorized_keys, user)
    present = any(
        (k := key_of_line(line)) is not None and k["fingerprint"] == key["fingerprint"] for line in text.splitlines()
    )
    if present:
        message = f"key {key['fingerprint']} is already authorised for {user.name}: nothing changed"
    else:
        text = (text if not text or text.endswith("\n") else text + "\n") + args.key.strip() + "\n"
        await trio.to_thread.run_sync(write_authorized_keys, user, text)
        message = f"key {key['fingerprint']} authorised for {user.name}"
    await trio.to_thread.run_sync(lambda: record.change(user.name, add=key["fingerprint"]))
    described = {**key, "bits": measured[key["fingerprint"]]["bits"]}
    out.result({"username": user.name, "key": described, "added": not present, "message": message}, as_json=ctx.as_json)
    return 0


async def _key_remove(args: SshKeyRemove, ctx: JobContext, out: Output) -> int:
    _require_root(ctx)
    user = existing_user(args.username)
    text = await trio.to_thread.run_sync(read_authorized_keys, user)
    lines = text.splitlines()
    kept = [line for line in lines if (k := key_of_line(line)) is None or k["fingerprint"] != args.fingerprint]
    removed = len(kept) < len(lines)
    if removed:
        await trio.to_thread.run_sync(write_authorized_keys, user, "".join(line + "\n" for line in kept))
        message = f"key {args.fingerprint} removed from {user.name}"
    else:
        message = f"no key {args.fingerprint} in the authorised keys of {user.name}: nothing changed"
    await trio.to_thread.run_sync(lambda: KeyRecord(ctx.state_dir).change(user.name, remove=args.fingerprint))
    result = {"username": user.name, "fingerprint": args.fingerprint, "removed": removed, "message": message}
    out.result(result, as_json=ctx.as_json)
    return 0


async def _sudo_set(args: SudoSet, ctx: JobContext, out: Output) -> int:
    _require_root(ctx)
    login_user(args.username, "be given sudo")
    changed = await set_sudo(ctx, args.username, args.state == "on")
    what = "granted to" if args.state == "on" else "taken from"
    out.stdout(
        f"sudo {what} {args.username}" if changed else f"sudo was already {what} {args.username}: nothing changed"
    )
    return 0


async def _key_audit(args: KeyAudit, ctx: JobContext, out: Output) -> int:
    users = [existing_user(args.username)] if args.username else await trio.to_thread.run_sync(_all_users)
    record = await trio.to_thread.run_sync(KeyRecord(ctx.state_dir).read)
    audited, unread = [], []
    for user in users:
        try:
            keys = await list_keys(user, set(record.get(user.name, [])))
        except JobError as exc:
            if args.username:
                raise
            unread.append({"username": user.name, "error": str(exc)})  # one broken home hides no other key
            continue
        audited += [{"username": user.name, **key} for key in keys]
    flagged = [key for key in audited if key["flags"]]
    out.result(
        {
            "keys": audited,
            "unread": unread,
            "weak": sum("weak" in k["flags"] for k in audited),
            "unknown": sum("unknown" in k["flags"] for k in audited),
            "flagged": len(flagged),
        },
        as_json=ctx.as_json,
    )
    return 0


KINDS = [
    handler("user.list", _list),
    handler("user.inspect", _inspect),
    handler("user.create", _create, needs=(Tool("useradd"),)),
    handler("user.delete", _delete, needs=(Tool("userdel"),)),
    handler("user.lock", _lock),
    handler("user.unlock", _unlock),
    handler("user.password-set", _password_set, needs=(Tool("chpasswd"),)),
    handler("user.ssh-key-list", _key_list),
    handler("user.ssh-key-add", _key_add),
    handler("user.ssh-key-remove", _key_remove),
    handler("user.sudo-set", _sudo_set, needs=(Tool("visudo"),)),
    handler("user.key-audit", _key_audit),
]
