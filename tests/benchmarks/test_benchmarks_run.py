"""Every benchmark runs, so none can rot silently: each module of benchmarks/ (found by listing the
folder, so a new one is covered without editing this file) imports, takes ``--help`` without
running anything, and runs at its smallest size (``--quick``) to its end, its own checks included
(job_stream.py checks that every line arrives as written). Figures at that size mean nothing: this
checks what the benchmarks compute, never how fast. A benchmark that needs a tool this machine
lacks is skipped, saying which."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.helpers.clamd import CLAMD

FOLDER = ROOT / "benchmarks"
BENCHMARKS = sorted(path.stem for path in FOLDER.glob("*.py") if not path.name.startswith("_"))
QUICK_TIMEOUT_S = 600

# What a benchmark needs beyond the project's own packages: the programs it runs.
PROGRAMS = {
    "concurrency": ["wrk"],
    "load_balancers": ["wrk", "nginx", "haproxy"],
    "malware_scan": ["clamscan"],
    "serving": ["wrk"],
}
NEEDS_ROOT = {"concurrency", "jobs", "malware_scan"}  # PostgreSQL's user; site users; clamd's own folder
# What a quick run must print, beside its figures (a benchmark not named here: any figure). A
# figure may have a thousands separator (grep searched at 1,031 MiB/s in one run).
SAYS = {
    "concurrency": r"(?m)^uvicorn, one control plane( +[\d,.]+){3} .*\n^uvicorn, 3 replicas( +[\d,.]+){3} ",
    "job_stream": r"arrived exactly as written: 2,000 of 2,000 lines",
    "malware_scan": r"(?m)^before: .* \d+\.\d\d s .* 30 files\n^after: .* \d+\.\d\d s .* 30 files$",
    "bus": r"NATS \(nats-py\) +round trip p50 .*\n(.*\n)?PostgreSQL NOTIFY +round trip p50",
    "fleet": r"all sizes:",
    "serving": r"(?s)fs/stat p50 \(ms\).*fs/read p50 \(ms\).*stat over an open SSH connection",
    "files": r"loopback TCP .*: +[\d,]+ MiB/s\ndownload 1 MiB \(direct\):.*\ndownload 1 MiB \(relay\):",
    "jobs": r"site\.create +[\d,]+ ms",
    "load_balancers": r"(?m)^nginx .* \d+/20 +\d+/20$\n^HAProxy .* \d+/20 +\d+/20$",  # all the load sent
    "viewer_search": r"viewer / .* [\d,]+ MiB/s +grep -b -m1 -i +[\d,]+ MiB/s\n.*viewer \? .* [\d,]+ MiB/s",
}


def missing(name: str) -> list[str]:
    lacking = [program for program in PROGRAMS.get(name, []) if shutil.which(program) is None]
    if name in NEEDS_ROOT and os.geteuid() != 0:
        lacking.append("root")
    if name == "malware_scan" and CLAMD is None:
        lacking.append("clamd")
    return lacking


def test_the_benchmarks_are_found() -> None:
    assert {"job_stream", "jobs", "fleet", "malware_scan"} <= set(BENCHMARKS)


def test_no_benchmark_loads_the_conftest() -> None:
    """A benchmark starts stacks through tests.helpers; pytest's conftest (fixtures, hooks) is not
    for a program of its own, nor is a test module, so neither the benchmarks nor the helpers they
    use import anything of `tests` but `tests.helpers`."""
    sources = [*FOLDER.glob("*.py"), *(ROOT / "tests" / "helpers").glob("*.py")]
    importing = [
        path.name for path in sources if re.search(r"^\s*(from|import) tests(?!\.helpers\b)\W", path.read_text(), re.M)
    ]
    assert importing == []


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_benchmark_takes_help_without_running(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Imported (no work at import) and asked for --help: argparse answers before any work."""
    module = importlib.import_module(f"benchmarks.{name}")
    with pytest.raises(SystemExit) as ended:
        module.main(["--help"])
    assert ended.value.code == 0
    said = capsys.readouterr()
    assert said.out.startswith("usage:") and "--quick" in said.out, said.out
    assert said.err == ""


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_benchmark_runs_at_its_smallest_size(name: str) -> None:
    lacking = missing(name)
    if lacking:
        pytest.skip(f"benchmarks/{name}.py needs {', '.join(lacking)}")
    done = subprocess.run(
        [sys.executable, str(FOLDER / f"{name}.py"), "--quick"],
        capture_output=True, text=True, timeout=QUICK_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert re.search(r"\d", done.stdout), done.stdout  # it printed its figures
    if name in SAYS:
        assert re.search(SAYS[name], done.stdout), done.stdout
