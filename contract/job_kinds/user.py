"""Job kinds of `user`."""

from __future__ import annotations

from typing import Literal

from contract.job_kinds.argtypes import Bool, OnOff, Secret, SshFingerprint, SshPublicKey, SystemUser, Username
from contract.job_kinds.base import Args, JobKind, NoArgs, UserArgs, kind


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


_U = {"username": "deploy"}
_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl jo@laptop"

KINDS: list[JobKind] = [
    kind("user.list", NoArgs, "List the login users", read=True, example={}),
    kind("user.inspect", UserArgs, "Show a user (groups, keys, sudo, last login)", read=True,
         positional=("username",), example=_U),
    kind("user.create", UserCreate, "Create a login user", positional=("username",),
         example={"username": "deploy", "shell": "bash", "sudo": True}),
    kind("user.delete", UserDelete, "Delete a login user", positional=("username",),
         example={"username": "deploy", "keep_home": True}),
    kind("user.ssh-key-list", UserArgs, "List a user's authorised SSH keys", read=True, positional=("username",),
         example=_U),
    kind("user.ssh-key-add", SshKeyAdd, "Authorise an SSH public key for a user", positional=("username",),
         example={"username": "deploy", "key": _KEY}),
    kind("user.ssh-key-remove", SshKeyRemove, "Remove an authorised SSH key", positional=("username", "fingerprint"),
         example={"username": "deploy", "fingerprint": "SHA256:" + "a" * 43}),
    kind("user.password-set", PasswordSet, "Set a user's password", positional=("username",),
         example={"username": "deploy", "password": "correct-horse-battery"}),
    kind("user.lock", UserArgs, "Lock a user out", positional=("username",), example=_U),
    kind("user.unlock", UserArgs, "Let a locked user log in again", positional=("username",), example=_U),
    kind("user.sudo-set", SudoSet, "Grant or take away sudo", positional=("username", "state"),
         example={"username": "deploy", "state": "off"}),
    kind("user.key-audit", KeyAudit, "Audit authorised SSH keys: weak ones and ones not added here", read=True,
         example=_U),
]  # fmt: skip
