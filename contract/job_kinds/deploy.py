"""Job kinds of `deploy`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator

from contract.job_kinds.argtypes import GitRef, GitUrl, Id, Int, RelativePath, Secret, SiteDomain
from contract.job_kinds.base import INFRA, Args, DomainArgs, JobKind, Result, ScopedPath, kind

_D = {"domain": "example.com"}


class DeployGit(Args):
    domain: SiteDomain
    repo: GitUrl
    branch: GitRef = "main"
    path: RelativePath = ""  # the folder of the site to deploy into
    public: RelativePath = ""  # as in DeployInit (kept when the deploy was initialised before)
    token: Secret | None = None  # an access token for a private https repository (never reaches the site's user)

    @model_validator(mode="after")
    def _token_only_over_https(self) -> DeployGit:
        _token_over_https(self.token, self.repo)
        return self


class DeployInit(Args):
    domain: SiteDomain
    repo: GitUrl | None = None  # None: a bare repository in the site to push to
    branch: GitRef = "main"  # what `deploy.run` deploys
    shared: list[RelativePath] = Field(default_factory=list, max_length=20)  # folders kept across releases
    public: RelativePath = ""  # the release's folder the site serves ("public"; "": the release itself)
    token: Secret | None = None  # as in DeployGit

    @model_validator(mode="after")
    def _token_only_over_https(self) -> DeployInit:
        _token_over_https(self.token, self.repo)
        return self


def _token_over_https(token: SecretStr | None, repo: str | None) -> None:
    """A token goes only to an https repository (the agent sends it there, never the site's git)."""
    if token is not None and repo is not None and not repo.startswith("https://"):
        raise ValueError("a token is sent only to an https:// repository: give its https URL, or no token")


class DeployRun(Args):
    domain: SiteDomain
    branch: GitRef | None = None  # None: the branch `deploy.init` chose
    token: Secret | None = None  # as in DeployGit


class DeployRollback(Args):
    domain: SiteDomain
    release: Id | None = None  # None: the previous release


class DeployRelease(Args):
    domain: SiteDomain
    release: Id


class DeployPrune(Args):
    domain: SiteDomain
    keep: Int = Field(default=5, ge=1, le=50)


class DeploySettings(Result):
    domain: str = Field(description="the site")
    mode: Literal["clone", "push"] = Field(description="clone: fetched from repo; push: a repository to push to")
    repo: str | None = Field(description="the repository fetched from (None: push mode)")
    push_url: str | None = Field(description="the repository to push to, a file:// URL (None: clone mode)")
    branch: str = Field(description="the branch deploy.run deploys")
    shared: list[str] = Field(description="the site's folders kept across releases")
    public: str = Field(description="the release's folder the site serves ('': the release itself)")
    created: bool = Field(description="the repository was made by this job (False: it was there)")


class DeployHook(Result):
    hook: str = Field(description="the hook's name (composer, npm...)")
    ran: bool = Field(description="it ran (False: its tool is not installed, so it was skipped)")


class ReleaseRecord(Result):
    commit: str = Field(description="the commit deployed (full hash)")
    subject: str = Field(description="the commit's subject line")
    branch: str = Field(description="the branch it came from")
    created_at: str = Field(description="when the release was made (RFC 3339, UTC)")


class Deployed(ReleaseRecord):
    domain: str = Field(description="the site")
    release: str = Field(description="the new release's name (its UTC time, 20261123-204500)")
    previous: str | None = Field(description="the release live before (None: the first one)")
    hooks: list[DeployHook] = Field(description="the hooks the release asked for, in the order they ran")


class ReleaseRow(Result):
    name: str = Field(description="the release's name (its UTC time, 20261123-204500)")
    commit: str | None = Field(description="the commit (None: its record is missing or unreadable)")
    subject: str | None = Field(description="the commit's subject line (None: not recorded)")
    branch: str | None = Field(description="the branch it came from (None: not recorded)")
    created_at: str | None = Field(description="when it was made, RFC 3339 (None: not recorded)")
    current: bool = Field(description="the release the site serves now")


class ReleaseList(Result):
    domain: str = Field(description="the site")
    current: str | None = Field(description="the release the site serves (None: none yet)")
    releases: list[ReleaseRow] = Field(description="the releases, newest first")


class ReleaseDetail(ReleaseRow):
    domain: str = Field(description="the site")
    path: str = Field(description="the release's folder on the server")


class DeployKey(Result):
    domain: str = Field(description="the site")
    public_key: str = Field(description="the public half of the site's ed25519 deploy key (OpenSSH format)")
    fingerprint: str | None = Field(description="its SHA256 fingerprint (None: ssh-keygen did not say)")
    created: bool = Field(description="the key was made by this job")


# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("deploy.init", DeployInit, "Prepare a site for git deploys: clone a repository, or make one to push to",
         positional=("domain",), json=True,
         example={"domain": "example.com", "repo": "https://github.com/acme/site.git", "branch": "main",
                  "shared": ["storage", "public/uploads"], "public": "public"},
         paths=(ScopedPath("shared", site="domain"), ScopedPath("public", site="domain")), result=DeploySettings),
    kind("deploy.run", DeployRun, "Deploy the newest commit of the branch as a new release", positional=("domain",),
         json=True, example={"domain": "example.com", "branch": "main"}, result=Deployed),
    kind("deploy.git", DeployGit, "Deploy a git branch into a site as a new release", positional=("domain",),
         json=True,
         example={"domain": "example.com", "repo": "https://github.com/acme/site.git", "branch": "main",
                  "token": "ghp_exampletoken123"},
         paths=(ScopedPath("path", site="domain"), ScopedPath("public", site="domain")), result=Deployed),
    kind("deploy.rollback", DeployRollback, "Switch a site back to an earlier release", positional=("domain",),
         example={"domain": "example.com", "release": "20240501-1"}),
    kind("deploy.list", DomainArgs, "List the releases of a site", read=True, positional=("domain",), example=_D,
         result=ReleaseList),
    kind("deploy.inspect", DeployRelease, "Show one release (commit, time, log)", read=True,
         positional=("domain", "release"), example={"domain": "example.com", "release": "20240501-1"},
         result=ReleaseDetail),
    kind("deploy.prune", DeployPrune, "Delete old releases, keeping the newest", positional=("domain",),
         example={"domain": "example.com", "keep": 3}),
    kind("deploy.key-show", DomainArgs, "Show the site's deploy key (to add to the git host)", read=True,
         positional=("domain",), example=_D, result=DeployKey),
]  # fmt: skip
