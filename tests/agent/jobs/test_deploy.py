"""``deploy.*`` through the API against the real root agent: a local origin repository (file://)
with two commits, releases unpacked as the site user, ``current`` switched and rolled back.

A deploy token never reaches the site's user: ``deploy.*`` with a token against a real
https git server on loopback (`tests.helpers.git_repos`)."""

from __future__ import annotations

import base64
import os
import pwd
import re
import secrets
import shutil
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agent.jobs.deploy import release_name, release_order
from tests.helpers.git_repos import GitServer, basic, commit, git, give, new_origin, outcome, push
from tests.helpers.hosting import Hosting
from tests.helpers.pebble import write_tls_files


@pytest.fixture
def domain(hosting: Hosting) -> Iterator[str]:
    name = f"deploy-{uuid.uuid4().hex[:6]}.test"
    hosting.run("site.create", domain=name, profile="static").ok()
    yield name
    hosting.run("site.delete", domain=name).ok()


@pytest.fixture
def origin(hosting: Hosting, domain: str) -> tuple[Path, Path]:
    return new_origin(hosting, domain, {"index.html": "first\n"})


def test_run_unpacks_a_release_switches_current_and_rollback_goes_back(
    hosting: Hosting, domain: str, origin: tuple[Path, Path]
) -> None:
    work, bare = origin
    site = hosting.home / domain.replace(".", "-")
    init = outcome(hosting.run("deploy.init", domain=domain, repo=f"file://{bare}", shared=["storage"]))
    assert init["mode"] == "clone" and init["created"] is True
    assert (site / "deploy/repo.git/HEAD").is_file()
    owner = (site / "deploy/repo.git").stat().st_uid
    assert owner == site.stat().st_uid != 0  # made as the site user

    first = outcome(hosting.run("deploy.run", domain=domain))
    assert (site / "current/index.html").read_text() == "first\n"
    (site / "current/storage/kept.txt").write_text("uploaded")  # lands in shared/storage

    second_commit = commit(work, "second.html", "second\n")
    give(work, bare)
    push(work, bare)
    second = outcome(hosting.run("deploy.run", domain=domain))
    assert second["commit"] == second_commit and second["previous"] == first["release"]
    assert os.readlink(site / "current") == f"releases/{second['release']}"
    assert (site / "current/second.html").read_text() == "second\n"
    assert (site / "current/storage/kept.txt").read_text() == "uploaded"
    assert (site / "current/storage").is_symlink()
    assert (site / "releases" / second["release"] / "second.html").stat().st_uid == owner

    listed = hosting.run("deploy.list", domain=domain).ok().result
    assert [r["name"] for r in listed["releases"]] == [second["release"], first["release"]]
    assert listed["current"] == second["release"] and listed["releases"][0]["current"] is True
    assert listed["releases"][0]["commit"] == second_commit

    back = hosting.run("deploy.rollback", domain=domain).ok()
    assert f"release: {first['release']}" in back.stdout
    assert os.readlink(site / "current") == f"releases/{first['release']}"
    assert not (site / "current/second.html").exists()
    refused = hosting.run("deploy.rollback", domain=domain)
    assert refused.exit_code == 1 and "no release before" in refused.text

    shown = hosting.run("deploy.inspect", domain=domain, release=second["release"]).ok().result
    assert shown["subject"] == "add second.html" and shown["current"] is False
    hosting.run("deploy.prune", domain=domain, keep=1).ok()
    assert (site / "releases" / first["release"]).is_dir()  # the newest is kept, and the older one is current
    hosting.run("deploy.rollback", domain=domain, release=second["release"]).ok()
    hosting.run("deploy.prune", domain=domain, keep=1).ok()
    assert sorted(p.name for p in (site / "releases").iterdir()) == [second["release"]]
    assert not (site / "deploy/releases" / f"{first['release']}.json").exists()


def test_shared_folders_named_with_commas_and_equals_reach_the_handler_exactly(
    hosting: Hosting, domain: str, origin: tuple[Path, Path]
) -> None:
    """A list argument travels as JSON (`--shared-json`): folder names with `,` and `=` (which a
    comma-joined argv value refused) and non-ASCII letters reach the agent, its git config and
    the release exactly as given."""
    _, bare = origin
    folders = ["media/a=b,c", "données", "x,y=1"]
    init = hosting.run("deploy.init", domain=domain, repo=f"file://{bare}", shared=folders)
    assert init.job["args"]["shared"] == folders
    assert outcome(init)["shared"] == folders  # what the handler wrote into fleetdeck.shared, read back
    release = outcome(hosting.run("deploy.run", domain=domain))["release"]
    site = hosting.home / domain.replace(".", "-")
    for folder in folders:
        link = site / "releases" / release / folder
        assert link.is_symlink() and link.resolve() == (site / "shared" / folder).resolve(), folder
        assert (site / "shared" / folder).is_dir()


def test_init_twice_says_so_and_a_missing_branch_changes_nothing(
    hosting: Hosting, domain: str, origin: tuple[Path, Path]
) -> None:
    _, bare = origin
    site = hosting.home / domain.replace(".", "-")
    os.chown(bare, 0, 0)
    refused = hosting.run("deploy.init", domain=domain, repo=f"file://{bare}")
    assert refused.exit_code == 1 and "dubious ownership" in refused.text  # not the site user's
    assert not (site / "deploy/repo.git").exists()
    give(bare, site)
    hosting.run("deploy.init", domain=domain, repo=f"file://{bare}").ok()
    again = hosting.run("deploy.init", domain=domain, repo=f"file://{bare}", branch="nope")
    assert outcome(again)["created"] is False and "already initialised" in again.text
    failed = hosting.run("deploy.run", domain=domain)
    assert failed.exit_code == 1 and "no branch nope" in failed.text
    assert not (site / "current").exists() and list((site / "releases").iterdir()) == []


def test_a_push_repository_records_pushes_and_deploys_them(hosting: Hosting, domain: str) -> None:
    site = hosting.home / domain.replace(".", "-")
    init = outcome(hosting.run("deploy.init", domain=domain))
    assert init["mode"] == "push" and init["push_url"] == f"file://{site}/deploy/repo.git"
    work = hosting.folder / f"push-{uuid.uuid4().hex[:6]}"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    pushed = commit(work, "index.html", "pushed\n")
    give(work, site)
    push(work, site / "deploy/repo.git")  # as the site user: its repository
    assert (
        f"refs/heads/main 0000000000000000000000000000000000000000 {pushed}" in (site / "deploy/pushes.log").read_text()
    )
    result = outcome(hosting.run("deploy.run", domain=domain))
    assert result["commit"] == pushed
    assert (site / "current/index.html").read_text() == "pushed\n"


def test_the_deploy_key_is_made_once_as_the_site_user(hosting: Hosting, domain: str) -> None:
    site = hosting.home / domain.replace(".", "-")
    first = hosting.run("deploy.key-show", domain=domain).ok().result
    assert first["created"] is True and first["public_key"].startswith("ssh-ed25519 ")
    assert first["fingerprint"].startswith("SHA256:")
    private = site / "deploy/id_ed25519"
    assert private.stat().st_uid == site.stat().st_uid and private.stat().st_mode & 0o077 == 0
    again = hosting.run("deploy.key-show", domain=domain).ok().result
    assert again["created"] is False and again["public_key"] == first["public_key"]
    assert "PRIVATE" not in hosting.run("deploy.key-show", domain=domain).text


def test_a_release_name_is_its_utc_time_and_a_second_in_the_same_second_is_numbered() -> None:
    now = 1_800_000_000.0
    assert release_name([], now) == "20270115-080000"
    assert release_name(["20270115-080000"], now) == "20270115-080000-2"
    names = ["20270115-080000-10", "20270115-080000-2", "20270115-080000", "20260101-000000"]
    assert sorted(names, key=release_order) == [
        "20260101-000000",
        "20270115-080000",
        "20270115-080000-2",
        "20270115-080000-10",
    ]


@pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm for the release's hook")
def test_a_failing_hook_removes_its_release_and_leaves_current(
    hosting: Hosting, domain: str, origin: tuple[Path, Path]
) -> None:
    work, bare = origin
    site = hosting.home / domain.replace(".", "-")
    hosting.run("deploy.init", domain=domain, repo=f"file://{bare}").ok()
    first = outcome(hosting.run("deploy.run", domain=domain))
    (work / "package.json").write_text('{"name": "site", "version": "1.0.0"}\n')
    commit(work, "package-lock.json", "{ not json\n")
    give(work, bare)
    push(work, bare)
    failed = hosting.run("deploy.run", domain=domain)
    assert failed.exit_code == 1 and "hook npm: npm ci" in failed.text
    assert os.readlink(site / "current") == f"releases/{first['release']}"
    assert [p.name for p in (site / "releases").iterdir()] == [first["release"]]
    assert [p.name for p in (site / "deploy/releases").iterdir()] == [f"{first['release']}.json"]


WHERE = "<?php echo __DIR__, ' as ', posix_getpwuid(posix_geteuid())['name'];\n"


def test_the_site_serves_its_current_release_through_nginx(hosting: Hosting) -> None:
    if hosting.php is None:
        pytest.skip("PHP-FPM is not installed (Debian package php-fpm)")
    domain = f"live-{uuid.uuid4().hex[:6]}.test"
    hosting.run("site.create", domain=domain, profile="php").ok()
    try:
        site = hosting.home / domain.replace(".", "-")
        files = {"public/index.html": "release one\n", "public/where.php": WHERE, "config.txt": "not served\n"}
        work, bare = new_origin(hosting, domain, files)
        assert outcome(hosting.run("deploy.init", domain=domain, repo=f"file://{bare}", public="public"))["public"] == (
            "public"
        )
        assert "PHP 8" in hosting.get(domain, "/").text  # public_html until a release is live

        first = outcome(hosting.run("deploy.run", domain=domain))
        assert hosting.get(domain, "/").text == "release one\n"
        where = f"{site}/releases/{first['release']}/public as {site.name}"
        assert hosting.get(domain, "/where.php").text == where  # PHP runs from the release, as the site
        assert hosting.get(domain, "/config.txt").status_code == 404  # outside the public folder
        inspected = hosting.run("site.inspect", domain=domain).ok().result
        assert inspected["docroot"] == "current/public"

        commit(work, "public/index.html", "release two\n")
        give(work, bare)
        push(work, bare)
        second = outcome(hosting.run("deploy.run", domain=domain))
        assert hosting.get(domain, "/").text == "release two\n"
        assert hosting.get(domain, "/where.php").text == where.replace(first["release"], second["release"])

        hosting.run("deploy.rollback", domain=domain).ok()
        assert hosting.get(domain, "/").text == "release one\n"
        assert hosting.get(domain, "/where.php").text == where
    finally:
        hosting.run("site.delete", domain=domain).ok()


def test_a_link_in_a_release_serves_only_what_its_owner_owns(hosting: Hosting, domain: str) -> None:
    site = hosting.home / domain.replace(".", "-")
    _, bare = new_origin(hosting, domain, {"index.html": "home\n"})
    hosting.run("deploy.init", domain=domain, repo=f"file://{bare}").ok()
    release = outcome(hosting.run("deploy.run", domain=domain))["release"]
    secret = hosting.home / f"root-{uuid.uuid4().hex[:6]}.txt"
    secret.write_text("root's own\n")
    secret.chmod(0o644)  # nginx's workers could read it (the home is 0755): only the link rule keeps it in
    try:
        public = site / "releases" / release
        for name, target in (("own.txt", "index.html"), ("root.txt", str(secret))):
            (public / name).symlink_to(target)
            os.lchown(public / name, site.stat().st_uid, site.stat().st_gid)  # made by the site's user
        assert hosting.get(domain, "/own.txt").text == "home\n"
        refused = hosting.get(domain, "/root.txt")
        assert refused.status_code == 404 and "root's own" not in refused.text  # try_files: not there for nginx
    finally:
        secret.unlink()


def test_a_release_without_the_public_folder_is_not_switched_in(
    hosting: Hosting, domain: str, origin: tuple[Path, Path]
) -> None:
    _, bare = origin
    site = hosting.home / domain.replace(".", "-")
    hosting.run("deploy.init", domain=domain, repo=f"file://{bare}").ok()
    first = outcome(hosting.run("deploy.run", domain=domain))
    assert hosting.get(domain, "/").text == "first\n"
    assert hosting.post("deploy.init", domain=domain, public="a/../b").status_code == 422  # the catalog's rules
    refused = hosting.run("deploy.init", domain=domain, public="we b")
    assert refused.exit_code == 1 and "not a plain folder" in refused.text  # nginx's configuration would not take it
    hosting.run("deploy.init", domain=domain, public="web").ok()
    failed = hosting.run("deploy.run", domain=domain)
    assert failed.exit_code == 1 and "has no folder web" in failed.text
    assert os.readlink(site / "current") == f"releases/{first['release']}"
    assert hosting.get(domain, "/").text == "first\n"


def test_programs_the_sites_repository_names_run_as_the_site_user(
    hosting: Hosting, domain: str, origin: tuple[Path, Path]
) -> None:
    """The repository's config is the site user's to edit: a hook it names (here through
    core.hooksPath, run by git fetch on every ref it updates) runs as that user with its own
    group only, never as root."""
    work, bare = origin
    site = hosting.home / domain.replace(".", "-")
    hosting.run("deploy.init", domain=domain, repo=f"file://{bare}").ok()
    drop = hosting.folder / f"hook-drop-{uuid.uuid4().hex[:6]}"  # anyone may write here: root too
    drop.mkdir()
    drop.chmod(0o1777)
    witness = drop / "ran"
    hooks = site / "planted-hooks"
    hooks.mkdir()
    (hooks / "reference-transaction").write_text(f"#!/bin/sh\ncat > /dev/null\nid -u > {witness}\nid -G >> {witness}\n")
    (hooks / "reference-transaction").chmod(0o755)
    give(hooks, site)
    git(site, "--git-dir", "deploy/repo.git", "config", "core.hooksPath", str(hooks), user=site.stat().st_uid)
    commit(work, "later.html", "later\n")
    give(work, bare)
    push(work, bare)
    hosting.run("deploy.run", domain=domain).ok()
    uid, groups = witness.read_text().splitlines()
    assert int(uid) == site.stat().st_uid != 0
    assert groups.split() == [str(pwd.getpwuid(int(uid)).pw_gid)]


HELD_WAIT_S = 120.0  # the site's git reaches the held answer (a job through the API: seconds)
DOOR_RE = re.compile(r"http://127\.0\.0\.1:\d+/[0-9a-f]{32}/")


@pytest.fixture(scope="module")
def git_tls(hosting: Hosting) -> Iterator[tuple[Path, Path, Path]]:
    """A throwaway CA and its certificate for 127.0.0.1; the agent trusts that CA for a token's
    repository (its layout's ``git.ca_bundle``), the site's own git does not."""
    folder = hosting.folder / f"git-tls-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    paths = write_tls_files(folder)
    hosting.configure("git", {"ca_bundle": str(paths[0])})
    yield paths
    hosting.configure("git", {})


def start_server(hosting: Hosting, tls: tuple[Path, Path, Path], token: str | None) -> GitServer:
    server = GitServer(hosting.folder / f"git-https-{uuid.uuid4().hex[:6]}" / "repos", tls, token)
    server.start()
    return server


@pytest.fixture
def token() -> str:
    return f"fdtok_{secrets.token_hex(20)}"


@pytest.fixture
def remote(hosting: Hosting, git_tls: tuple[Path, Path, Path], token: str) -> Iterator[GitServer]:
    """An https server that wants `token`, with ``site.git`` (one commit: index.html "first")."""
    server = start_server(hosting, git_tls, token)
    work = server.root.parent / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    commit(work, "index.html", "first\n")
    git(server.root, "init", "-q", "--bare", "site.git")
    git(work, "push", "-q", str(server.bare("site.git")), "main")
    yield server
    server.stop()


@pytest.fixture
def attacker(hosting: Hosting, git_tls: tuple[Path, Path, Path]) -> Iterator[GitServer]:
    """A server of the site user's choosing that the agent would trust as well (the same CA):
    only the agent's rule keeps the token from it."""
    server = start_server(hosting, git_tls, None)
    yield server
    server.stop()


def site_of(hosting: Hosting, domain: str) -> Path:
    return hosting.home / domain.replace(".", "-")


def publish(remote: GitServer, name: str, text: str) -> str:
    """A new commit adding `name` on the remote's main: its id."""
    work = remote.root.parent / "work"
    made = commit(work, name, text)
    git(work, "push", "-q", str(remote.bare("site.git")), "main")
    return made


def forms(token: str) -> list[bytes]:
    """The token as it could be found: itself, and the Basic credentials git would have sent."""
    return [token.encode(), base64.b64encode(f"x-access-token:{token}".encode())]


def processes_of(uid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.stat(f"/proc/{name}").st_uid == uid:
                found.append(int(name))
        except FileNotFoundError:
            pass
    return found


def read_proc(pid: int, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return b""


def files_holding(folder: Path, needles: list[bytes]) -> list[str]:
    """The regular files below `folder` (links not followed) whose bytes hold one of `needles`."""
    found = []
    for path in [folder, *folder.rglob("*")]:
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if any(needle in data for needle in needles):
                found.append(str(path))
    return found


def as_user(site: Path, *curl_args: str) -> tuple[int, str]:
    """curl run as the site's user (its own group only): (curl's exit code, the HTTP status)."""
    owner = site.stat()
    done = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "30", *curl_args],
        user=owner.st_uid,
        group=owner.st_gid,
        extra_groups=[],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout


def held_door(hosting: Hosting, remote: GitServer, job_id: str, site: Path) -> str:
    """Once the site's git waits for the held answer: the one-job URL it reads (from the argv of
    its remote helper, a process of the site's user)."""
    if not remote.held.wait(HELD_WAIT_S):
        raise AssertionError(f"the site's git never reached the remote: {hosting.job(job_id)}")
    doors = {
        match
        for pid in processes_of(site.stat().st_uid)
        for match in DOOR_RE.findall(read_proc(pid, "cmdline").replace(b"\0", b" ").decode("latin-1"))
    }
    assert len(doors) == 1, doors
    return doors.pop()


def test_a_token_clones_and_fetches_through_the_agent_and_the_remote_gets_it(
    hosting: Hosting, remote: GitServer, domain: str, token: str, git_tls: tuple[Path, Path, Path]
) -> None:
    site = site_of(hosting, domain)
    url = remote.url("site.git")
    trust = ssl.create_default_context(cafile=git_tls[0])
    refused = httpx.get(f"{url}/info/refs?service=git-upload-pack", verify=trust)
    assert refused.status_code == 401  # the remote wants the token
    remote.requests.clear()

    init = outcome(hosting.run("deploy.init", domain=domain, repo=url, token=token))
    assert init["mode"] == "clone" and init["repo"] == url  # origin is the repository, not the one-job URL
    assert remote.requests and {seen.authorization for seen in remote.requests} == {basic(token)}
    assert {seen.path.split("?")[0] for seen in remote.requests} == {"/site.git/info/refs", "/site.git/git-upload-pack"}
    first = outcome(hosting.run("deploy.run", domain=domain, token=token))
    assert (site / "current/index.html").read_text() == "first\n"

    wrong = hosting.run("deploy.run", domain=domain, token=f"{token}-wrong")
    assert wrong.exit_code == 1 and "answered 401 with the token" in wrong.text
    assert wrong.stderr[-1].endswith("failed (exit 128)")  # git's failure, as one line

    second = publish(remote, "second.html", "second\n")
    released = outcome(hosting.run("deploy.git", domain=domain, repo=url, token=token))
    assert released["commit"] == second and released["previous"] == first["release"]
    assert (site / "current/second.html").read_text() == "second\n"
    assert (site / "deploy/repo.git").stat().st_uid == site.stat().st_uid != 0  # the site's git did it
    assert {seen.authorization for seen in remote.requests} - {basic(f"{token}-wrong")} == {basic(token)}
    assert files_holding(site, forms(token)) == [] and files_holding(hosting.state, forms(token)) == []
    assert token not in hosting.agent.log_file.read_text(errors="replace")


def test_no_process_nor_file_of_the_site_holds_the_token_and_its_url_dies_with_the_job(
    hosting: Hosting, remote: GitServer, domain: str, token: str
) -> None:
    site = site_of(hosting, domain)
    hosting.run("deploy.init", domain=domain, repo=remote.url("site.git"), token=token).ok()
    second = publish(remote, "second.html", "second\n")
    remote.hold()
    answer = hosting.post("deploy.run", domain=domain, token=token)
    assert answer.status_code == 201, answer.text
    job_id = answer.json()["id"]
    try:
        door = held_door(hosting, remote, job_id, site)
        pids = processes_of(site.stat().st_uid)
        commands = [read_proc(pid, "cmdline") for pid in pids]
        assert any(b"remote-http" in command for command in commands), commands  # caught mid-fetch
        for pid in pids:
            for part in ("environ", "cmdline"):
                text = read_proc(pid, part)
                assert not any(form in text for form in forms(token)), f"/proc/{pid}/{part}"
        assert files_holding(site, forms(token)) == []

        # The door reads, for the site's user only, and this repository only.
        assert as_user(site, "-X", "POST", f"{door}git-receive-pack") == (0, "403")
        assert as_user(site, f"{door}info/refs?service=git-receive-pack") == (0, "403")
        assert as_user(site, f"{door}info/refs") == (0, "404")  # git's dumb protocol
        assert as_user(site, f"{door}objects/info/packs") == (0, "404")
        assert as_user(site, door.rsplit("/", 2)[0] + "/other/info/refs?service=git-upload-pack") == (0, "404")
        by_root = httpx.get(f"{door}info/refs?service=git-upload-pack", timeout=30)
        assert by_root.status_code == 403  # another user than the site's (root here) gets nothing
        asked = len(remote.requests)
    finally:
        remote.release()
    done = hosting.wait(job_id).ok()
    assert outcome(done)["commit"] == second
    assert len(remote.requests) > asked  # only the site's git went on to the remote
    assert {seen.authorization for seen in remote.requests} == {basic(token)}
    assert not any("receive-pack" in seen.path for seen in remote.requests)
    assert as_user(site, f"{door}info/refs?service=git-upload-pack")[0] == 7  # nothing listens there now


def test_the_token_never_goes_where_the_sites_repository_points(
    hosting: Hosting, remote: GitServer, attacker: GitServer, domain: str, token: str
) -> None:
    site = site_of(hosting, domain)
    hosting.run("deploy.init", domain=domain, repo=remote.url("site.git"), token=token).ok()
    second = publish(remote, "second.html", "second\n")
    as_site = {"user": site.stat().st_uid, "group": site.stat().st_gid}
    git(site, "--git-dir", "deploy/repo.git", "config", "remote.origin.url", attacker.url("site.git"), **as_site)

    released = hosting.run("deploy.run", domain=domain, token=token)
    assert attacker.requests == []
    assert outcome(released)["commit"] == second  # from the repository the agent recorded

    # The site's config may even rewrite the one-job URL: its git then goes elsewhere, tokenless.
    rewrite = f"url.{attacker.url('site.git')}.insteadOf"
    git(site, "--git-dir", "deploy/repo.git", "config", rewrite, "http://127.0.0.1:", **as_site)
    failed = hosting.run("deploy.run", domain=domain, token=token)
    assert failed.exit_code == 1
    assert all(seen.authorization is None for seen in attacker.requests)
    assert files_holding(site, forms(token)) == []


def test_a_cancelled_deploy_closes_its_url(hosting: Hosting, remote: GitServer, domain: str, token: str) -> None:
    site = site_of(hosting, domain)
    hosting.run("deploy.init", domain=domain, repo=remote.url("site.git"), token=token).ok()
    publish(remote, "second.html", "second\n")
    remote.hold()
    answer = hosting.post("deploy.run", domain=domain, token=token)
    job_id = answer.json()["id"]
    try:
        door = held_door(hosting, remote, job_id, site)
        with hosting.http() as http:
            assert http.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        ended = hosting.wait(job_id)
    finally:
        remote.release()
    assert ended.job["status"] == "cancelled"
    assert as_user(site, f"{door}info/refs?service=git-upload-pack")[0] == 7
    assert list((site / "releases").iterdir()) == []


def test_a_redirect_is_followed_within_the_host_alone(
    hosting: Hosting, remote: GitServer, attacker: GitServer, domain: str, token: str
) -> None:
    site = site_of(hosting, domain)
    remote.redirects["/moved.git/"] = remote.url("site.git/")  # a renamed repository: same host
    init = hosting.run("deploy.init", domain=domain, repo=remote.url("moved.git"), token=token).ok()
    assert (site / "deploy/repo.git/HEAD").is_file(), init.text
    assert next(seen.path for seen in remote.requests if seen.method == "POST") == "/site.git/git-upload-pack"

    remote.redirects["/moved.git/"] = attacker.url("site.git/")  # to another host (another port)
    failed = hosting.run("deploy.run", domain=domain, token=token)
    assert failed.exit_code == 1 and "the token goes only to" in failed.text
    assert attacker.requests == []


def test_a_token_goes_to_no_repository_but_an_https_one(hosting: Hosting, domain: str, token: str) -> None:
    for repo in ("git@example.com:acme/site.git", "ssh://git@example.com/acme/site.git", "file:///srv/site.git"):
        refused = hosting.post("deploy.init", domain=domain, repo=repo, token=token)
        assert refused.status_code == 422, refused.text
        assert "https://" in refused.text and token not in refused.text
    assert hosting.post("deploy.git", domain=domain, repo="git@example.com:a/b.git", token=token).status_code == 422

    pushes = hosting.run("deploy.init", domain=domain)  # a repository to push to: no remote
    assert pushes.exit_code == 0
    refused_run = hosting.run("deploy.run", domain=domain, token=token)
    assert refused_run.exit_code == 2 and "no repository recorded for a token" in refused_run.text

    shutil.rmtree(site_of(hosting, domain) / "deploy/repo.git")
    _, bare = new_origin(hosting, domain, {"index.html": "local\n"})
    hosting.run("deploy.init", domain=domain, repo=f"file://{bare}").ok()  # recorded: not https
    refused_run = hosting.run("deploy.run", domain=domain, token=token)
    assert refused_run.exit_code == 2 and f"only to an https:// repository, not to file://{bare}" in refused_run.text
    assert not (site_of(hosting, domain) / "current").exists()
