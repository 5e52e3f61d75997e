"""``deploy.*`` through the API against the real root agent: a local origin repository (file://)
with two commits, releases unpacked as the site user, ``current`` switched and rolled back."""

from __future__ import annotations

import os
import pwd
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.jobs.deploy import release_name, release_order
from tests.helpers.git_repos import commit, git, give, new_origin, outcome, push
from tests.helpers.hosting import Hosting


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
