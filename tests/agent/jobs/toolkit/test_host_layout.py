"""The hosting server's harness itself: a job through the API reaches the real root agent, whose
host layout file is re-read while it runs; a service is driven through its Debian init script."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from agent.jobs.toolkit.host import DEFAULT_LAYOUT, LayoutFile, ServiceControl, control_argv
from agent.jobs.toolkit.output import JobError
from tests.helpers.hosting import Hosting


@pytest.mark.skipif(shutil.which("crontab") is None, reason="needs cron's init script")
def test_a_service_status_runs_through_the_init_script(hosting: Hosting) -> None:
    run = hosting.run("service.status", name="cron").ok()
    assert run.result["manager"] == "sysv"
    assert run.result["name"] == "cron"


def test_an_unknown_service_is_a_clear_failure(hosting: Hosting) -> None:
    run = hosting.run("service.status", name="no-such-service")
    assert run.exit_code == 1
    assert "no service named no-such-service" in run.text


def test_the_layout_file_is_reread_and_a_broken_one_keeps_the_last_good(tmp_path: Path) -> None:
    path = tmp_path / "layout.json"
    layout = LayoutFile(str(path))
    assert layout.current() == DEFAULT_LAYOUT  # no file: Debian's defaults
    path.write_text(json.dumps({"mariadb": {"socket": "/tmp/a.sock"}}))
    assert layout.current().mariadb.socket == "/tmp/a.sock"
    assert layout.current().nginx == DEFAULT_LAYOUT.nginx
    path.write_text(json.dumps({"mariadb": {"socket": "/tmp/b.sock", "no_such_field": 1}}))
    assert layout.current().mariadb.socket == "/tmp/a.sock"
    path.write_text(json.dumps({"mariadb": {"socket": "/tmp/b.sock"}}))
    assert layout.current().mariadb.socket == "/tmp/b.sock"


def test_a_service_is_controlled_by_its_own_commands_or_the_system() -> None:
    given = ServiceControl(unit="php{version}-fpm", commands={"reload": ["kill", "-USR2", "{version}"]})
    init = DEFAULT_LAYOUT.init
    assert control_argv(given, "reload", init=init, version="8.2") == ["kill", "-USR2", "8.2"]
    assert control_argv(given, "restart", init=init, version="8.2")[-2:] == ["php8.2-fpm", "restart"]
    with pytest.raises(JobError, match="no service named nothing-here"):
        control_argv(ServiceControl(unit="nothing-here"), "reload", init=init)


def test_the_session_runs_its_own_nginx_and_php_fpm(hosting: Hosting) -> None:
    assert hosting.nginx is not None
    assert httpx.get(hosting.nginx.url("/")).status_code == 404  # the default server: no site yet
    if hosting.php is not None:
        assert (hosting.php.run_dir / "idle.sock").exists()
