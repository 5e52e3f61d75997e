"""Split the test modules that mixed job domains into one module per domain (issue 24 point 7).

Each test function of a mixed module goes, with its decorators and the comments above it, to the
module of its domain (`tests/agent/jobs/test_<domain>.py`, named as `agent/jobs/<domain>`), and
takes along what it uses of its old module: the fixtures, helpers and constants it names (at any
depth), every autouse fixture and `pytestmark`, and the old module's imports (ruff then drops those
it does not use and sorts them). A target that exists already keeps its own text and gets the
tests appended; a helper both define must be the same text, or the split stops. The old module is
removed once all its tests have gone.

Run from the repository's root, after scripts/test_layout_moves.sh: it is what made the split
commits, so a merge that brought new tests into a mixed module can be split again by running it on
that module's merged text (`python scripts/test_layout_split.py`; a module already split is
skipped). Then `ruff format tests` and collect. Not redone here: test_agent_jobs.py's harness went
to tests/helpers/agent_jobs.py (its `env` fixture to tests/conftest.py) by hand, before its split.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REST = "*"  # the tests no other target of the split names


@dataclass
class Target:
    path: str
    tests: list[str] | str  # test function names, or REST
    docstring: str = ""  # a new module's; an existing one keeps its own, with this paragraph if it starts with +


@dataclass
class Split:
    source: str
    targets: list[Target] = field(default_factory=list)


@dataclass
class Piece:
    node: ast.stmt
    text: str
    defines: set[str]
    uses: set[str]
    index: int = 0  # its place in its module

    @property
    def is_simple(self) -> bool:
        return not isinstance(self.node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)


def _joined(pieces: list[Piece]) -> str:
    """The pieces as a module's text: simple statements that were neighbours stay on neighbouring
    lines, and two blank lines go around each definition."""
    text = ""
    for before, piece in zip([None, *pieces], pieces, strict=False):
        if before is not None:
            adjacent = before.is_simple and piece.is_simple and piece.index == before.index + 1
            text += "\n" if adjacent else "\n\n\n"
        text += piece.text
    return text


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _used(node: ast.stmt) -> set[str]:
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):  # fixtures are named by parameters
        names |= {a.arg for a in node.args.args + node.args.kwonlyargs}
    for call in ast.walk(node):  # fixtures named as strings
        named = isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
        if named and call.func.attr in ("usefixtures", "getfixturevalue"):  # type: ignore[attr-defined]
            names |= {a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}  # type: ignore[attr-defined]
    return names


def _is_always_taken(piece: Piece) -> bool:
    """Autouse fixtures and `pytestmark` act without being named, and a statement that defines no
    name is code the module runs: each part of the split keeps them."""
    if "pytestmark" in piece.defines or not piece.defines:
        return True
    node = piece.node
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return any(
            isinstance(kw.value, ast.Constant) and kw.arg == "autouse" and kw.value.value is True
            for d in node.decorator_list
            if isinstance(d, ast.Call)
            for kw in d.keywords
        )
    return False


def _pieces(text: str) -> tuple[str, list[Piece], list[Piece]]:
    """The module's docstring, its import statements and its other top-level statements, each with
    the comments above it."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    body = tree.body
    docstring = ""
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        docstring = "".join(lines[: body[0].end_lineno])
        body = body[1:]
    imports: list[Piece] = []
    others: list[Piece] = []
    previous_end = len(docstring.splitlines())
    for index, node in enumerate(body):
        assert node.end_lineno is not None
        text_of_node = "".join(lines[previous_end : node.end_lineno]).strip("\n")
        piece = Piece(node, text_of_node, _defined(node), _used(node), index)
        previous_end = node.end_lineno
        (imports if isinstance(node, ast.Import | ast.ImportFrom) else others).append(piece)
    return docstring, imports, others


def _is_test(piece: Piece) -> bool:
    return isinstance(piece.node, ast.FunctionDef | ast.AsyncFunctionDef) and piece.node.name.startswith("test_")


def _with_what_they_use(tests: list[Piece], helpers: list[Piece]) -> list[Piece]:
    """The helpers `tests` need, transitively, in the module's order, then the tests."""
    taken = [h for h in helpers if _is_always_taken(h)]
    needed = set().union(*(p.uses for p in tests + taken)) if tests else set()
    grew = True
    while grew:
        grew = False
        for helper in helpers:
            if helper not in taken and helper.defines & needed:
                taken.append(helper)
                needed |= helper.uses
                grew = True
    return [h for h in helpers if h in taken] + tests


def _bound(node: ast.stmt) -> dict[str, str]:
    """The names an import statement binds, each with what it imports."""
    if isinstance(node, ast.ImportFrom):
        return {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
    if isinstance(node, ast.Import):
        return {a.asname or a.name.split(".")[0]: a.name for a in node.names}
    return {}


def _imports_beside(own: list[Piece], imports: list[Piece], added: list[Piece]) -> str:
    """The old module's imports for a module that has its own: a name the target binds already is
    left out, unless the tests it gets need that name for something else (then the split stops)."""
    taken = {name: what for piece in own for name, what in _bound(piece.node).items()}
    taken |= {name: "the target's own" for piece in own for name in piece.defines}
    needed = set().union(*(p.uses for p in added)) if added else set()
    kept: list[str] = []
    for piece in imports:
        clash = {name for name, what in _bound(piece.node).items() if taken.get(name, what) != what}
        if clash & needed:
            raise SystemExit(f"{sorted(clash & needed)} mean something else in the target: merge by hand")
        node = piece.node
        if clash and isinstance(node, ast.ImportFrom):
            node = ast.ImportFrom(node.module, [a for a in node.names if (a.asname or a.name) not in clash], node.level)
            kept += [ast.unparse(node)] if node.names else []
        else:
            kept.append(piece.text)
    return "\n".join(kept)


def _write(target: Target, imports: list[Piece], pieces: list[Piece]) -> None:
    path = ROOT / target.path
    import_text = "\n".join(p.text for p in imports)
    if not path.exists():
        assert target.docstring, f"{target.path} is new: its split needs a docstring"
        parts = [f'"""{target.docstring}"""', import_text, _joined(pieces)]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n\n\n".join(parts) + "\n")
        return
    docstring, own_imports, own = _pieces(path.read_text())
    if target.docstring.startswith("+"):  # a paragraph on what it now tests too
        docstring = docstring.rstrip().removesuffix('"""').rstrip() + "\n\n" + target.docstring[1:].strip() + '"""'
    elif target.docstring:
        docstring = f'"""{target.docstring}"""'
    own_by_name = {name: p for p in own for name in p.defines}
    added: list[Piece] = []
    for piece in pieces:
        same = [own_by_name[name] for name in piece.defines if name in own_by_name]
        if not same:
            added.append(piece)
        elif any(p.text != piece.text for p in same):
            raise SystemExit(f"{target.path} defines {sorted(piece.defines)} otherwise: merge it by hand")
    if "pytestmark" not in own_by_name and any("pytestmark" in p.defines for p in added):
        raise SystemExit(f"{target.path} has no pytestmark: give the tests it gets their marks by hand")
    parts = [
        docstring.strip("\n"),
        "\n".join(p.text for p in own_imports) + "\n" + _imports_beside(own_imports + own, imports, added),
    ]
    parts += [_joined(own), _joined(added)] if added else [_joined(own)]
    path.write_text("\n\n\n".join(parts) + "\n")


def prepare(path: str, old: str, new: str) -> None:
    """An edit a module needs before its split (a path it took from its own place, a fixture that
    must read as its target's does), made only where the old text still is."""
    module = ROOT / path
    if module.exists() and old in module.read_text():
        module.write_text(module.read_text().replace(old, new))


def split(spec: Split) -> None:
    source = ROOT / spec.source
    if not source.exists():
        print(f"{spec.source}: split already")
        return
    _, imports, others = _pieces(source.read_text())
    tests = {p.node.name: p for p in others if _is_test(p)}  # type: ignore[attr-defined]
    helpers = [p for p in others if not _is_test(p)]
    named = {name for t in spec.targets if t.tests != REST for name in t.tests}
    unknown = named - tests.keys()
    if unknown:
        raise SystemExit(f"{spec.source} has no {sorted(unknown)}")
    for target in spec.targets:
        names = [n for n in tests if n not in named] if target.tests == REST else list(target.tests)
        chosen = [tests[n] for n in tests if n in names]  # the module's order
        if chosen:
            _write(target, imports, _with_what_they_use(chosen, helpers))
            print(f"{spec.source} -> {target.path}: {len(chosen)} tests")
    subprocess.run(["git", "rm", "-q", "-f", spec.source], cwd=ROOT, check=True)
    changed = [t.path for t in spec.targets if (ROOT / t.path).exists()]
    ruff = [sys.executable, "-m", "ruff", "check", "-q", "--fix", "--select", "I,F401,F811", *changed]
    subprocess.run(ruff, cwd=ROOT, check=False)
    subprocess.run([sys.executable, "-m", "ruff", "format", "-q", *changed], cwd=ROOT, check=True)
    subprocess.run(["git", "add", *changed], cwd=ROOT, check=True)


J = "tests/agent/jobs/"
RECORDED_TOO = """+Its readers of tool output are tested on recorded output too (tests/data/tool_output/): they
run where the tool is absent, and cover what a live machine rarely shows."""
SPLITS: list[Split] = [
    Split(
        "tests/test_jobs_services.py",
        [
            Target(
                J + "test_daemon.py",
                [
                    "test_a_daemon_runs_as_the_site_user_in_its_folder_and_creating_it_again_says_so",
                    "test_changing_a_daemon_restarts_it_in_its_new_folder",
                    "test_a_bad_command_or_folder_is_refused_before_anything_is_written",
                    "test_a_configuration_supervisor_cannot_read_stops_the_change_before_it_is_written",
                    "test_stop_start_and_restart_a_daemon",
                    "test_a_daemons_logs_show_what_it_printed",
                    "test_the_list_shows_each_daemon_with_its_processes",
                    "test_deleting_a_daemon_stops_it_and_removes_its_files",
                    "test_deleting_a_site_stops_and_removes_its_daemons",
                ],
                """The daemon kinds through the API against the hosting server's real root agent.

Daemons run under the session's own supervisord (its own socket, pid file, log and ``conf.d``
under the hosting folder); each test checks the processes themselves in /proc.
""",
            ),
            Target(
                J + "test_service.py",
                REST,
                """The service kinds through the API against the hosting server's real root agent.

Services are the Debian init scripts (PID 1 is not systemd here; the systemd path is
tests/agent/jobs/toolkit/test_host_systemd.py): start, stop, restart, reload, enable and disable
act for real on supervisor's own init script, whose state and rc.d links are put back afterwards.
""",
            ),
        ],
    ),
    Split(
        "tests/test_jobs_sysops.py",
        [
            Target(
                J + "test_storage.py",
                [
                    "test_usage_drills_down_and_largest_finds_the_biggest_files",
                    "test_disks_and_inodes_match_statvfs",
                    "test_findmnt_trees_are_flattened",
                    "test_cleanup_removes_only_old_rotated_logs_and_the_package_cache",
                ],
                """``storage.*`` through the API against the real root agent, each checked on the real
machine (the files a cleanup removes, the sizes statvfs gives).""",
            ),
            Target(
                J + "test_logs.py",
                [
                    "test_list_search_and_rotate_a_site_log",
                    "test_the_journal_needs_systemd",
                    "test_journal_argv_and_log_times",
                ],
                """``logs.*`` through the API against the real root agent: a site's logs listed, searched
and rotated for real; the journal's argv and times.""",
            ),
            Target(
                J + "test_metrics.py",
                [
                    "test_each_get_records_a_sample_and_history_reads_them",
                    "test_the_agent_samples_on_its_own_and_history_returns_those_samples",
                    "test_alerts_are_stored_evaluated_and_deleted",
                    "test_an_alert_fires_only_when_its_whole_window_is_above",
                ],
                """``metrics.*`` through the API against the real root agent: samples, their history and
alerts.""",
            ),
            Target(
                J + "test_system.py",
                REST,
                """``system.*`` through the API against the real root agent, each checked on the real
machine (the time zone changed and restored, the host name, the swap file...); a member sees the
secrets in other processes' command lines masked, an owner sees them.""",
            ),
        ],
    ),
    Split("tests/test_jobs_command_lines.py", [Target(J + "test_system.py", REST)]),
    Split(
        "tests/test_agent_job_parsers.py",
        [
            Target(
                J + "test_updates.py",
                [
                    "test_upgradable_packages_skip_the_warning_listing_and_notices",
                    "test_no_upgradable_packages",
                    "test_recorded_empty_listing",
                ],
                RECORDED_TOO,
            ),
            Target(
                J + "test_ssl.py",
                [
                    "test_certificate_with_alternative_names",
                    "test_certificate_without_alternative_names_is_named_by_its_common_name",
                    "test_an_unreadable_date_is_kept_as_printed_and_no_name_is_invented",
                    "test_no_openssl_output",
                    "test_alternative_names_header_as_the_last_line",
                ],
                RECORDED_TOO,
            ),
            Target(J + "test_daemon.py", ["test_supervisor_processes_of_each_state"], RECORDED_TOO),
            Target(J + "test_cron.py", ["test_cron_runs_pair_by_key_newest_first"], RECORDED_TOO),
            Target(
                J + "toolkit/test_machine.py",
                [
                    "test_meminfo_in_bytes_and_used_memory",
                    "test_meminfo_without_available_memory_has_no_used_figure",
                ],
                """The machine's readers (`agent.jobs.toolkit.machine`) on recorded output
(tests/data/tool_output/).""",
            ),
            Target(
                J + "test_system.py",
                ["test_os_release_unquotes_and_skips_comments_and_blank_lines", "test_cpu_model"],
                RECORDED_TOO,
            ),
            Target(J + "test_service.py", REST, RECORDED_TOO),
        ],
    ),
    Split(
        "tests/test_agent_jobs.py",
        [
            Target(J + "test_site.py", ["test_site_lifecycle"]),
            Target(J + "test_cron.py", ["test_cron_add_list_pause_run_with_a_real_crontab"]),
            Target(J + "test_logs.py", ["test_logs_tail_of_a_million_lines_counts_right"]),
            Target(J + "test_storage.py", ["test_storage_usage"]),
            Target(J + "test_service.py", ["test_service_status_of_a_real_service"]),
            Target(
                "tests/agent/test_cli.py",
                ["test_python_m_agent_run_site_list", "test_the_agent_command_line_takes_a_structure_as_a_job_does"],
                """``fleetdeck agent run`` (``python -m agent run``): the command line of one job, on a
temporary home (`tests.helpers.agent_jobs`).""",
            ),
            Target(
                J + "toolkit/test_proc.py",
                [
                    "test_line_splitter_handles_chunk_boundaries",
                    "test_a_cancelled_capture_stops_what_is_left_of_the_group",
                    "test_a_tool_run_as_an_account_has_that_accounts_groups_not_roots",
                ],
                """The toolkit's processes (`agent.jobs.toolkit.proc`): output split into lines at any chunk
boundary, a cancelled capture, a tool run as an account.""",
            ),
            Target(
                J + "test_manager.py",
                REST,
                """The job machinery end to end: the job manager (`agent.jobs.manager`) over a real link,
its journal and buffers, cancels, the control plane's runner storing and replaying a real agent's
runs, and read jobs of several domains printing valid JSON; the handlers on a temporary home
(`tests.helpers.agent_jobs`). Needs, on Debian: ``openssl``, ``apt``, ``util-linux``.""",
            ),
        ],
    ),
    Split(
        "tests/test_jobs_malware.py",
        [
            Target(
                J + "test_security.py",
                REST,
                """+``security.scan`` and ``security.scan-report`` against a real ClamAV daemon (Debian's
``clamd``, `tests.helpers.clamd`: the module's own, running as the user clamav), with the test's own
signatures: one hash signature, of the EICAR test file, because the ClamAV signature mirror that
``freshclam`` reads is a boundary these machines cannot reach.""",
            )
        ],
    ),
    Split(
        "tests/test_jobs_deploy_token.py",
        [
            Target(
                J + "test_deploy.py",
                REST,
                """+A deploy token never reaches the site's user: ``deploy.*`` with a token against a real
https git server on loopback (`tests.helpers.git_repos`).""",
            )
        ],
    ),
]

PREPARE = [
    (
        "tests/test_agent_job_parsers.py",
        'RECORDED = Path(__file__).parent / "data" / "tool_output"\n',
        "from tests.helpers.recorded_systemd import RECORDED\n",
    ),
    ("tests/test_jobs_deploy_token.py", 'f"token-{uuid', 'f"deploy-{uuid'),  # the domain fixture of test_deploy
]

if __name__ == "__main__":
    for edit in PREPARE:
        prepare(*edit)
    for one in SPLITS:
        split(one)
