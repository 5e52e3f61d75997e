"""The link's frames as models (`contract.link.params`): a frame whose params break its model's
rules is refused with the contract's code and a message naming the field, over a real link (the
hub served by hypercorn, the agent's link, its real file handlers and job manager), with no
traceback, no ``internal`` answer, and nothing changed on disk; a hello that breaks `Hello`'s is
refused like any malformed hello (the link closed with 1002, the field named in the log)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import trio

from agent import __version__
from agent.files.remote_copy import RemoteCopy, SshSettings
from agent.jobs.manager import JobManager
from agent.jobs.toolkit.base import JobContext
from agent.link.client import AgentLink
from agent.sites import SiteRegistry
from contract.link import params as link_params
from contract.link import protocol
from contract.link.params import MAX_HANDLERS, MAX_HELLO_FIELD, MAX_JOB_ID, LinkParams
from contract.models import MAX_ARCHIVE_PATHS, MAX_PATHS, WINDOW_LIMIT
from control_plane.hub import AgentCallError
from tests.helpers.agent_files import SITE, make_home, snapshot
from tests.helpers.link import FAST, NEVER, SERVER_ID, TOKEN, hello_from, make_control_plane, serving

JOB = {"job_id": "j1", "kind": "site.list", "argv": ["site", "list"]}
TID = "0123456789abcdef" * 2
PUSH = {"scope": "root", "transfer_id": TID, "paths": ["a"], "host": "10.0.0.2", "user": "root", "port": 22}
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB"
ACCEPT = {"scope": "root", "transfer_id": TID, "destination": "", "names": ["a"], "public_key": KEY}

# (the model the frame breaks, method, params, the field the answer names)
BROKEN: list[tuple[type[LinkParams], str, dict[str, Any], str]] = [
    (link_params.JobRun, "job.run", {**JOB, "job_id": 7}, "job_id"),
    (link_params.JobRun, "job.run", {**JOB, "job_id": "j" * (MAX_JOB_ID + 1)}, "job_id"),
    (link_params.JobRun, "job.run", {"job_id": "j1", "kind": "site.list"}, "argv"),
    (link_params.JobRun, "job.run", {**JOB, "argv": ["site", 1]}, "argv.1"),
    (link_params.JobRun, "job.run", {**JOB, "kind": ""}, "kind"),
    (link_params.JobRun, "job.run", {**JOB, "secrets": {"password": 1}}, "secrets.password"),
    (link_params.JobRun, "job.run", {**JOB, "runs": "yes"}, "runs"),
    (link_params.JobAttach, "job.attach", {"job_id": "j1", "after": -1}, "after"),
    (link_params.JobAttach, "job.attach", {"job_id": "j1", "after": True}, "after"),
    (link_params.JobAttach, "job.attach", {"job_id": "j1", "after": "3"}, "after"),
    (link_params.JobAttach, "job.attach", {"job_id": "j1", "after": 2, "acked": 3}, "acked must be at most after"),
    (link_params.JobAttach, "job.attach", {"after": 0}, "job_id"),
    (link_params.JobCancel, "job.cancel", {"job_id": ""}, "job_id"),
    (link_params.JobCancel, "job.cancel", {}, "job_id"),
    (link_params.JobJournal, "job.journal", {"job_ids": "j1"}, "job_ids"),
    (link_params.JobJournal, "job.journal", {"job_ids": ["j" * (MAX_JOB_ID + 1)]}, "job_ids.0"),
    (link_params.FsParams, "fs.trash.list", {"domain": "example.com"}, "scope"),
    (link_params.FsParams, "fs.trash.empty", {"scope": "home", "domain": "example.com"}, "scope"),
    (link_params.FsPath, "fs.stat", {**SITE, "path": 5}, "path"),
    (link_params.FsPath, "fs.stat", {**SITE, "path": None}, "path"),
    (link_params.FsPath, "fs.stat", {"scope": "site", "domain": "x" * 254, "path": ""}, "domain"),
    (link_params.FsPath, "fs.dirsize", {**SITE, "path": ["public"]}, "path"),
    (link_params.FsPath, "fs.download", {**SITE, "path": 1.5}, "path"),
    (link_params.FsList, "fs.list", {**SITE, "limit": 0}, "limit"),
    (link_params.FsList, "fs.list", {**SITE, "limit": "10"}, "limit"),
    (link_params.FsList, "fs.list", {**SITE, "cursor": "c" * 1025}, "cursor"),
    (link_params.FsList, "fs.list", {**SITE, "encoded": "true"}, "encoded"),
    (link_params.FsRead, "fs.read", {**SITE, "path": "notes.txt", "offset": -1}, "offset"),
    (link_params.FsRead, "fs.read", {**SITE, "path": "notes.txt", "length": WINDOW_LIMIT + 1}, "length"),
    (link_params.FsWrite, "fs.write", {**SITE, "path": "notes.txt"}, "content"),
    (link_params.FsWrite, "fs.write", {**SITE, "path": "notes.txt", "content": 3}, "content"),
    (link_params.FsWrite, "fs.write", {**SITE, "path": "notes.txt", "content": "x", "if_match": 1}, "if_match"),
    (link_params.FsWrite, "fs.write", {**SITE, "path": "notes.txt", "content": "x", "create_only": 1}, "create_only"),
    (link_params.FsMkdir, "fs.mkdir", {**SITE, "path": "new", "parents": "true"}, "parents"),
    (link_params.FsTransfer, "fs.move", {**SITE, "paths": [], "destination": "a"}, "paths"),
    (link_params.FsTransfer, "fs.move", {**SITE, "paths": "notes.txt", "destination": "a"}, "paths"),
    (link_params.FsTransfer, "fs.copy", {**SITE, "paths": ["notes.txt"]}, "destination"),
    (link_params.FsTransfer, "fs.copy", {**SITE, "paths": ["notes.txt"], "destination": "a", "to": "root"}, "to"),
    (
        link_params.FsTransfer,
        "fs.copy",
        {**SITE, "paths": ["notes.txt"], "destination": "a", "to": {"server_id": "srv-2"}},
        "to: a transfer to another server",
    ),
    (link_params.FsDelete, "fs.delete", {**SITE, "paths": ["notes.txt", 1]}, "paths.1"),
    (link_params.FsDelete, "fs.delete", {**SITE, "paths": ["notes.txt"] * (MAX_PATHS + 1)}, "paths"),
    (link_params.FsTrashRestore, "fs.trash.restore", {**SITE, "ids": []}, "ids"),
    (link_params.FsChmod, "fs.chmod", {**SITE, "paths": ["notes.txt"], "mode": "999"}, "mode"),
    (link_params.FsChmod, "fs.chmod", {**SITE, "paths": ["notes.txt"], "mode": 0o10000}, "mode"),
    (link_params.FsChmod, "fs.chmod", {**SITE, "paths": ["notes.txt"], "mode": True}, "mode"),
    (link_params.FsChmod, "fs.chmod", {**SITE, "paths": ["notes.txt"]}, "mode"),
    (link_params.FsChmod, "fs.chmod", {**SITE, "paths": ["notes.txt"], "mode": 0o644, "only": "links"}, "only"),
    (link_params.FsSearch, "fs.search", {**SITE, "query": ""}, "query"),
    (link_params.FsSearch, "fs.search", {**SITE, "query": "x", "limit": 10_001}, "limit"),
    (link_params.FsFind, "fs.find", {**SITE, "path": "notes.txt"}, "give either query or line"),
    (
        link_params.FsFind,
        "fs.find",
        {**SITE, "path": "notes.txt", "query": "x", "line": 1},
        "give either query or line",
    ),
    (link_params.FsFind, "fs.find", {**SITE, "path": "notes.txt", "query": "x" * 257}, "query"),
    (link_params.FsFind, "fs.find", {**SITE, "path": "notes.txt", "line": 0}, "line"),
    (link_params.FsFind, "fs.find", {**SITE, "path": "notes.txt", "query": "x", "offset": -1}, "offset"),
    (link_params.FsFind, "fs.find", {**SITE, "path": "notes.txt", "query": "x", "backward": "yes"}, "backward"),
    (
        link_params.FsCompress,
        "fs.compress",
        {**SITE, "paths": ["a"], "format": "rar", "destination": "a.rar"},
        "format",
    ),
    (
        link_params.FsCompress,
        "fs.compress",
        {**SITE, "paths": ["a"] * (MAX_ARCHIVE_PATHS + 1), "format": "zip", "destination": "a.zip"},
        "paths",
    ),
    (
        link_params.FsExtract,
        "fs.extract",
        {**SITE, "path": "a.zip", "destination": "out", "on_conflict": "merge"},
        "on_conflict",
    ),
    (link_params.FsExtract, "fs.extract.check", {**SITE, "path": "a.zip"}, "destination"),
    (link_params.FsUpload, "fs.upload", {**SITE, "path": "new.bin", "size": -1}, "size"),
    (link_params.FsUpload, "fs.upload.check", {**SITE, "path": "notes.txt", "overwrite": "no"}, "overwrite"),
    (link_params.FsXfer, "fs.xfer.close", {"transfer_id": "../" + TID}, "transfer_id"),
    (link_params.FsXfer, "fs.xfer.close", {}, "transfer_id"),
    (
        link_params.FsXferPrepare,
        "fs.xfer.prepare",
        {"scope": "root", "transfer_id": TID.upper(), "paths": ["a"]},
        "transfer_id",
    ),
    (link_params.FsXferPrepare, "fs.xfer.prepare", {"scope": "root", "transfer_id": TID, "paths": []}, "paths"),
    (link_params.FsXferPush, "fs.xfer.push", {**PUSH, "host": "-oProxyCommand=touch /tmp/x"}, "host"),
    (link_params.FsXferPush, "fs.xfer.push", {**PUSH, "user": "-v"}, "user"),
    (link_params.FsXferPush, "fs.xfer.push", {**PUSH, "port": 0}, "port"),
    (link_params.FsXferPush, "fs.xfer.push", {**PUSH, "port": "22"}, "port"),
    (
        link_params.FsXferPush,
        "fs.xfer.push",
        {**PUSH, "host_keys": ["ssh-ed25519 AAAA\n10.0.0.9 ssh-ed25519 BBBB"]},
        "host_keys.0",
    ),
    (link_params.FsXferPush, "fs.xfer.push", {**PUSH, "remove_sources": "yes"}, "remove_sources"),
    (link_params.FsXferAccept, "fs.xfer.accept", {**ACCEPT, "source_ip": "10.0.0"}, "source_ip"),
    (
        link_params.FsXferAccept,
        "fs.xfer.accept",
        {**ACCEPT, "source_ip": "10.0.0.1", "public_key": "ssh-rsa AAAA"},
        "public_key",
    ),
    (link_params.FsXferAccept, "fs.xfer.accept", {**ACCEPT, "source_ip": "10.0.0.1", "names": []}, "names"),
    (link_params.FsXferAccept, "fs.xfer.accept", {**ACCEPT, "source_ip": "10.0.0.1", "destination": 1}, "destination"),
]

# The models that are parts of others or bases, not a frame's params of their own (the hello's
# and the needs frame's are refused below and in tests/control_plane/hub/test_needs_frames.py, the
# pulse frame's in tests/control_plane/hub/test_pulse_frames.py).
PARTS = {LinkParams, link_params.FsPaths, link_params.FsTarget, link_params.Hello, link_params.Needs, link_params.Pulse}


def test_every_model_of_the_calls_has_broken_frames_below() -> None:
    models = {
        value
        for value in vars(link_params).values()
        if isinstance(value, type) and issubclass(value, LinkParams) and value.__module__ == link_params.__name__
    }
    assert models - PARTS == {model for model, *_ in BROKEN}


@pytest.mark.parametrize(
    ("model", "method", "params", "named"),
    BROKEN,
    ids=[f"{model.__name__}-{method}-{named}" for model, method, _, named in BROKEN],
)
@pytest.mark.anyio
async def test_a_call_whose_params_break_its_model_is_refused(
    model: type[LinkParams],
    method: str,
    params: dict[str, Any],
    named: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    home = make_home(tmp_path)
    before = snapshot(home.base)
    jobs = JobManager(JobContext(str(home.home), str(home.state), SiteRegistry(str(home.state)), __version__))
    files = home.handlers()
    transfers = RemoteCopy(files, str(home.state), SshSettings())
    handlers = {**files.handlers(), **transfers.handlers(), **jobs.handlers()}
    cp = make_control_plane()
    async with serving(cp.hub) as url, trio.open_nursery() as nursery:
        await nursery.start(jobs.run)
        link = AgentLink(url, TOKEN, handlers, version="9.9", backoff=FAST, auth_backoff=NEVER)
        nursery.start_soon(link.run)
        await cp.wait_presence(online=True)
        with pytest.raises(AgentCallError) as refused:
            await cp.hub.call(SERVER_ID, method, params, timeout=10)
        nursery.cancel_scope.cancel()
    assert refused.value.code == "validation_error", refused.value
    assert refused.value.message.startswith(named), refused.value.message
    assert [e["loc"] for e in refused.value.details["errors"]], refused.value.details
    assert snapshot(home.base) == before
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


# (the hello's fields, the fields it lacks, the field the log names)
BROKEN_HELLOS: list[tuple[dict[str, Any], tuple[str, ...], str]] = [
    ({}, ("version",), "version"),
    ({"version": 2}, (), "version"),
    ({"version": "1.0 beta"}, (), "version"),
    ({"version": "1" * 65}, (), "version"),
    ({}, ("boot_id",), "boot_id"),
    ({"boot_id": "b\x1b[31m"}, (), "boot_id"),
    ({"hostname": "h" * (MAX_HELLO_FIELD + 1)}, (), "hostname"),
    ({"hostname": None}, (), "hostname"),
    ({}, ("handlers",), "handlers"),
    ({"handlers": "fs.list"}, (), "handlers"),
    ({"handlers": ["fs.list", 1]}, (), "handlers.1"),
    ({"handlers": ["fs.list"] * (MAX_HANDLERS + 1)}, (), "handlers"),
    ({"handlers": ["f" * (MAX_HELLO_FIELD + 1)]}, (), "handlers.0"),
    ({"direct_ingress_url": "javascript:alert(1)"}, (), "direct_ingress_url"),
    ({"direct_ingress_url": "http://host:port/"}, (), "direct_ingress_url"),
    ({"direct_ingress_url": "https:///path"}, (), "direct_ingress_url"),
    ({"direct_ingress_url": "http://h/\x1b[2J"}, (), "direct_ingress_url"),
    ({"direct_ingress_url": 443}, (), "direct_ingress_url"),
    ({"job_kinds": ["site.list", "Site.list"]}, (), "job_kinds.1"),
    ({"kernel_protections": {"protected_hardlinks": "yes"}}, (), "kernel_protections.protected_hardlinks"),
    ({"needs": {"dns.check": 9}}, (), "needs.dns.check"),
    ({"needs": {"dns.check": ""}}, (), "needs.dns.check"),
    ({"needs": {"DNS.check": "bind9"}}, (), "needs.DNS.check.[key]"),
]


@pytest.mark.parametrize(
    ("fields", "without", "named"),
    BROKEN_HELLOS,
    ids=[f"{named}-{index}" for index, (_, _, named) in enumerate(BROKEN_HELLOS)],
)
@pytest.mark.anyio
async def test_a_hello_that_breaks_its_model_is_refused(
    fields: dict[str, Any], without: tuple[str, ...], named: str, caplog: pytest.LogCaptureFixture
) -> None:
    cp = make_control_plane()
    async with serving(cp.hub) as url, hello_from(url, without=without, **fields) as closed:
        pass
    assert closed.code == protocol.CLOSE_PROTOCOL_ERROR
    assert f"hello with a bad {named}: " in caplog.text
    assert cp.presence == [] and not cp.hub.is_online(SERVER_ID)
    assert not [r for r in caplog.records if r.exc_info]
