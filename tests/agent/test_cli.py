"""``fleetdeck agent run`` (``python -m agent run``): the command line of one job, on a
temporary home (`tests.helpers.agent_jobs`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import orjson

from contract.job_kinds import CATALOG
from tests.conftest import ROOT
from tests.helpers.agent_jobs import (
    Env,
)


def run_cli(*args: str, env: Env | None = None) -> subprocess.CompletedProcess[str]:
    options = ["--home", str(env.home), "--state-dir", str(env.state), "--host-layout", str(env.layout)] if env else []
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "fleetdeck", "agent", "run", *options, *args]
    return subprocess.run(command, capture_output=True, text=True, env=environ, timeout=60, check=False)


def test_python_m_agent_run_site_list(env: Env) -> None:
    done = run_cli("site", "list", "--json")
    assert done.returncode == 0, done.stderr
    assert isinstance(json.loads(done.stdout)["sites"], list)
    env.add_site("cli.example.com")
    done = run_cli("site", "list", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert [s["domain"] for s in orjson.loads(done.stdout)["sites"]] == ["cli.example.com"]
    done = run_cli("site", "list", env=env)  # for people: a table
    assert done.returncode == 0 and "cli.example.com" in done.stdout and "DOMAIN" in done.stdout
    done = run_cli("nosuch", "thing", env=env)
    assert done.returncode == 127 and "has no handler for nosuch.thing" in done.stderr
    done = run_cli("site", "inspect", env=env)
    assert done.returncode == 2 and "usage: site inspect" in done.stderr
    done = run_cli("cron", "add", "--help", env=env)  # generated from the catalog's model
    assert done.returncode == 0 and done.stdout.startswith("usage: cron add DOMAIN --schedule SCHEDULE")
    assert "@midnight" in done.stdout and "run without a shell" in done.stdout
    done = run_cli("--home", str(env.home / "missing"), "metrics", "get", "--json")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [done.stderr.strip()] and "FileNotFoundError" in done.stderr


def test_the_agent_command_line_takes_a_structure_as_a_job_does(env: Env) -> None:
    """`fleetdeck agent run` takes the argv the control plane builds, a list as one JSON argument."""
    argv = CATALOG["deploy.init"].build({"domain": "nosuch.example.com", "shared": ["media/a=b,c"]}).argv
    assert argv[-3:-1] == ["--shared-json", '["media/a=b,c"]']
    done = run_cli(*argv, env=env)
    assert done.returncode == 1 and "nosuch.example.com" in done.stderr, done.stderr  # parsed: the site is missing
    done = run_cli("deploy", "init", "nosuch.example.com", "--shared-json", '[ "a",\n "b" ]', env=env)
    assert done.returncode == 1, done.stderr  # any JSON layout a person types
    done = run_cli("deploy", "init", "nosuch.example.com", "--shared-json", "a,b", env=env)
    assert done.returncode == 2 and "deploy init: error: --shared-json: argument is not JSON" in done.stderr
    done = run_cli("deploy", "init", "--help", env=env)
    assert done.returncode == 0 and "[--shared-json JSON]" in done.stdout
