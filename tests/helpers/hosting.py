"""One hosting server for the job-kind tests: a full server of an org of its own (plan max), whose
agent is a real root process with a host layout file, and a way to run a job through the API.

The web services every site needs (an nginx and a PHP-FPM of the session's own, see
`tests.helpers.web_services`) start with it. The others (MariaDB, PostgreSQL, bind9, ...) are
started by their own session fixtures, in the session's folders, on 127.0.0.1 and free ports; each
one then adds its section to the layout file (`Hosting.configure`), which the agent re-reads, so
the agent never needs a restart and a test run that needs only MariaDB starts only MariaDB.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agent.jobs.toolkit.host import php_fpm_versions
from api_client import SSEParser
from tests.helpers.stacks import AgentProcess, Stack
from tests.helpers.web_services import (
    Nginx,
    PhpFpm,
    start_nginx,
    start_php_fpm,
    stop_nginx,
    stop_php_fpm,
)

JOB_TIMEOUT_S = 300.0


@dataclass
class JobRun:
    """A job that ended: its record, exit code and lines (stdout and stderr apart)."""

    job: dict[str, Any]
    stdout: list[str]
    stderr: list[str]

    @property
    def exit_code(self) -> int:
        code: int = self.job["exit_code"]
        return code

    @property
    def result(self) -> Any:
        """The job's parsed JSON result (a read kind's)."""
        return self.job["result"]

    @property
    def text(self) -> str:
        return "\n".join(self.stdout + self.stderr)

    def ok(self) -> JobRun:
        """Itself, once the job is known to have succeeded (else an assertion with its output)."""
        assert self.exit_code == 0, f"{self.job['kind']} exited {self.exit_code}:\n{self.text}"
        return self


@dataclass
class Hosting:
    stack: Stack
    token: str
    server_id: str
    home: Path  # the agent's --home: where the sites live
    state: Path  # the agent's --state-dir
    folder: Path  # the session's folder for the services (each in a subfolder)
    layout_file: Path
    agent: AgentProcess
    nginx: Nginx | None = None
    php: PhpFpm | None = None  # the newest PHP version's FPM (the sites' default); None: no PHP-FPM installed
    php_versions: dict[str, PhpFpm] = field(default_factory=dict)  # every installed version's, oldest first
    layout: dict[str, Any] = field(default_factory=dict)

    def site_logs(self, domain: str) -> Path:
        """The folder of a site's logs (the layout's ``system.sites_log_dir``: root's, outside the site)."""
        return Path(self.layout["system"]["sites_log_dir"]) / domain.replace(".", "-")

    def http(self) -> httpx.Client:
        return self.stack.http(self.token)

    def configure(self, section: str, values: dict[str, Any]) -> None:
        """Add (or replace) one section of the agent's host layout (`agent.jobs.toolkit.host.HostLayout`)."""
        self.layout[section] = values
        temporary = self.layout_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.layout, indent=2))
        os.replace(temporary, self.layout_file)

    def get(self, host: str, path: str = "/") -> httpx.Response:
        """`path` of the site `host`, through the session's nginx (its server block picks it by Host)."""
        assert self.nginx is not None
        return httpx.get(self.nginx.url(path), headers={"Host": host}, timeout=10)

    def put_page(self, domain: str, name: str, text: str) -> None:
        """A file in the site's public_html, owned by the site's user (as its own upload would be)."""
        path = self.home / domain.replace(".", "-") / "public_html" / name
        path.write_text(text)
        owner = pwd.getpwnam(domain.replace(".", "-"))
        os.chown(path, owner.pw_uid, owner.pw_gid)

    def post(self, kind: str, **args: Any) -> httpx.Response:
        with self.http() as http:
            return http.post(f"/v1/servers/{self.server_id}/jobs", json={"kind": kind, "args": args})

    def run(self, kind: str, **args: Any) -> JobRun:
        """Run a job through the API and wait for its end (the whole stream, to `exit`)."""
        answer = self.post(kind, **args)
        assert answer.status_code == 201, f"{kind} {args}: {answer.status_code} {answer.text}"
        return self.wait(answer.json()["id"])

    def wait(self, job_id: str) -> JobRun:
        stdout: list[str] = []
        stderr: list[str] = []
        parser = SSEParser()
        with httpx.Client(base_url=self.stack.base_url, timeout=JOB_TIMEOUT_S) as http:
            headers = {"Authorization": f"Bearer {self.token}"}
            with http.stream("GET", f"/v1/jobs/{job_id}/stream", headers=headers) as stream:
                assert stream.status_code == 200, stream.read().decode()
                for chunk in stream.iter_bytes():
                    for event in parser.feed(chunk):
                        if event.event == "line":
                            (stdout if event.data["stream"] == "stdout" else stderr).append(event.data["text"])
                        elif event.event == "exit":
                            return JobRun(self.job(job_id), stdout, stderr)
        raise AssertionError(f"the stream of job {job_id} ended without its exit event")

    def job(self, job_id: str) -> dict[str, Any]:
        with self.http() as http:
            answer = http.get(f"/v1/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        record: dict[str, Any] = answer.json()
        return record


def start_hosting(stack: Stack, folder: Path) -> Hosting:
    """The org, its hosting server and the server's agent, with the session's own nginx and
    PHP-FPM (stopped with `stop_hosting`)."""
    hosting = start_server(stack, folder)
    try:
        hosting.nginx = start_nginx(hosting.folder / "nginx")
        hosting.configure("nginx", hosting.nginx.layout())
        for version in php_fpm_versions():
            hosting.php = hosting.php_versions[version] = start_php_fpm(hosting.folder / "php", version)
        if hosting.php is not None:
            hosting.configure("php", hosting.php.layout())
    except BaseException:
        stop_hosting(hosting)
        raise
    return hosting


def start_server(stack: Stack, folder: Path, layout: dict[str, Any] | None = None) -> Hosting:
    """An org of its own, its full server and the server's agent, whose host layout file holds
    `layout` (stopped with `stop_hosting`)."""
    token = stack.new_owner("hosting")
    with stack.http(token) as http:
        created = http.post("/v1/servers", json={"name": "web-1", "kind": "full"})
    assert created.status_code == 201, created.text
    server_id, agent_token = created.json()["server"]["id"], created.json()["agent_token"]
    home, state, services = folder / "home", folder / "state", folder / "services"
    for made in (home, state, services):
        made.mkdir(parents=True)
    home.chmod(0o755)  # the sites' users and the web server's workers go through it
    services.chmod(0o755)  # the sites' users reach their log folders beneath it
    layout = dict(layout or {})  # the sites' logs in the session's folder, never in /var/log
    layout["system"] = {"sites_log_dir": str(services / "site-logs"), **layout.get("system", {})}
    layout_file = folder / "host-layout.json"
    layout_file.write_text(json.dumps(layout, indent=2))
    agent = AgentProcess(stack, server_id, agent_token, home, state, "--host-layout", str(layout_file), api_token=token)
    return Hosting(stack, token, server_id, home, state, services, layout_file, agent, layout=layout)


def stop_hosting(hosting: Hosting) -> None:
    hosting.agent.stop()
    for fpm in hosting.php_versions.values():
        stop_php_fpm(fpm)
    if hosting.nginx is not None:
        stop_nginx(hosting.nginx)
    left = remove_site_users(hosting.home)
    assert left == [], f"sites left behind by the tests (their users are removed now): {left}"


def remove_site_users(home: Path) -> list[str]:
    """Remove the system users (and their crontabs) whose home is under `home`: the sites a test
    did not delete, e.g. because it failed half-way. Their names."""
    found = [entry.pw_name for entry in pwd.getpwall() if Path(entry.pw_dir).is_relative_to(home)]
    for name in found:
        subprocess.run(["crontab", "-u", name, "-r"], capture_output=True, check=False)
        subprocess.run(["userdel", name], capture_output=True, check=False)
    return found


class ModuleSites:
    """The sites a test module makes (`domain`), deleted with their users at the module's end
    (`delete_left`): the ones a test left, because it failed half-way or on purpose."""

    def __init__(self) -> None:
        self.created: list[str] = []

    def domain(self, prefix: str = "s") -> str:
        """A new domain, of a site this module will make."""
        made = f"{prefix}{secrets.token_hex(4)}.example.test"
        self.created.append(made)
        return made

    def delete_left(self, hosting: Hosting, *, strict: bool) -> None:
        """Delete what is left of the module's sites (each delete must succeed when `strict`)."""
        left = {site["domain"] for site in hosting.run("site.list").ok().result["sites"]}
        for domain in self.created:
            if domain in left:
                run = hosting.run("site.delete", domain=domain)
                if strict:
                    run.ok()
            subprocess.run(["userdel", domain.replace(".", "-")], capture_output=True, check=False)
