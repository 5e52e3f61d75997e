"""Jobs that do the work, measured: through the product beside the same work done by hand.

    python benchmarks/jobs.py [--runs 5]

It prints two tables.

1. The job kinds with a real handler in this agent, per domain, beside the catalog's count.
2. For `site.create` (php profile: user, folders, PHP-FPM pool, nginx server block), `db.create`,
   `ssl.issue` and `deploy.run`: the time from the `POST /v1/servers/{id}/jobs` to the job's
   `exit` event on its stream (the API, the control plane, the link and the agent included; one
   keep-alive API client, as the TUI and the CLI keep theirs), and
   beside it the same work done by a bash script calling the same tools directly (useradd,
   php-fpm -t, nginx -t and reload; the mariadb client; certbot, built on the same `acme` library
   the agent uses; git and tar), as an administrator would. Median and range over `--runs`, after
   one warm-up run of each side that is not counted (the ACME account, caches); `--quick`: one
   run of each, no warm-up (it only checks that every row runs). The last column is a job's
   fixed cost: the median through the product minus the median by hand (issue 26: ≤ 50 ms).

What it starts, all on 127.0.0.1 and all stopped at the end: a local stack (`fleetdeck local`),
the hosting server the tests use (`tests.helpers.hosting`: an agent process of its own with an
nginx and a PHP-FPM of its own), a MariaDB, and pebble, the Let's Encrypt test CA. It needs root
(site users), and certbot for the by-hand certificate (`apt install certbot`; without it that
row says so).

Limits, said plainly: the by-hand scripts do not wait for nginx's new workers after a reload,
where the agent does (a job's end means the change is served); they check less (the agent also
validates names, refuses what exists, undoes a half-made site). Everything shares the machine's
cores. It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.jobs.kinds import all_kinds
from api_client import SSEParser
from contract.job_kinds import CATALOG
from fleetdeck.launcher import free_port
from tests.helpers.hosting import JOB_TIMEOUT_S, Hosting, start_hosting, stop_hosting
from tests.helpers.mariadb import MariaDb, mariadb_installed, run_mariadb
from tests.helpers.pebble import Pebble, pebble_installed, run_pebble
from tests.helpers.stacks import Stack, start_local


def handler_table() -> list[str]:
    have = Counter(kind.family for kind in all_kinds().values())
    catalog = Counter(entry.domain for entry in CATALOG.values())
    rows = [f"{'domain':<12} {'real handlers':>13} {'catalog kinds':>13}"]
    for domain in sorted(catalog):
        rows.append(f"{domain:<12} {have.get(domain, 0):>13} {catalog[domain]:>13}")
    rows.append(f"{'total':<12} {sum(have.values()):>13} {sum(catalog.values()):>13}")
    return rows


# --- the two sides ---------------------------------------------------------------------------------


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


_CLIENTS: dict[int, httpx.Client] = {}


def _client(hosting: Hosting) -> httpx.Client:
    """One keep-alive client per hosting server, as the TUI and the CLI keep theirs: making an
    httpx client costs some 19 ms here (its TLS context), three per job in `Hosting.run`, which
    the by-hand side would not pay."""
    if id(hosting) not in _CLIENTS:
        headers = {"Authorization": f"Bearer {hosting.token}"}
        _CLIENTS[id(hosting)] = httpx.Client(base_url=hosting.stack.base_url, headers=headers, timeout=JOB_TIMEOUT_S)
    return _CLIENTS[id(hosting)]


def through_the_api(hosting: Hosting, kind: str, **args: object) -> Callable[[], object]:
    """`POST` the job, then read its stream until the `exit` event (what a client waits for)."""

    def run() -> None:
        http = _client(hosting)
        answer = http.post(f"/v1/servers/{hosting.server_id}/jobs", json={"kind": kind, "args": args})
        if answer.status_code != 201:
            raise RuntimeError(f"{kind}: {answer.status_code} {answer.text}")
        parser = SSEParser()
        with http.stream("GET", f"/v1/jobs/{answer.json()['id']}/stream") as stream:
            for chunk in stream.iter_bytes():
                for event in parser.feed(chunk):
                    if event.event == "exit":
                        if event.data["exit_code"] != 0:
                            raise RuntimeError(f"{kind} exited {event.data['exit_code']}")
                        return
        raise RuntimeError(f"the stream of {kind} ended without its exit event")

    return run


def by_hand(script: str, *args: str, user: str | None = None) -> Callable[[], object]:
    argv = ["bash", "-euc", script, "by-hand", *args]
    if user is not None:
        argv = ["runuser", "-u", user, "--", *argv]

    def run() -> None:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the by-hand script exited {done.returncode}: {done.stderr[-2000:]}")

    return run


SITE_BY_HAND = r"""
domain=$1 slug=$2 home=$3/$2 pools=$4 run=$5 sites=$6 nginx_conf=$7 listen=$8
fpm=$9 fpm_conf=${10} fpm_ini=${11} fpm_pid=${12}
useradd --system --home-dir "$home" --shell /usr/sbin/nologin --user-group --no-create-home "$slug"
mkdir -m 750 "$home"; mkdir -m 755 "$home/public_html"; mkdir -m 750 "$home/logs"
printf '<?php echo "%s";\n' "$domain" > "$home/public_html/index.php"
touch "$home/logs/access.log" "$home/logs/error.log"
chown -R "$slug:$slug" "$home"; chgrp www-data "$home"
cat > "$pools/$slug.conf" <<EOF
[$slug]
user = $slug
group = $slug
listen = $run/$slug.sock
listen.owner = $slug
listen.group = www-data
listen.mode = 0660
pm = ondemand
pm.max_children = 5
EOF
"$fpm" -t -y "$fpm_conf" -c "$fpm_ini" 2>/dev/null
cat > "$sites/$slug.conf" <<EOF
server {
    listen $listen;
    server_name $domain;
    root $home/public_html;
    index index.php index.html;
    access_log $home/logs/access.log;
    error_log $home/logs/error.log;
    location ~ \.php\$ {
        include /etc/nginx/fastcgi_params;
        fastcgi_param SCRIPT_FILENAME \$realpath_root\$fastcgi_script_name;
        fastcgi_pass unix:$run/$slug.sock;
    }
}
EOF
nginx -t -q -c "$nginx_conf"
pkill -USR2 --pidfile "$fpm_pid"
nginx -c "$nginx_conf" -s reload
until [ -S "$run/$slug.sock" ]; do sleep 0.005; done
"""

DB_BY_HAND = r"""
mariadb --no-defaults --protocol=socket --socket="$1" --user=root \
    -e "CREATE DATABASE \`$2\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
"""

CERT_BY_HAND = r"""
domain=$1 webroot=$2 server=$3 certbot_dir=$4 sites=$5 nginx_conf=$6 tls_listen=$7 home=$8
certbot certonly --non-interactive --quiet --agree-tos --register-unsafely-without-email \
    --config-dir "$certbot_dir/config" --work-dir "$certbot_dir/work" --logs-dir "$certbot_dir/logs" \
    --server "$server" --webroot -w "$webroot" -d "$domain"
cat > "$sites/by-hand-tls-$domain.conf" <<EOF
server {
    listen $tls_listen;
    server_name $domain;
    ssl_certificate $certbot_dir/config/live/$domain/fullchain.pem;
    ssl_certificate_key $certbot_dir/config/live/$domain/privkey.pem;
    root $home/public_html;
}
EOF
nginx -t -q -c "$nginx_conf"
nginx -c "$nginx_conf" -s reload
"""

DEPLOY_BY_HAND = r"""
cd "$1"
git --git-dir=deploy/repo.git fetch --quiet --prune origin
name=$(date -u +%Y%m%d-%H%M%S-%N)
mkdir -p "releases/$name"
git --git-dir=deploy/repo.git archive "$2" | tar -x -C "releases/$name"
ln -s "releases/$name" current.new
mv -T current.new current
"""


# --- the rows --------------------------------------------------------------------------------------


def row(name: str, ours: list[float], theirs: list[float] | str) -> str:
    def figure(samples: list[float]) -> str:
        ms = sorted(s * 1000 for s in samples)
        return f"{statistics.median(ms):7.0f} ms ({ms[0]:.0f}-{ms[-1]:.0f})"

    other = theirs if isinstance(theirs, str) else figure(theirs)
    # A job's fixed cost: the API, the control plane, the link and the agent's checks and waits,
    # over the same work by hand (issue 26: at most 50 ms).
    overhead = (
        "" if isinstance(theirs, str) else f"{(statistics.median(ours) - statistics.median(theirs)) * 1000:+.0f} ms"
    )
    return f"{name:<12} {figure(ours):>26}   {other:>26}   {overhead:>10}"


def measure(runs: int, make: Callable[[int], Callable[[], object]]) -> list[float]:
    """`runs` timed runs, after a warm-up run that is not counted (none when `runs` is 1: --quick)."""
    if runs > 1:
        make(-1)()
    return [timed(make(i)) for i in range(runs)]


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def site_rows(hosting: Hosting, runs: int, cleanup: list[Callable[[], object]]) -> str:
    assert hosting.nginx is not None and hosting.php is not None
    nginx, php = hosting.nginx, hosting.php

    def ours(i: int) -> Callable[[], object]:
        domain = f"{unique('api')}.bench"
        cleanup.append(through_the_api(hosting, "site.delete", domain=domain))
        return through_the_api(hosting, "site.create", domain=domain, profile="php")

    def theirs(i: int) -> Callable[[], object]:
        slug = unique("hand")
        domain = f"{slug}.bench"
        cleanup.append(lambda: remove_by_hand_site(hosting, slug))
        return by_hand(
            SITE_BY_HAND,
            *(domain, slug, str(hosting.home), str(php.pool_dir), str(php.run_dir), str(nginx.sites_dir)),
            *(str(nginx.conf), f"127.0.0.1:{nginx.port}", php.binary, str(php.conf)),
            *(str(php.ini_dir / "fpm" / "php.ini"), str(php.pid_file)),
        )

    return row("site.create", measure(runs, ours), measure(runs, theirs))


def remove_by_hand_site(hosting: Hosting, slug: str) -> None:
    assert hosting.nginx is not None and hosting.php is not None
    (hosting.nginx.sites_dir / f"{slug}.conf").unlink(missing_ok=True)
    (hosting.php.pool_dir / f"{slug}.conf").unlink(missing_ok=True)
    subprocess.run(["nginx", "-c", str(hosting.nginx.conf), "-s", "reload"], check=False, capture_output=True)
    subprocess.run(["pkill", "-USR2", "--pidfile", str(hosting.php.pid_file)], check=False)
    shutil.rmtree(hosting.home / slug, ignore_errors=True)
    for _ in range(100):  # userdel refuses while the old pool's children still end
        if subprocess.run(["userdel", slug], capture_output=True, check=False).returncode in (0, 6):
            break
        time.sleep(0.05)


def db_rows(hosting: Hosting, mariadb: MariaDb, runs: int) -> str:
    def ours(i: int) -> Callable[[], object]:
        return through_the_api(hosting, "db.create", name=unique("api_"))

    def theirs(i: int) -> Callable[[], object]:
        return by_hand(DB_BY_HAND, str(mariadb.socket), unique("hand_"))

    return row("db.create", measure(runs, ours), measure(runs, theirs))


def ssl_rows(hosting: Hosting, pebble: Pebble, runs: int, folder: Path, cleanup: list[Callable[[], object]]) -> str:
    nginx = hosting.nginx
    assert nginx is not None
    tls_listen = hosting.layout["nginx"]["tls_listen"]

    def site(prefix: str) -> str:
        domain = f"{unique(prefix)}.bench"
        through_the_api(hosting, "site.create", domain=domain, profile="static")()
        cleanup.append(through_the_api(hosting, "site.delete", domain=domain))
        return domain

    def ours(i: int) -> Callable[[], object]:
        return through_the_api(hosting, "ssl.issue", domain=site("tls"))

    if shutil.which("certbot") is None:
        return row("ssl.issue", measure(runs, ours), "certbot not installed")
    webroot = folder / "certbot-webroot"
    (webroot / ".well-known").mkdir(parents=True)
    (webroot / ".well-known" / "acme-challenge").symlink_to(nginx.acme_dir)  # what the sites' nginx serves
    os.environ["REQUESTS_CA_BUNDLE"] = str(pebble.ca_bundle)

    def theirs(i: int) -> Callable[[], object]:
        domain = site("hand")
        server_block = nginx.sites_dir / f"by-hand-tls-{domain}.conf"
        cleanup.append(lambda: server_block.unlink(missing_ok=True))
        home = hosting.home / domain.replace(".", "-")
        return by_hand(
            CERT_BY_HAND,
            *(domain, str(webroot), pebble.directory_url, str(folder / "certbot"), str(nginx.sites_dir)),
            *(str(nginx.conf), tls_listen, str(home)),
        )

    return row("ssl.issue", measure(runs, ours), measure(runs, theirs))


GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.test"]


def deploy_rows(hosting: Hosting, runs: int, folder: Path, cleanup: list[Callable[[], object]]) -> str:
    """Each site clones an origin of its own, and a new commit lands in it before every run: git
    reads a local repository only as its owner, so the origin and the clone that pushes to it
    belong to the site's user, who makes the commits."""
    template = folder / "template"
    subprocess.run(["git", "init", "-q", "-b", "main", str(template)], check=True)
    for n in range(200):  # a small site: 200 files
        (template / f"page-{n}.html").write_text(f"<p>page {n}</p>\n" * 20)
    subprocess.run([*GIT, "-C", str(template), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(template), "commit", "-qm", "first"], check=True)

    def deploy_site(prefix: str) -> tuple[str, Path, Callable[[], None]]:
        domain = f"{unique(prefix)}.bench"
        through_the_api(hosting, "site.create", domain=domain, profile="static")()
        cleanup.append(through_the_api(hosting, "site.delete", domain=domain))
        home = hosting.home / domain.replace(".", "-")
        owner = home.owner()
        origin, work = folder / f"{domain}.git", folder / f"{domain}.work"
        subprocess.run(["git", "clone", "-q", "--bare", str(template), str(origin)], check=True)
        subprocess.run(["git", "clone", "-q", str(origin), str(work)], check=True)
        subprocess.run(["chown", "-R", f"{owner}:", str(origin), str(work)], check=True)
        through_the_api(hosting, "deploy.init", domain=domain, repo=f"file://{origin}", branch="main")()
        as_owner = ["runuser", "-u", owner, "--", *GIT, "-C", str(work)]

        def new_commit() -> None:
            (work / "changes.txt").write_text(uuid.uuid4().hex)
            subprocess.run([*as_owner, "add", "changes.txt"], check=True)
            subprocess.run([*as_owner, "commit", "-qm", "change"], check=True)
            subprocess.run([*as_owner, "push", "-q", "origin", "HEAD:main"], check=True)

        return domain, home, new_commit

    ours_domain, _, ours_commit = deploy_site("deploy")
    _, theirs_home, theirs_commit = deploy_site("hand")

    def ours(i: int) -> Callable[[], object]:
        ours_commit()
        return through_the_api(hosting, "deploy.run", domain=ours_domain)

    def theirs(i: int) -> Callable[[], object]:
        theirs_commit()
        return by_hand(DEPLOY_BY_HAND, str(theirs_home), "main", user=theirs_home.owner())

    return row("deploy.run", measure(runs, ours), measure(runs, theirs))


# --- main --------------------------------------------------------------------------------------------


@contextmanager
def hosting_server(folder: Path) -> Iterator[Hosting]:
    stack: Stack = start_local(folder / "local")
    try:
        hosting = start_hosting(stack, folder / "hosting")
        try:
            yield hosting
        finally:
            stop_hosting(hosting)
    finally:
        stack.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one run of each: only checks that it runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = 1
    print("\n".join(handler_table()))
    print()
    if os.geteuid() != 0:
        print("the timings need root (site users): run as root")
        return 0
    folder = Path(tempfile.mkdtemp(prefix="fleetdeck-bench-jobs-"))
    folder.chmod(0o755)
    cleanup: list[Callable[[], object]] = []
    print(f"{'kind':<12} {'fleetdeck: POST -> exit':>26}   {'by hand, same tools':>26}   {'overhead':>10}", flush=True)
    rows = Rows()
    try:
        with ExitStack() as stack:
            hosting = stack.enter_context(hosting_server(folder))
            rows.append(site_rows(hosting, args.runs, cleanup))
            if mariadb_installed():
                mariadb = stack.enter_context(run_mariadb(folder / "mariadb"))
                hosting.configure("mariadb", mariadb.layout())
                rows.append(db_rows(hosting, mariadb, args.runs))
            if pebble_installed():
                assert hosting.nginx is not None
                (folder / "pebble").mkdir()
                pebble = stack.enter_context(run_pebble(folder / "pebble", http_port=hosting.nginx.port))
                hosting.configure("nginx", {**hosting.layout["nginx"], "tls_listen": f"127.0.0.1:{free_port()} ssl"})
                hosting.configure("acme", {"directory_url": pebble.directory_url, "ca_bundle": str(pebble.ca_bundle)})
                rows.append(ssl_rows(hosting, pebble, args.runs, folder, cleanup))
            rows.append(deploy_rows(hosting, args.runs, folder, cleanup))
            for undo in reversed(cleanup):
                try:
                    undo()
                except RuntimeError as exc:
                    print(f"cleanup: {exc}", file=sys.stderr)
    finally:
        for client in _CLIENTS.values():
            client.close()
        shutil.rmtree(folder, ignore_errors=True)
    return 0


class Rows:
    """Each row printed as soon as it is measured (a long run shows its progress)."""

    def append(self, row: str) -> None:
        print(row, flush=True)


if __name__ == "__main__":
    sys.exit(main())
