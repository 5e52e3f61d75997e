"""Job kinds of `user`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import Bool, OnOff, Secret, SshFingerprint, SshPublicKey, SystemUser, Username
from contract.job_kinds.base import SYSADMIN, Args, JobKind, NoArgs, Result, UserArgs, kind


class UserCreate(Args):
    username: Username
    shell: Literal["bash", "sh", "zsh", "nologin"] = "bash"
    sudo: Bool = False
    password: Secret | None = None  # None: key-only login


class UserDelete(Args):
    username: SystemUser
    keep_home: Bool = False


class SshKeyAdd(Args):
    username: SystemUser
    key: SshPublicKey


class SshKeyRemove(Args):
    username: SystemUser
    fingerprint: SshFingerprint


class PasswordSet(Args):
    username: SystemUser
    password: Secret


class SudoSet(Args):
    username: SystemUser
    state: OnOff


class KeyAudit(Args):
    username: SystemUser | None = None  # None: every login user and site user


# --- results -------------------------------------------------------------------------------------


class UserRow(Result):
    username: str = Field(description="the user's name")
    uid: int = Field(description="the user's uid")
    home: str = Field(description="the user's home folder")
    shell: str = Field(description="the user's login shell")
    site: str | None = Field(description="the site's domain, for a site's own user (null: a login user)")
    password: Literal["set", "locked", "none"] | None = Field(
        description="the password's state (null: the agent does not run as root)"
    )
    locked: bool = Field(description="the account has expired (user.lock): no login at all")
    sudo: bool = Field(description="the user may use sudo (the agent's sudoers drop-in)")


class UserList(Result):
    users: list[UserRow] = Field(description="the login users and the sites' users, by uid")


class SshKey(Result):
    type: str = Field(description="the key's type as written (ssh-ed25519, ssh-rsa...)")
    fingerprint: str = Field(description="its SHA256 fingerprint")
    comment: str | None = Field(description="its comment (null: none)")
    line: int = Field(description="its line in authorized_keys (from 1)")
    bits: int | None = Field(description="its size in bits (null: ssh-keygen could not tell)")
    weak: str | None = Field(description="why the key is weak (null: it is not)")
    added_here: bool = Field(description="the agent added it (user.ssh-key-add)")
    flags: list[Literal["weak", "unknown"]] = Field(description="what an audit flags: weak, unknown (not added here)")


class UserInfo(UserRow):
    groups: list[str] = Field(description="its primary group first, then the others")
    keys: list[SshKey] = Field(description="its authorised SSH keys, in the file's order")
    last_login: str | None = Field(description="lastlog's latest login (null: never, or no lastlog)")


class UserCreated(Result):
    user: UserRow = Field(description="the user as it is now")
    created: bool = Field(description="the user was created (false: it existed, unchanged)")
    message: str = Field(description="what happened, for a person")


class UserDeleted(Result):
    username: str = Field(description="the user's name")
    deleted: bool = Field(description="the user was deleted (false: there was none)")
    message: str = Field(description="what happened, for a person")


class SshKeyList(Result):
    username: str = Field(description="the user's name")
    keys: list[SshKey] = Field(description="its authorised SSH keys, in the file's order")


class SshKeyAddedKey(Result):
    type: str = Field(description="the key's type as written (ssh-ed25519, ssh-rsa...)")
    fingerprint: str = Field(description="its SHA256 fingerprint")
    comment: str | None = Field(description="its comment (null: none)")
    bits: int = Field(description="its size in bits")


class SshKeyAdded(Result):
    username: str = Field(description="the user's name")
    key: SshKeyAddedKey = Field(description="the key")
    added: bool = Field(description="the key was written (false: it was authorised already)")
    message: str = Field(description="what happened, for a person")


class SshKeyRemoved(Result):
    username: str = Field(description="the user's name")
    fingerprint: str = Field(description="the key's SHA256 fingerprint")
    removed: bool = Field(description="the key was removed (false: it was not there)")
    message: str = Field(description="what happened, for a person")


class AuditedKey(SshKey):
    username: str = Field(description="the user whose authorized_keys holds it")


class UnreadKeys(Result):
    username: str = Field(description="the user whose keys could not be read")
    error: str = Field(description="why")


class KeyAuditResult(Result):
    keys: list[AuditedKey] = Field(description="every authorised key of the users audited")
    unread: list[UnreadKeys] = Field(description="the users whose keys could not be read")
    weak: int = Field(description="how many keys are weak")
    unknown: int = Field(description="how many keys the agent did not add")
    flagged: int = Field(description="how many keys are weak or unknown")


_U = {"username": "deploy"}
_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl jo@laptop"

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = SYSADMIN

KINDS: list[JobKind] = [
    kind("user.list", NoArgs, "List the login users", read=True, example={}, result=UserList),
    kind("user.inspect", UserArgs, "Show a user (groups, keys, sudo, last login)", read=True,
         positional=("username",), example=_U, result=UserInfo),
    kind("user.create", UserCreate, "Create a login user", positional=("username",),
         example={"username": "deploy", "shell": "bash", "sudo": True}, result=UserCreated),
    kind("user.delete", UserDelete, "Delete a login user", positional=("username",),
         example={"username": "deploy", "keep_home": True}, result=UserDeleted, confirm="username"),
    kind("user.ssh-key-list", UserArgs, "List a user's authorised SSH keys", read=True, positional=("username",),
         example=_U, result=SshKeyList),
    kind("user.ssh-key-add", SshKeyAdd, "Authorise an SSH public key for a user", positional=("username",),
         example={"username": "deploy", "key": _KEY}, result=SshKeyAdded),
    kind("user.ssh-key-remove", SshKeyRemove, "Remove an authorised SSH key", positional=("username", "fingerprint"),
         example={"username": "deploy", "fingerprint": "SHA256:" + "a" * 43}, result=SshKeyRemoved),
    kind("user.password-set", PasswordSet, "Set a user's password", positional=("username",),
         example={"username": "deploy", "password": "correct-horse-battery"}),
    kind("user.lock", UserArgs, "Lock a user out", positional=("username",), example=_U),
    kind("user.unlock", UserArgs, "Let a locked user log in again", positional=("username",), example=_U),
    kind("user.sudo-set", SudoSet, "Grant or take away sudo", positional=("username", "state"),
         example={"username": "deploy", "state": "off"}),
    kind("user.key-audit", KeyAudit, "Audit authorised SSH keys: weak ones and ones not added here", read=True,
         example=_U, result=KeyAuditResult),
]  # fmt: skip
