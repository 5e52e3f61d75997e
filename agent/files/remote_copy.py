"""Cross-server copy and move: the selection goes from this server's agent straight to another's
over SSH, never through the control plane.

The control plane drives one transfer with four calls (its id is 32 hex digits):

1. ``fs.xfer.prepare`` on the source: the selection is checked through the jail and an ephemeral
   ed25519 key pair is made (``ssh-keygen``) in ``<state>/transfers/out-<id>/`` (0700); the
   answer is the public key and the selection's names.
2. ``fs.xfer.accept`` on the destination: the destination is resolved through the jail and
   checked (a taken name is ``conflict`` unless `overwrite`), a one-transfer spec is written to
   ``<state>/transfers/in-<id>.json`` (0600), and the public key is added to the SSH account's
   ``authorized_keys`` as ``restrict,from="<source ip>",expiry-time="...",command="<python> -m
   agent receive <id> ..."``: no pty, no forwarding, only from the source, only for a few
   minutes, only the receive command whatever the client asks. The answer says where to connect
   (host, port, user) and the server's public host keys, which the source pins.
3. ``fs.xfer.push`` on the source: a tar of the selection (links as links, nothing followed,
   links that would lead out of it skipped) goes through ``ssh`` to the receive command, then a
   trailer with the SHA-256 of the tar, so a cut stream is never taken for a whole one. The
   receive command (`receive_main`) first claims the spec (a rename: one use only) and removes
   the key line, then spools the stream into a temporary folder beside the destination, unpacks
   it there with the rules of ``fs.extract`` (`archives.extract_tar`) and renames the result into
   place: a failure leaves nothing. It prints its answer as one line. For a move the source
   removes its copy only after that answer said success.
4. ``fs.xfer.close`` on both, whatever happened (also after a failure, cancel or timeout): the key
   line and the spec go on the destination, the private key on the source (the push removes it
   already when it ends). Leftovers of a transfer nobody closed (the control plane went away) are
   swept by the next transfer once they expire, and sshd refuses an expired key by itself.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import pwd
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

import trio

import agent as agent_package
from agent.files import archives, inflight
from agent.files.entries import join
from agent.files.fdops import (
    CancelToken,
    OperationCancelled,
    chown_fd,
    fsync_dir,
    listdir,
    lstat_at,
    mkdir_temp,
    never,
    open_dir_at,
    put,
    release,
    remove_entry,
)
from agent.files.handlers import FileHandlers
from agent.files.jail import Jail, normalize, split_path, storage_refusal
from agent.link.call import Call, Handler
from agent.sites import SiteRegistry
from contract.link.params import TRANSFER_ID_RE, FsXfer, FsXferAccept, FsXferPrepare, FsXferPush, params_of
from contract.link.protocol import RpcError

log = logging.getLogger("fleetdeck.agent")

TRANSFERS = "transfers"
KEY_TTL_S = 600  # the key must be used (the connection made) within this; the copy may take longer
_MARK = "fleetdeck-xfer"
RESULT_PREFIX = "FLEETDECK-XFER-RESULT "
TRAILER_TAG = b"\nfleetdeck-xfer-end "
TRAILER_LEN = len(TRAILER_TAG) + 64 + 1
CHUNK = 1024 * 1024
MAX_STREAM_BYTES = archives.MAX_EXTRACT_BYTES + 64 * 1024**2  # tar headers on top of the data
_ANSWER_LIMIT = 1024 * 1024
_O_PATH_DIR = os.O_PATH | os.O_DIRECTORY


@dataclass(frozen=True)
class SshSettings:
    """How other servers' agents reach this one over SSH (the destination side of a transfer)."""

    port: int = 22
    host: str | None = None  # the address to connect to; None: the server's address in the control plane
    user: str | None = None  # the account; None: the one the agent runs as
    authorized_keys: str | None = None  # None: that account's ~/.ssh/authorized_keys
    host_keys: tuple[str, ...] = ()  # public host key files; () : /etc/ssh/ssh_host_*_key.pub
    ssh: str = "ssh"
    ssh_keygen: str = "ssh-keygen"

    def account(self) -> pwd.struct_passwd:
        if self.user is None:
            return pwd.getpwuid(os.geteuid())
        try:
            return pwd.getpwnam(self.user)
        except KeyError:
            raise RpcError("validation_error", f"no account {self.user!r} on the destination server") from None

    def keys_file(self) -> str:
        return self.authorized_keys or os.path.join(self.account().pw_dir, ".ssh", "authorized_keys")

    def public_host_keys(self) -> list[str]:
        files = list(self.host_keys) or sorted(
            os.path.join("/etc/ssh", n)
            for n in _listdir_quietly("/etc/ssh")
            if n.startswith("ssh_host_") and n.endswith("_key.pub")
        )
        keys: list[str] = []
        for path in files:
            try:
                with open(path) as handle:
                    fields = handle.read().split()
            except OSError:
                continue
            if len(fields) >= 2:
                keys.append(f"{fields[0]} {fields[1]}")
        return keys


def _listdir_quietly(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


# --- the state folder ------------------------------------------------------------------------


def transfers_dir(state_dir: str) -> str:
    path = os.path.join(state_dir, TRANSFERS)
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _spec_path(state_dir: str, tid: str, suffix: str = "json") -> str:
    return os.path.join(transfers_dir(state_dir), f"in-{tid}.{suffix}")


def _key_dir(state_dir: str, tid: str) -> str:
    return os.path.join(transfers_dir(state_dir), f"out-{tid}")


def _write_private_json(path: str, data: dict[str, Any]) -> None:
    temp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# --- authorized_keys -------------------------------------------------------------------------


def _edit_keys(path: str, change: Callable[[bytes], bytes], owner: tuple[int, int] | None) -> bool:
    """Rewrite `path` as `change` says, under an flock of its folder, atomically (a temporary
    file renamed over it, with the old file's mode and owner). Returns whether it existed."""
    path = os.path.realpath(path)
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        os.makedirs(folder, mode=0o700)
        if owner is not None:
            os.chown(folder, *owner)
    lock = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path, "rb") as handle:
                before: bytes | None = handle.read()
                st: os.stat_result | None = os.fstat(handle.fileno())
        except FileNotFoundError:
            before, st = None, None
        after = change(before or b"")
        if after == (before or b""):
            return before is not None
        fd, temp = tempfile.mkstemp(prefix=".authorized_keys.", dir=folder)
        try:
            os.write(fd, after)
            if st is not None:
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
                if os.geteuid() == 0:
                    os.fchown(fd, st.st_uid, st.st_gid)
            else:
                os.fchmod(fd, 0o600)
                if owner is not None and os.geteuid() == 0:
                    os.fchown(fd, *owner)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.replace(temp, path)
        except BaseException:
            _unlink(temp)
            raise
        return before is not None
    finally:
        os.close(lock)


def install_key(path: str, line: bytes, owner: tuple[int, int] | None) -> tuple[bytes, bool]:
    """Append `line`; returns (the exact bytes added, whether the file existed)."""
    added: list[bytes] = []

    def change(content: bytes) -> bytes:
        insert = (b"\n" if content and not content.endswith(b"\n") else b"") + line + b"\n"
        added.append(insert)
        return content + insert

    existed = _edit_keys(path, change, owner)
    return added[0], existed


def remove_key(path: str, inserted: bytes | None, marker: bytes, *, remove_if_empty: bool) -> None:
    """Take out what `install_key` added (else any line holding `marker`); a file the transfer
    created and that is empty again is removed."""
    if not os.path.lexists(path):
        return

    def change(content: bytes) -> bytes:
        if inserted and inserted in content:
            return content.replace(inserted, b"", 1)
        return b"".join(line for line in content.splitlines(keepends=True) if marker not in line)

    _edit_keys(path, change, None)
    if remove_if_empty:
        try:
            if os.path.getsize(path) == 0:
                os.unlink(path)
        except OSError:
            pass


def _expired_lines_remover(now: float) -> Callable[[bytes], bytes]:
    """Drop key lines of transfers (of any agent sharing the file) whose expiry passed."""
    pattern = re.compile(rb" " + _MARK.encode() + rb":[0-9a-f]{32}:(\d+)\s*$")

    def change(content: bytes) -> bytes:
        kept = []
        for line in content.splitlines(keepends=True):
            found = pattern.search(line)
            if found is None or int(found.group(1)) > now:
                kept.append(line)
        return b"".join(kept)

    return change


# --- the agent side --------------------------------------------------------------------------


class RemoteCopy:
    """The ``fs.xfer.*`` handlers (see the module docstring)."""

    def __init__(self, files: FileHandlers, state_dir: str, ssh: SshSettings) -> None:
        self.files = files
        self.state_dir = state_dir
        self.ssh = ssh

    def handlers(self) -> dict[str, Handler]:
        return {
            "fs.xfer.prepare": self.prepare,
            "fs.xfer.accept": self.accept,
            "fs.xfer.push": self.push,
            "fs.xfer.close": self.close,
        }

    # --- source --------------------------------------------------------------------------

    async def prepare(self, call: Call) -> dict[str, Any]:
        params = call.params
        prepare = params_of(FsXferPrepare, params)
        tid, paths = prepare.transfer_id, prepare.paths

        def check(jail: Jail) -> list[str]:
            names = []
            for path in paths:
                parts = split_path(path)
                if not parts:
                    raise RpcError("validation_error", "the scope root itself cannot be copied to another server")
                dir_fd, name = jail.open_parent(path)
                try:
                    if lstat_at(dir_fd, name) is None:
                        raise RpcError("not_found", "no such file or directory", {"path": normalize(path)})
                finally:
                    os.close(dir_fd)
                if name in names:
                    raise RpcError("validation_error", "two items have the same name", {"name": name})
                names.append(name)
            return names

        names = await self.files._in_scope(params, check, read_only=True)  # the push says if it moves
        await trio.to_thread.run_sync(self._sweep)
        key_dir = _key_dir(self.state_dir, tid)
        await trio.to_thread.run_sync(os.mkdir, key_dir, 0o700)
        try:
            await trio.run_process(
                [self.ssh.ssh_keygen, "-q", "-t", "ed25519", "-N", "", "-C", f"{_MARK}-{tid}", "-f", f"{key_dir}/key"],
                stdin=subprocess.DEVNULL,
                capture_stdout=True,
                capture_stderr=True,
            )
            public = await trio.Path(key_dir, "key.pub").read_text()
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(shutil.rmtree, key_dir, True)
            raise
        return {"public_key": public.strip(), "names": names}

    async def push(self, call: Call) -> dict[str, Any]:
        params = call.params
        push = params_of(FsXferPush, params)
        key_dir = _key_dir(self.state_dir, push.transfer_id)
        command = await trio.to_thread.run_sync(
            self._ssh_command, key_dir, push.host, push.port, push.user, push.host_keys
        )

        def work(jail: Jail, token: CancelToken) -> dict[str, Any]:
            return _push(jail, push.paths, command, token, remove_sources=push.remove_sources)

        try:
            return await self.files._cancellable(params, work, read_only=not push.remove_sources)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(shutil.rmtree, key_dir, True)

    def _ssh_command(self, key_dir: str, host: str, port: int, user: str, host_keys: list[str]) -> list[str]:
        if not os.path.isfile(os.path.join(key_dir, "key")):
            raise RpcError("not_found", "no such transfer here (not prepared, or already used)")
        known = os.path.join(key_dir, "known_hosts")
        where = host if port == 22 else f"[{host}]:{port}"
        with open(known, "w") as handle:
            handle.writelines(f"{where} {key}\n" for key in host_keys)
        return [
            self.ssh.ssh,
            "-F",
            "/dev/null",
            "-T",
            "-a",
            "-x",
            "-i",
            os.path.join(key_dir, "key"),
            "-p",
            str(port),
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "IdentityAgent=none",
            "-o",
            "PasswordAuthentication=no",
            "-o",
            f"StrictHostKeyChecking={'yes' if host_keys else 'accept-new'}",
            "-o",
            f"UserKnownHostsFile={known}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "ConnectTimeout=20",
            "-o",
            "ServerAliveInterval=15",
            "-o",
            "LogLevel=ERROR",
            "-l",
            user,
            "--",
            host,
        ]

    # --- destination ---------------------------------------------------------------------

    async def accept(self, call: Call) -> dict[str, Any]:
        params = call.params
        accept = params_of(FsXferAccept, params)
        tid, destination, overwrite, names = accept.transfer_id, accept.destination, accept.overwrite, accept.names
        if not all(len(split_path(name)) == 1 for name in names):
            raise RpcError("validation_error", "names must be a list of plain names")
        key_type, key = accept.public_key.split(" ")[:2]
        scope = {"scope": accept.scope, "domain": accept.domain}
        await self.files._in_scope(params, lambda jail: check_destination(jail, destination, names, overwrite))
        return await trio.to_thread.run_sync(
            self._install, tid, scope, destination, overwrite, names, key_type, key, accept.source_ip
        )

    def _install(
        self,
        tid: str,
        scope: dict[str, Any],
        destination: str,
        overwrite: bool,
        names: list[str],
        key_type: str,
        key_blob: str,
        source_ip: str,
    ) -> dict[str, Any]:
        self._sweep()
        account = self.ssh.account()
        keys_file = self.ssh.keys_file()
        expires = int(time.time()) + KEY_TTL_S
        spec = {
            "id": tid,
            "home": self.files.home,
            "state_dir": os.path.abspath(self.state_dir),
            **scope,
            "destination": destination,
            "overwrite": overwrite,
            "names": names,
            "expires_at": expires,
            "authorized_keys": keys_file,
        }
        spec_path = _spec_path(self.state_dir, tid)
        if os.path.lexists(spec_path) or os.path.lexists(_spec_path(self.state_dir, tid, "claimed")):
            raise RpcError("conflict", "this transfer was accepted already")
        _write_private_json(spec_path, spec)
        try:
            line = authorized_key_line(tid, expires, key_type, key_blob, source_ip, self.state_dir)
            inserted, existed = install_key(keys_file, line, (account.pw_uid, account.pw_gid))
            spec.update(inserted=inserted.decode(), created_keys_file=not existed)
            _write_private_json(spec_path, spec)
        except BaseException:
            _cleanup_spec(spec)
            raise
        return {
            "host": self.ssh.host,
            "port": self.ssh.port,
            "user": account.pw_name,
            "host_keys": self.ssh.public_host_keys(),
        }

    # --- both ----------------------------------------------------------------------------

    async def close(self, call: Call) -> dict[str, Any]:
        tid = params_of(FsXfer, call.params).transfer_id
        return await trio.to_thread.run_sync(self._close, tid)

    def _close(self, tid: str) -> dict[str, Any]:
        shutil.rmtree(_key_dir(self.state_dir, tid), ignore_errors=True)
        for suffix in ("json", "claimed"):
            spec = _read_spec(_spec_path(self.state_dir, tid, suffix))
            if spec is not None:
                _cleanup_spec(spec)
        # A spec gone with its key line still there (a crash in between): by its marker.
        remove_key(self.ssh.keys_file(), None, f" {_MARK}:{tid}:".encode(), remove_if_empty=False)
        self._sweep()
        return {"closed": tid}

    def _sweep(self) -> None:
        """Remove what transfers nobody closed left behind, once expired."""
        now = time.time()
        folder = transfers_dir(self.state_dir)
        for name in _listdir_quietly(folder):
            path = os.path.join(folder, name)
            if name.startswith("in-"):
                spec = _read_spec(path)
                if spec is None or spec.get("expires_at", 0) + KEY_TTL_S < now:
                    _cleanup_spec(spec or {}, path)
            elif name.startswith("out-"):
                try:
                    if os.lstat(path).st_mtime + 2 * KEY_TTL_S < now:
                        shutil.rmtree(path, ignore_errors=True)
                except OSError:
                    pass
        keys_file = self.ssh.keys_file()
        if os.path.exists(keys_file):
            _edit_keys(keys_file, _expired_lines_remover(now), None)


def _read_spec(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _cleanup_spec(spec: dict[str, Any], path: str | None = None) -> None:
    """Remove a transfer's key line (if still there) and its spec files."""
    tid = spec.get("id")
    keys_file = spec.get("authorized_keys")
    if isinstance(tid, str) and TRANSFER_ID_RE.fullmatch(tid) and isinstance(keys_file, str):
        inserted = spec.get("inserted")
        remove_key(
            keys_file,
            inserted.encode() if isinstance(inserted, str) else None,
            f" {_MARK}:{tid}:".encode(),
            remove_if_empty=bool(spec.get("created_keys_file")),
        )
        state_dir = spec.get("state_dir")
        if isinstance(state_dir, str):
            for suffix in ("json", "claimed"):
                _unlink(os.path.join(state_dir, TRANSFERS, f"in-{tid}.{suffix}"))
    if path is not None:
        _unlink(path)


def receive_command(tid: str, state_dir: str) -> str:
    """The forced command of a transfer's key: this very agent code, whatever the client asks."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(agent_package.__file__)))
    words = [sys.executable, "-m", "agent", "receive", tid, "--state-dir", os.path.abspath(state_dir)]
    for word in (root, *words):
        if any(c in word for c in '"\\\n\r') or not word.isprintable():
            raise RpcError("validation_error", "the agent's paths cannot be put in an authorized_keys command")
    return f"cd / && PYTHONPATH={shlex.quote(root)} exec {' '.join(shlex.quote(w) for w in words)}"


def authorized_key_line(tid: str, expires: int, key_type: str, key_blob: str, source_ip: str, state_dir: str) -> bytes:
    until = time.strftime("%Y%m%d%H%M%S", time.gmtime(expires)) + "Z"
    options = f'restrict,from="{source_ip}",expiry-time="{until}",command="{receive_command(tid, state_dir)}"'
    return f"{options} {key_type} {key_blob} {_MARK}:{tid}:{expires}".encode()


def check_destination(jail: Jail, destination: str, names: list[str], overwrite: bool) -> dict[str, Any]:
    """Where the names will go: into the folder `destination`, or (one name) as `destination`
    itself. ``conflict`` for a taken name unless `overwrite`; ``not_found`` for a missing parent."""
    dest_rel = normalize(destination)
    try:
        into = jail.open(destination, _O_PATH_DIR, follow_last=True)
    except RpcError as exc:
        if exc.code != "not_found":
            raise
        into = None
    if into is not None:
        try:
            for name in names:
                if lstat_at(into, name) is not None and not overwrite:
                    raise RpcError("conflict", "the name is already taken", {"path": join(dest_rel, name)})
        finally:
            os.close(into)
        return {"into": True}
    if len(names) != 1:
        raise RpcError("not_found", "the destination folder does not exist", {"path": dest_rel})
    dir_fd, name = jail.open_parent(destination)
    try:
        if lstat_at(dir_fd, name) is not None and not overwrite:
            raise RpcError("conflict", "the name is already taken", {"path": dest_rel})
    finally:
        os.close(dir_fd)
    return {"into": False}


# --- sending ---------------------------------------------------------------------------------


class _HashingPipe:
    """The ssh process's stdin for tarfile: counts the tar's SHA-256, checks the cancel token."""

    def __init__(self, pipe: IO[bytes], token: CancelToken) -> None:
        self.pipe, self.token = pipe, token
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.token.check()
        self.pipe.write(data)
        self.digest.update(data)
        return len(data)

    def trailer(self) -> bytes:
        return TRAILER_TAG + self.digest.hexdigest().encode() + b"\n"


def _push(
    jail: Jail, paths: list[str], command: list[str], token: CancelToken, *, remove_sources: bool
) -> dict[str, Any]:
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, start_new_session=True
        )
        try:
            assert process.stdin is not None
            pipe = _HashingPipe(process.stdin, token)
            skipped: list[str] = []
            try:
                skipped = archives.stream_tar(jail, paths, pipe, token=token)  # type: ignore[arg-type]
                process.stdin.write(pipe.trailer())
                process.stdin.flush()  # `_wait` closes it (communicate)
            except BrokenPipeError:
                pass  # the other side ended early: its answer says why
            answer = _wait(process, token)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stdin is not None and not process.stdin.closed:
                try:
                    process.stdin.close()
                except BrokenPipeError:
                    pass
        errors.seek(0)
        problem = errors.read()[-2000:].decode(errors="replace").strip()
    result = _parse_answer(answer, process.returncode, problem)
    placed = result.get("placed", [])
    left: list[str] = []
    if remove_sources:
        # Only now: the destination said every item is in place.
        for path in paths:
            dir_fd, name = jail.open_parent(path)
            try:
                remove_entry(dir_fd, name, never())
                fsync_dir(dir_fd)
            except (OSError, RpcError):
                left.append(normalize(path))
            finally:
                os.close(dir_fd)
        return {"moved": placed, "skipped": skipped, "left_at_source": left}
    return {"copied": placed, "skipped": skipped}


def _wait(process: subprocess.Popen[bytes], token: CancelToken) -> bytes:
    """The receive command's output once ssh ends; a cancel kills ssh."""
    out = b""
    while True:
        if token.cancelled:
            process.kill()
            raise OperationCancelled()
        try:
            data, _ = process.communicate(timeout=0.25)
        except subprocess.TimeoutExpired:
            continue
        out = data or b""
        return out[-_ANSWER_LIMIT:]


def _parse_answer(output: bytes, returncode: int | None, problem: str) -> dict[str, Any]:
    answer: dict[str, Any] | None = None
    for line in output.decode(errors="replace").splitlines():
        if line.startswith(RESULT_PREFIX):
            try:
                answer = json.loads(line[len(RESULT_PREFIX) :])
            except ValueError:
                answer = None
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        error = answer["error"]
        raise RpcError(str(error.get("code", "internal")), str(error.get("message", "")), error.get("details") or {})
    if returncode != 0 or not isinstance(answer, dict) or not isinstance(answer.get("ok"), dict):
        raise RpcError(
            "transfer_failed",
            f"the transfer to the other server failed (ssh exit {returncode}): {problem or 'no answer'}",
            {"ssh_exit": returncode},
        )
    result: dict[str, Any] = answer["ok"]
    return result


# --- receiving (`python -m agent receive <id>`, the forced command) --------------------------


def receive_main(argv: list[str]) -> int:
    """Run by sshd for a transfer's key: stdin is the stream, stdout gets one answer line."""
    import argparse

    parser = argparse.ArgumentParser(prog="fleetdeck agent receive")
    parser.add_argument("transfer_id")
    parser.add_argument("--state-dir", required=True)
    args = parser.parse_args(argv)
    try:
        result = receive(args.transfer_id, args.state_dir, sys.stdin.buffer)
        answer: dict[str, Any] = {"ok": result}
        code = 0
    except RpcError as exc:
        answer, code = {"error": exc.to_wire()}, 1
    except Exception as exc:
        log.exception("receive failed")
        answer, code = {"error": {"code": "internal", "message": f"receive failed: {exc}", "details": {}}}, 1
    sys.stdout.write(RESULT_PREFIX + json.dumps(answer) + "\n")
    sys.stdout.flush()
    return code


def receive(tid: str, state_dir: str, stream: IO[bytes]) -> dict[str, Any]:
    if not TRANSFER_ID_RE.fullmatch(tid):
        raise RpcError("validation_error", "bad transfer id")
    spec_path = _spec_path(state_dir, tid)
    claimed = _spec_path(state_dir, tid, "claimed")
    try:
        os.rename(spec_path, claimed)  # one use: a second login with the key finds nothing
    except FileNotFoundError:
        raise RpcError("not_found", "no such transfer (unknown, already used or expired)") from None
    try:
        spec = _read_spec(claimed)
        if spec is None:
            raise RpcError("internal", "the transfer's spec is unreadable")
        _cleanup_key_only(spec)
        if spec.get("expires_at", 0) < time.time():
            raise RpcError("conflict", "the transfer expired before it started")
        _journal(spec["state_dir"], spec["home"])
        files = FileHandlers(spec["home"], SiteRegistry(spec["state_dir"]))
        with files.open_scope({"scope": spec.get("scope"), "domain": spec.get("domain")}) as jail:
            try:
                placed = _receive_into(jail, spec, stream)
            except OSError as exc:  # a full disk is named (its temporary folder is gone already)
                named = storage_refusal(exc, normalize(spec["destination"]))
                if named is None:
                    raise
                log.warning("receive %s: %s", tid, named.message)
                raise named from None
        return {"placed": placed}
    finally:
        _unlink(claimed)


def _journal(state_dir: str, home: str) -> None:
    """Journal this receive's temporary folder as the agent does its own (`agent.files.inflight`),
    so the agent removes it if this process dies; an account that cannot write the agent's state
    folder receives without (its folder is still removed on any failure it lives through)."""
    try:
        inflight.activate(inflight.Journal(state_dir, home))
    except OSError as exc:
        log.warning("receive: no journal of temporary names (%s)", exc.strerror)


def _cleanup_key_only(spec: dict[str, Any]) -> None:
    inserted = spec.get("inserted")
    remove_key(
        str(spec["authorized_keys"]),
        inserted.encode() if isinstance(inserted, str) else None,
        f" {_MARK}:{spec['id']}:".encode(),
        remove_if_empty=bool(spec.get("created_keys_file")),
    )


def _receive_into(jail: Jail, spec: dict[str, Any], stream: IO[bytes]) -> list[str]:
    destination: str = spec["destination"]
    names: list[str] = spec["names"]
    overwrite = bool(spec.get("overwrite"))
    dest_rel = normalize(destination)
    into = check_destination(jail, destination, names, overwrite)["into"]
    if into:
        base, final = jail.open(destination, _O_PATH_DIR, follow_last=True), None
    else:
        base, final = jail.open_parent(destination)
    token = never()
    try:
        temp = mkdir_temp(base, final or names[0])
        try:
            temp_fd = open_dir_at(base, temp)
            try:
                chown_fd(temp_fd, jail.owner)
                size = _spool(temp_fd, stream)
                os.mkdir("x", 0o700, dir_fd=temp_fd)
                archive = os.open("spool", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=temp_fd)
                try:
                    root = os.path.join(jail.root, dest_rel, temp, "x")
                    with Jail.at(temp_fd, "x", root, use_openat2=jail.uses_openat2) as inner:
                        inner.owner = jail.owner
                        archives.extract_tar(inner, archive, size, token=token)
                        return _place(inner.fileno(), base, final, names, dest_rel, overwrite)
                finally:
                    os.close(archive)
            finally:
                os.close(temp_fd)
        finally:
            remove_entry(base, temp, never())
            release(temp)
    finally:
        os.close(base)


def _spool(temp_fd: int, stream: IO[bytes]) -> int:
    """Copy the stream into ``spool`` without its trailer; refuse a stream cut short."""
    fd = os.open("spool", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=temp_fd)
    digest = hashlib.sha256()
    tail = b""
    total = 0
    try:
        while chunk := stream.read(CHUNK):
            data = tail + chunk
            if len(data) <= TRAILER_LEN:
                tail = data
                continue
            body, tail = data[:-TRAILER_LEN], data[-TRAILER_LEN:]
            total += len(body)
            if total > MAX_STREAM_BYTES:
                raise RpcError("too_large", "the transfer is over the limit", {"limit": archives.MAX_EXTRACT_BYTES})
            digest.update(body)
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    if tail != TRAILER_TAG + digest.hexdigest().encode() + b"\n":
        raise RpcError("validation_error", "the transfer ended before all of its bytes arrived")
    return total


def _place(x_fd: int, base: int, final: str | None, names: list[str], dest_rel: str, overwrite: bool) -> list[str]:
    arrived = listdir(x_fd)
    if not set(arrived) <= set(names):
        raise RpcError("validation_error", "the transfer holds items that were not announced")
    if final is None:
        taken = [n for n in arrived if lstat_at(base, n) is not None]
        if taken and not overwrite:
            raise RpcError("conflict", "the name is already taken", {"path": join(dest_rel, taken[0])})
    placed = []
    for name in arrived:
        target = final or name
        put(x_fd, name, base, target, overwrite=overwrite)
        placed.append(dest_rel if final else join(dest_rel, name))
    fsync_dir(base)
    return placed
