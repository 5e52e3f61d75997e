"""A deploy token never reaches the site's user: ``deploy.*`` with a token against a real https git
server on loopback (`tests.helpers.git_server`: ``git http-backend`` that refuses a request
without the token), through the real root agent, whose one-job URL the site's git reads from.

The site's user is assumed hostile: the tests look for the token in every process and file of the
site while its git runs (held mid-fetch by the server), point the repository's origin at a server
of their own, probe the one-job URL as that user and as another, and after the job."""

from __future__ import annotations

import base64
import os
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

from tests.helpers.git_repos import GitServer, basic, commit, git, new_origin, outcome
from tests.helpers.hosting import Hosting
from tests.helpers.pebble import write_tls_files

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


@pytest.fixture
def domain(hosting: Hosting) -> Iterator[str]:
    name = f"token-{uuid.uuid4().hex[:6]}.test"
    hosting.run("site.create", domain=name, profile="static").ok()
    yield name
    hosting.run("site.delete", domain=name).ok()


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
