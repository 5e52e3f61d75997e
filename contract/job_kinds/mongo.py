"""Job kinds of `mongo`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from contract.job_kinds.argtypes import Bool, DbName, DbUser, Secret, SiteDomain
from contract.job_kinds.base import INFRA, Args, FilePath, JobKind, NoArgs, ScopedPath, kind


class MongoDb(Args):
    name: DbName


class MongoUserCreate(Args):
    name: DbName
    user: DbUser
    password: Secret
    role: Literal["read", "readWrite", "dbAdmin", "dbOwner"] = "readWrite"


class MongoUser(Args):
    name: DbName
    user: DbUser


class MongoDump(Args):
    name: DbName
    domain: SiteDomain
    path: FilePath = Field(min_length=1)


class MongoRestore(MongoDump):
    drop: Bool = False


_MONGO = {"name": "events"}
_MDUMP = {"name": "events", "domain": "example.com", "path": "backups/events.archive.gz"}

# Who runs this domain's mutations, and from which plan (`base.DomainPolicy`).
POLICY = INFRA

KINDS: list[JobKind] = [
    kind("mongo.list", NoArgs, "List the MongoDB databases", read=True, example={}),
    kind("mongo.status", NoArgs, "Show the MongoDB server status", read=True, example={}),
    kind("mongo.create", MongoDb, "Create a MongoDB database", positional=("name",), example=_MONGO),
    kind("mongo.drop", MongoDb, "Drop a MongoDB database", positional=("name",), example=_MONGO, confirm="name"),
    kind("mongo.user-list", MongoDb, "List the users of a MongoDB database", read=True, positional=("name",),
         example=_MONGO),
    kind("mongo.user-create", MongoUserCreate, "Create a MongoDB user", positional=("name", "user"),
         example={"name": "events", "user": "events_app", "password": "correct-horse-battery"}),
    kind("mongo.user-delete", MongoUser, "Delete a MongoDB user", positional=("name", "user"),
         example={"name": "events", "user": "events_app"}, confirm="user"),
    kind("mongo.dump", MongoDump, "Dump a database into a site's files", positional=("name",), example=_MDUMP,
         paths=(ScopedPath("path", site="domain"),)),
    kind("mongo.restore", MongoRestore, "Restore a dump from a site's files", positional=("name",),
         example={**_MDUMP, "drop": True}, paths=(ScopedPath("path", site="domain"),)),
]  # fmt: skip
