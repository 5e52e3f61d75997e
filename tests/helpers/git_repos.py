"""Git repositories for the deploy tests: local ones the site's git reads by ``file://`` (`git`,
`commit`, `new_origin`, `push`: the work trees and bare repositories, made as root with a fixed
identity, then given to the site's user where its git must read them), and an https server
(`GitServer`).

`GitServer` is Debian's ``git http-backend`` behind a small threaded Python server whose
certificate a throwaway CA signs (`tests.helpers.pebble.write_tls_files`; the agent trusts it
through its layout's ``git`` section). With a `token` it REQUIRES it (``Authorization: Basic`` of
``x-access-token:<token>``, else 401, as GitHub answers); it records every request it gets
(`requests`: method, path, Authorization); `hold` keeps its answers to ``info/refs`` waiting until
`release` (a test looks at the machine while the site's git waits for it); `redirects` sends a
repository's requests elsewhere (302).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.helpers.hosting import Hosting, JobRun

GIT_ENV = {
    "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/nonexistent",
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str, **options: object) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, check=False, **options)  # type: ignore[call-overload]
    assert done.returncode == 0, f"git {args}: {done.stderr}"
    return str(done.stdout)


def commit(work: Path, name: str, text: str) -> str:
    (work / name).write_text(text)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", f"add {name}")
    return git(work, "rev-parse", "HEAD").strip()


def outcome(run: JobRun) -> Any:
    """A change's JSON result: the last line of its stdout (its progress lines come before)."""
    return json.loads(run.ok().stdout[-1])


def give(path: Path, owner: Path) -> None:
    """`path` and all it holds to the owner of `owner`."""
    uid, gid = owner.stat().st_uid, owner.stat().st_gid
    for item in [path, *path.rglob("*")]:
        os.lchown(item, uid, gid)


def new_origin(hosting: Hosting, domain: str, files: dict[str, str]) -> tuple[Path, Path]:
    """(a work tree, its bare origin) with one commit of `files` on main; the origin belongs to
    the site's user (git reads a local repository only as its owner)."""
    folder = hosting.folder / f"git-{uuid.uuid4().hex[:6]}"
    work, bare = folder / "work", folder / "origin.git"
    work.mkdir(parents=True)
    git(work, "init", "-q", "-b", "main")
    for name, text in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "first")
    git(folder, "init", "-q", "--bare", str(bare))
    git(work, "push", "-q", str(bare), "main")
    give(bare, hosting.home / domain.replace(".", "-"))
    return work, bare


def push(work: Path, bare: Path) -> None:
    git(work, "push", "-q", str(bare), "main", user=bare.stat().st_uid, group=bare.stat().st_gid)


HOLD_LIMIT_S = 120.0  # a held answer is let go after this even if the test never releases it


def basic(token: str) -> str:
    """The Authorization value a git host takes a token in."""
    return "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    authorization: str | None


@dataclass
class GitServer:
    root: Path  # the repositories: <root>/<name>.git
    tls: tuple[Path, Path, Path]  # (ca, cert, key)
    token: str | None = None
    requests: list[Seen] = field(default_factory=list)
    redirects: dict[str, str] = field(default_factory=dict)  # "/old.git/" -> "https://host:port/new.git/"
    holding: threading.Event = field(default_factory=threading.Event)
    held: threading.Event = field(default_factory=threading.Event)  # an answer is being held now
    released: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.server_address[1])

    def url(self, name: str) -> str:
        return f"https://127.0.0.1:{self.port}/{name}"

    def bare(self, name: str) -> Path:
        return self.root / name

    def hold(self) -> None:
        self.released.clear()
        self.held.clear()
        self.holding.set()

    def release(self) -> None:
        self.holding.clear()
        self.released.set()

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.answer(self)

            def do_POST(self) -> None:
                owner.answer(self)

            def log_message(self, format: str, *args: object) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.tls[1], self.tls[2])
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True, do_handshake_on_connect=False)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.release()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        authorization = handler.headers.get("Authorization")
        self.requests.append(Seen(handler.command, handler.path, authorization))
        if self.token is not None and authorization != basic(self.token):
            reply(handler, 401, [("WWW-Authenticate", 'Basic realm="git"')], b"token needed\n")
            return
        for old, new in self.redirects.items():
            if handler.path.startswith(old):
                reply(handler, 302, [("Location", new + handler.path[len(old) :])], b"")
                return
        if self.holding.is_set() and handler.command == "GET":
            self.held.set()
            self.released.wait(HOLD_LIMIT_S)
        self.backend(handler)

    def backend(self, handler: BaseHTTPRequestHandler) -> None:
        """The request through ``git http-backend`` (CGI), its answer back."""
        path, _, query = handler.path.partition("?")
        body = read_body(handler)
        env = {
            "PATH": "/usr/bin:/bin",
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": handler.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": handler.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": "127.0.0.1",
            "GIT_PROTOCOL": handler.headers.get("Git-Protocol", ""),
            "HTTP_CONTENT_ENCODING": handler.headers.get("Content-Encoding", ""),
        }
        git = shutil.which("git") or "/usr/bin/git"
        done = subprocess.run([git, "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        reply(handler, status, headers, payload)


def read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        parts = []
        while size := int(handler.rfile.readline().split(b";")[0], 16):
            parts.append(handler.rfile.read(size))
            handler.rfile.readline()
        handler.rfile.readline()
        return b"".join(parts)
    return handler.rfile.read(int(handler.headers.get("Content-Length", "0")))


def reply(handler: BaseHTTPRequestHandler, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
    try:
        handler.send_response(status)
        for name, value in headers:
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    except (ConnectionError, ssl.SSLError):
        pass  # the client went away (a cancelled job)
