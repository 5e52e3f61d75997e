"""Backend HTTP servers on loopback for the load-balancer tests: each answers with its own name.

``/slow`` holds the answer until the test sets `release` (`held` counts those in flight), so a
test can keep a request open through a drain or a reload. `stop` and `start` again keep the
port: a killed backend comes back where the load balancer expects it. A `keep_alive` backend
speaks HTTP/1.1 and keeps its connections open; `slow_connections` names those (by the client's
port) that carried a ``/slow`` request, to count the connections a proxy opened.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Backend:
    name: str
    port: int = 0
    held: int = 0  # slow requests in flight
    release: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None
    keep_alive: bool = False
    slow_connections: set[int] = field(default_factory=set)

    def start(self) -> None:
        backend = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if backend.keep_alive else "HTTP/1.0"

            def do_GET(self) -> None:
                if self.path.startswith("/slow"):
                    backend.slow_connections.add(self.client_address[1])
                    backend.held += 1
                    backend.release.wait(30)
                    backend.held -= 1
                body = backend.name.encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except ConnectionError:
                    pass  # HAProxy's checks close once they have the status line

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()
        self.server = None


def start_backends(*names: str) -> list[Backend]:
    started = [Backend(name) for name in names]
    for backend in started:
        backend.start()
    return started


def stop_backends(backends: list[Backend]) -> None:
    for backend in backends:
        backend.release.set()
        if backend.server is not None:
            backend.stop()
