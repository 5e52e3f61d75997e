"""The demo of the embedded default: a `/home`-like tree with two sites, and an org that owns it.

Everything here is made once per data dir and reused by later runs (a marker file tells).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent.sites import SiteRegistry, write_atomically
from agent.state import prepare_state_dir
from control_plane.auth import store as accounts
from control_plane.auth.passwords import hash_password
from control_plane.servers import store as server_store
from control_plane.storage import Database
from fleetdeck.paths import StackLayout

DEMO_ORG = "demo"
DEMO_EMAIL = "owner@demo.fleetdeck.dev"
DEMO_SERVER = "local"
PAGING_FOLDER_SIZE = 20_000
MARKER = ".fleetdeck-demo"

SITES = {"example.com": "example-com", "shop.example.org": "shop-example-org"}

_FILES: dict[str, str] = {
    "example-com/public_html/index.php": """<?php
/**
 * Front to the WordPress application.
 */
define('WP_USE_THEMES', true);
require __DIR__ . '/wp-blog-header.php';
""",
    "example-com/public_html/wp-config.php": """<?php
define('DB_NAME', 'example_wp');
define('DB_USER', 'example');
define('DB_PASSWORD', 'change-me');
define('DB_HOST', 'localhost');
$table_prefix = 'wp_';
define('WP_DEBUG', false);
if (!defined('ABSPATH')) {
    define('ABSPATH', __DIR__ . '/');
}
require_once ABSPATH . 'wp-settings.php';
""",
    "example-com/public_html/wp-content/themes/fleet/style.css": """/* Theme Name: Fleet */
body { font-family: system-ui, sans-serif; margin: 0; color: #1d2430; }
.site-header { display: flex; align-items: center; padding: 1rem 2rem; background: #0e639c; }
.site-header a { color: white; text-decoration: none; }
""",
    "example-com/public_html/wp-content/themes/fleet/app.js": """// Collapse the menu on small screens.
document.addEventListener('DOMContentLoaded', () => {
  const toggle = document.querySelector('.menu-toggle');
  toggle?.addEventListener('click', () => document.body.classList.toggle('menu-open'));
});
""",
    "example-com/.env": "APP_ENV=production\nDB_PASSWORD=change-me\nMAIL_HOST=smtp.example.com\n",
    "logs/example-com/access.log": "".join(
        f'203.0.113.{i % 250} - - [22/Nov/2026:10:{i % 60:02d}:00 +0000] "GET /?p={i} HTTP/1.1" 200 {512 + i}\n'
        for i in range(400)
    ),
    "logs/example-com/error.log": "[22/Nov/2026:10:00:01] PHP Notice: Undefined index: page in index.php on line 4\n",
    "shop-example-org/app/main.py": '''"""The shop's API."""

from fastapi import FastAPI

app = FastAPI()


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok"}
''',
    "shop-example-org/app/config.yaml": "server:\n  port: 8080\n  workers: 4\ncache:\n  ttl_s: 300\n",
    "shop-example-org/app/package.json": '{\n  "name": "shop",\n  "version": "1.4.2",\n  "private": true\n}\n',
    "shop-example-org/nginx/shop.conf": """server {
    listen 80;
    server_name shop.example.org;
    location / {
        proxy_pass http://127.0.0.1:8080;
        proxy_set_header Host $host;
    }
}
""",
    "shop-example-org/README.md": "# shop.example.org\n\nThe shop's API, served by **uvicorn** behind nginx.\n",
    "shop-example-org/deploy.sh": '#!/bin/sh\nset -eu\ncd "$(dirname "$0")/app"\nexec uvicorn main:app --port 8080\n',
}


def ensure_workspace(home: Path, agent_state: Path, site_logs: Path) -> None:
    """Create the demo tree under `home` (its sites' logs in `site_logs`, the agent's
    ``system.sites_log_dir``) and register its sites with the agent, unless they exist."""
    home.mkdir(parents=True, exist_ok=True)
    prepare_state_dir(str(agent_state))
    registry = SiteRegistry(str(agent_state))
    if not os.path.exists(registry.path):  # made once: sites removed later stay removed
        for domain, slug in SITES.items():
            registry.add({"domain": domain, "slug": slug})
    if (home / MARKER).exists():
        return
    for relative, text in _FILES.items():
        target = site_logs / relative.removeprefix("logs/") if relative.startswith("logs/") else home / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    (home / "example-com/logs").mkdir(exist_ok=True)  # the site's own (cron's run histories)
    (home / "shop-example-org/deploy.sh").chmod(0o755)
    (home / "example-com/public_html/wp-content/uploads").mkdir(parents=True, exist_ok=True)
    (home / "example-com/public_html/favicon.ico").write_bytes(bytes(range(256)) * 4)
    os.symlink("public_html/wp-content/themes/fleet", home / "example-com/theme")
    _make_paging_folder(home / "example-com/public_html/wp-content/cache")
    (home / MARKER).write_text("made by fleetdeck local\n")


def _make_paging_folder(folder: Path) -> None:
    """Its 20,000 pages, each opened relative to the folder's descriptor: 0.3 s here, where
    `Path.write_bytes` took 1.3 s, most of a fresh stack's start (`benchmarks/startup.py`)."""
    folder.mkdir(parents=True, exist_ok=True)
    folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    new_page = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    try:
        for i in range(PAGING_FOLDER_SIZE):
            fd = os.open(f"page-{i:05d}.html", new_page, 0o644, dir_fd=folder_fd)
            try:
                os.write(fd, b"<!-- cached -->\n")
            finally:
                os.close(fd)
    finally:
        os.close(folder_fd)


@dataclass(frozen=True)
class DemoAccount:
    email: str
    password: str
    server_id: str
    agent_token: str


def ensure_account(db: Database, layout: StackLayout) -> DemoAccount:
    """The demo org (plan max), its owner and the local server: made once, reused afterwards.

    Secrets that must survive a restart (the owner's password, the agent token) live in files of
    mode 0600 in the data dir; the database keeps only their hashes.
    """
    new_password = not layout.demo_password.exists()
    password = _secret_file(layout.demo_password, lambda: secrets.token_urlsafe(12))
    org = db.run_sync(accounts.org_by_name, DEMO_ORG) or db.run_sync(accounts.create_org, DEMO_ORG, "max")
    user = db.run_sync(accounts.user_by_email, DEMO_EMAIL)
    if user is None:
        user = db.run_sync(accounts.create_user, DEMO_EMAIL, "Demo Owner", hash_password(password))
        db.run_sync(accounts.add_membership, user["id"], org["id"], "owner")
    elif new_password:
        # Hashing costs about half a second: only when the password file was (re)made.
        db.run_sync(accounts.set_password, user["id"], hash_password(password))
    server = db.run_sync(server_store.server_by_name, org["id"], DEMO_SERVER)
    token_file = layout.agent_token
    if server is None:
        server, token = db.run_sync(server_store.create_server, org["id"], DEMO_SERVER, "full", "127.0.0.1")
        assert token is not None
        write_private(token_file, token)
    elif token_file.exists():
        token = token_file.read_text().strip()
    else:
        token = db.run_sync(server_store.rotate_agent_token, server["id"])
        write_private(token_file, token)
    return DemoAccount(email=DEMO_EMAIL, password=password, server_id=server["id"], agent_token=token)


def _secret_file(path: Path, make: Callable[[], str]) -> str:
    if path.exists():
        return path.read_text().strip()
    value = make()
    write_private(path, value)
    return value


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, replacing it atomically (the agent's own writer)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(str(path), text.encode())
