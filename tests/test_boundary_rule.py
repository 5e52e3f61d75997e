"""The boundary rule, read from the job handlers' code: no root code in ``agent/jobs`` opens,
copies, moves, chmods, lists or deletes a path inside a tree a site user can write by its name.

The rule, precisely (docs/security.md says why):

- **Anchors** are the folders of those trees themselves: ``<ctx>.home`` (any attribute named
  ``home``: the agent's home, a site's or a user's home) and ``<ctx>.site_home(...)``. An anchor is
  an entry of a root-owned folder, so its name cannot be swapped by the user; stat-like calls and
  ``os.open`` (to hold it as a descriptor) may take it, nothing else of the forbidden set below.
- **Paths beneath** an anchor are built from one: ``os.path.join(anchor, ...)``, an f-string or a
  ``+`` / ``/`` with one in it, ``Path(...)`` of one. No forbidden call takes such a path.
- Taint follows local assignments (a name, ``self.<attribute>`` in a class, a dataclass field set
  by its constructor), the arguments of calls to functions of ``agent.jobs`` (their parameters,
  across modules, and ``trio.to_thread.run_sync(f, *args)`` as ``f(*args)``) and what such a
  function returns. It does not follow a descriptor: a name opened beneath a held descriptor
  (``dir_fd=``) is the boundary's own way.
- The forbidden calls: `FORBIDDEN` (``shutil.*``, ``open``, renames, chmod/chown, unlink/rmdir,
  mkdir, links, walks and listings, stat-like checks) and the `PATH_METHODS` of a ``Path`` (and
  ``trio.Path``) of such a path. ``shutil.*`` may not take an anchor either, nor a descriptor
  opened from one.

`ALLOWED` lists the calls proven safe, each with its reason. A second rule: only the boundary
module drops privileges (``extra_groups``), so every command run as a site user gets the same
uid, gid and no supplementary group.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "agent" / "jobs"

FORBIDDEN = frozenset(
    {
        "open",
        "io.open",
        "os.open",
        "os.rename",
        "os.renames",
        "os.replace",
        "os.chmod",
        "os.chown",
        "os.lchown",
        "os.unlink",
        "os.remove",
        "os.rmdir",
        "os.removedirs",
        "os.mkdir",
        "os.makedirs",
        "os.link",
        "os.symlink",
        "os.truncate",
        "os.utime",
        "os.walk",
        "os.fwalk",
        "os.scandir",
        "os.listdir",
        "os.stat",
        "os.lstat",
        "os.access",
        "os.readlink",
        "os.path.exists",
        "os.path.lexists",
        "os.path.isdir",
        "os.path.isfile",
        "os.path.islink",
        "os.path.realpath",
        "os.path.getsize",
        "os.path.getmtime",
        "glob.glob",
        "glob.iglob",
        "tempfile.NamedTemporaryFile",
        "tempfile.TemporaryDirectory",
        "tempfile.mkstemp",
        "tempfile.mkdtemp",
    }
)
# What an anchor itself may be given to (the folder's own entry, in a root-owned folder).
ANCHOR_SAFE = frozenset(
    {"os.open", "os.stat", "os.lstat", "os.path.exists", "os.path.lexists", "os.path.isdir", "exists", "is_dir"}
)
PATH_METHODS = frozenset(
    {
        "open",
        "read_text",
        "read_bytes",
        "write_text",
        "write_bytes",
        "unlink",
        "rmdir",
        "mkdir",
        "chmod",
        "lchmod",
        "touch",
        "rename",
        "replace",
        "iterdir",
        "glob",
        "rglob",
        "exists",
        "is_dir",
        "is_file",
        "is_symlink",
        "stat",
        "lstat",
        "symlink_to",
        "hardlink_to",
        "readlink",
        "resolve",
    }
)
PATH_BUILDERS = frozenset(
    {"os.path.join", "os.path.normpath", "os.path.abspath", "os.path.realpath", "os.path.dirname", "Path", "PurePath"}
)
# Methods whose result carries the taint of their receiver (a mapping of homes, a string of a path).
CARRIERS = frozenset({"items", "values", "get", "pop", "copy", "strip", "rstrip", "removeprefix", "removesuffix"})

# (file relative to the repository, function, call) -> why the call is safe. Empty today: every
# handler goes through the boundary; an anchor's own metadata is allowed by the rule (ANCHOR_SAFE).
ALLOWED: dict[tuple[str, str, str], str] = {}

# Where privileges are dropped for a site user's commands: the one helper (`boundary.as_user`), and
# the runner of every child, which gives a child run as an account that account's groups alone
# (`proc.child_identity`: a `user` without them would keep root's).
PRIVILEGE_DROPPERS = frozenset({"agent/jobs/toolkit/boundary.py", "agent/jobs/toolkit/proc.py"})
RUNNERS = frozenset({"stream_command", "capture_command", "run_process", "open_process", "Popen", "run"})

ANCHOR, BENEATH, DESCRIPTOR = 1, 2, 3  # how a value is tainted (0: not at all)


@dataclass
class Function:
    module: str  # agent.jobs.site.lifecycle
    qualname: str  # _copy_tree, SiteGit.options
    node: ast.FunctionDef | ast.AsyncFunctionDef
    cls: str | None = None
    params: list[str] = field(default_factory=list)
    tainted: dict[str, int] = field(default_factory=dict)  # parameter -> taint
    returns: int = 0


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted target


@dataclass(frozen=True)
class Finding:
    file: str
    function: str
    line: int
    call: str
    why: str

    @property
    def key(self) -> tuple[str, str, str]:
        return self.file, self.function, self.call

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}: {self.call} {self.why}"


def dotted(node: ast.expr) -> str | None:
    """``os.path.join`` for the expression naming it, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


class Program:
    """Every module of agent/jobs, its functions and classes, and the taint of their parameters."""

    def __init__(self, root: Path, base: Path) -> None:
        self.base = base  # what module names and file names are relative to
        self.modules: dict[str, Module] = {}
        self.functions: dict[tuple[str, str], Function] = {}
        self.classes: dict[tuple[str, str], list[str]] = {}  # constructor parameters, in order
        self.class_taint: dict[tuple[str, str], dict[str, int]] = {}  # self.<attr> -> taint
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            name = ".".join(rel.parts).removesuffix(".__init__")
            module = Module(name, path, ast.parse(path.read_text(encoding="utf-8")))
            self.modules[name] = module
            self._index(module)

    def _index(self, module: Module) -> None:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    module.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    module.imports[alias.asname or alias.name.split(".")[0]] = alias.name.split(".")[0]
        for node in module.tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self._add_function(module, node, None)
            elif isinstance(node, ast.ClassDef):
                fields = [
                    item.target.id
                    for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                ]
                self.classes[(module.name, node.name)] = fields
                self.class_taint[(module.name, node.name)] = {}
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        function = self._add_function(module, item, node.name)
                        if item.name == "__init__":
                            self.classes[(module.name, node.name)] = function.params[1:]

    def _add_function(self, module: Module, node: ast.FunctionDef | ast.AsyncFunctionDef, cls: str | None) -> Function:
        qualname = f"{cls}.{node.name}" if cls else node.name
        args = node.args
        params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
        function = Function(module.name, qualname, node, cls, params)
        self.functions[(module.name, qualname)] = function
        return function

    def resolve(self, module: Module, func: ast.expr, cls: str | None) -> Function | tuple[str, str] | None:
        """The function (or class) of `module` a call's `func` names, when it is one of agent.jobs."""
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" and cls:
            return self.functions.get((module.name, f"{cls}.{func.attr}"))
        name = dotted(func)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        target = module.imports.get(head)
        full = f"{module.name}.{name}" if target is None else f"{target}.{rest}".rstrip(".")
        owner, _, leaf = full.rpartition(".")
        if (owner, leaf) in self.functions:
            return self.functions[(owner, leaf)]
        if (owner, leaf) in self.classes:
            return owner, leaf
        return None


class Analysis(ast.NodeVisitor):
    """One pass over a function (or a module's top level) with the taint of its names."""

    def __init__(self, program: Program, module: Module, function: Function | None, findings: list[Finding]) -> None:
        self.program = program
        self.module = module
        self.function = function
        self.cls = function.cls if function else None
        self.names: dict[str, int] = dict(function.tainted) if function else {}
        self.findings = findings
        self.changed = False
        self.returns = 0

    # --- taint of an expression -----------------------------------------------------------------

    def taint(self, node: ast.expr | None) -> int:
        if node is None:
            return 0
        if isinstance(node, ast.Name):
            return self.names.get(node.id, 0)
        if isinstance(node, ast.Attribute):
            if node.attr == "home":
                return ANCHOR
            if isinstance(node.value, ast.Name) and node.value.id == "self" and self.cls:
                return self.program.class_taint[(self.module.name, self.cls)].get(node.attr, 0)
            return 0
        if isinstance(node, ast.Call):
            return self.call_taint(node)
        if isinstance(node, ast.JoinedStr):
            return BENEATH if any(self.taint(v) for v in node.values) else 0
        if isinstance(node, ast.FormattedValue):
            return self.taint(node.value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Div | ast.Mod):
            return BENEATH if max(self.taint(node.left), self.taint(node.right)) in (ANCHOR, BENEATH) else 0
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return max((self.taint(e) for e in node.elts), default=0)
        if isinstance(node, ast.Dict):
            return max((self.taint(v) for v in node.values), default=0)
        if isinstance(node, ast.DictComp):
            return self.taint(node.value)
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
            return self.taint(node.elt)
        if isinstance(node, ast.IfExp):
            return max(self.taint(node.body), self.taint(node.orelse))
        if isinstance(node, ast.Subscript):
            return self.taint(node.value)
        if isinstance(node, ast.Await):
            return self.taint(node.value)
        if isinstance(node, ast.Starred):
            return self.taint(node.value)
        return 0

    def call_taint(self, node: ast.Call) -> int:
        name = dotted(node.func)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "site_home":
            return ANCHOR
        args = [self.taint(a) for a in node.args]
        if name in PATH_BUILDERS or (name or "").endswith("Path") or name == "trio.Path":
            if not args:
                return 0
            if name == "os.path.join" and len(node.args) > 1 and max(args[1:]) in (ANCHOR, BENEATH):
                return BENEATH
            if name == "os.path.join" and len(node.args) > 1 and args[0] in (ANCHOR, BENEATH):
                return BENEATH
            return max(args) if max(args) in (ANCHOR, BENEATH) else 0
        if name == "os.open" and args and args[0]:
            return DESCRIPTOR
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("joinpath", "with_name", "with_suffix"):
            base = self.taint(node.func.value)
            return BENEATH if base in (ANCHOR, BENEATH) else 0
        if isinstance(node.func, ast.Attribute) and node.func.attr in CARRIERS:
            return self.taint(node.func.value)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "format":
            return BENEATH if any(a in (ANCHOR, BENEATH) for a in args) else 0
        target = self.program.resolve(self.module, node.func, self.cls)
        if isinstance(target, Function):
            return target.returns
        return 0

    # --- statements ---------------------------------------------------------------------------

    def assign(self, target: ast.expr, value: int) -> None:
        if isinstance(target, ast.Name):
            self.names[target.id] = value  # in the order of the code: a name given a new value loses the old
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self.assign(element, value)
        elif isinstance(target, ast.Starred):
            self.assign(target.value, value)
        elif (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
            and self.cls
        ):
            attrs = self.program.class_taint[(self.module.name, self.cls)]
            if value > attrs.get(target.attr, 0):
                attrs[target.attr] = value
                self.changed = True

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        value = self.taint(node.value)
        for target in node.targets:
            self.assign(target, value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.generic_visit(node)
        if node.value is not None:
            self.assign(node.target, self.taint(node.value))

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.generic_visit(node)
        self.assign(node.target, self.taint(node.value))

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.generic_visit(node)
        self.assign(node.target, self.taint(node.value))

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.assign(node.target, self.taint(node.iter))
        self.generic_visit(node)

    visit_AsyncFor = visit_For

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            if item.optional_vars is not None:
                self.assign(item.optional_vars, self.taint(item.context_expr))
        self.generic_visit(node)

    visit_AsyncWith = visit_With

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self.assign(node.target, self.taint(node.iter))
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        self.generic_visit(node)
        self.returns = max(self.returns, self.taint(node.value))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if self.function is not None and node is self.function.node:
            self.generic_visit(node)
            return
        if self.function is None:
            return  # a module-level function has its own analysis
        self.generic_visit(node)  # a nested function (or a lambda) sees its parent's names

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if self.function is not None:
            self.generic_visit(node)

    # --- calls --------------------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        func, args, keywords = node.func, list(node.args), list(node.keywords)
        if dotted(func) in ("trio.to_thread.run_sync", "anyio.to_thread.run_sync") and args:
            func, args = args[0], args[1:]
            keywords = [k for k in keywords if k.arg not in ("abandon_on_cancel", "limiter", "cancellable")]
        self.check(node, func, args, keywords)
        self.flow(func, args, keywords)

    def check(self, node: ast.Call, func: ast.expr, args: list[ast.expr], keywords: list[ast.keyword]) -> None:
        name = dotted(func) or ""
        if isinstance(func, ast.Attribute) and func.attr in PATH_METHODS and not name.startswith(("os.", "shutil.")):
            level = self.taint(func.value)
            receiver = func.value
            is_path = isinstance(receiver, ast.Call) and (dotted(receiver.func) or "").endswith("Path")
            if level == BENEATH or (level == ANCHOR and is_path and func.attr not in ANCHOR_SAFE):
                self.report(node, f"Path.{func.attr}", f"on {ast.unparse(receiver)}, a path in a user's tree")
            return
        if name.startswith("shutil."):
            levels = [self.taint(a) for a in args] + [self.taint(k.value) for k in keywords]
            if any(levels):
                self.report(node, name, "on a user's tree (by name, as root)")
            return
        if name not in FORBIDDEN:
            return
        paths = args[:1] + [k.value for k in keywords if k.arg in ("path", "src", "dst", "file", "top")]
        for arg in paths + args[1:2] * (name in ("os.rename", "os.replace", "os.link", "os.symlink")):
            level = self.taint(arg)
            if level == BENEATH or (level == ANCHOR and name not in ANCHOR_SAFE):
                self.report(node, name, "on a path in a user's tree")
                return

    def report(self, node: ast.Call, call: str, why: str) -> None:
        file = str(self.module.path.relative_to(self.program.base))
        where = self.function.qualname if self.function else "<module>"
        self.findings.append(Finding(file, where, node.lineno, call, why))

    def flow(self, func: ast.expr, args: list[ast.expr], keywords: list[ast.keyword]) -> None:
        """Carry the taint of the arguments into the parameters of a function of agent.jobs."""
        target = self.program.resolve(self.module, func, self.cls)
        if target is None:
            return
        if isinstance(target, Function):
            params = target.params[1:] if target.cls and isinstance(func, ast.Attribute) else target.params
            if target.cls and not isinstance(func, ast.Attribute):
                params = target.params[1:]
            taints = target.tainted
        else:
            params = self.program.classes[target]
            taints = self.program.class_taint[target]
        pairs = list(zip(params, args, strict=False)) + [(k.arg, k.value) for k in keywords if k.arg]
        for param, arg in pairs:
            level = self.taint(arg)
            if level and level > taints.get(param, 0):
                taints[param] = level
                self.changed = True


def analyse(root: Path = JOBS, base: Path = ROOT) -> list[Finding]:
    """The forbidden calls of the modules beneath `root` (names relative to `base`)."""
    program = Program(root, base)
    for _ in range(50):  # to a fixpoint: parameters and returns only ever gain taint
        findings: list[Finding] = []
        changed = False
        for module in program.modules.values():
            top = Analysis(program, module, None, findings)
            top.visit(module.tree)
            changed |= top.changed
        for function in program.functions.values():
            module = program.modules[function.module]
            # a constructor's tainted parameters are its class's fields
            if function.cls and function.qualname.endswith(".__init__"):
                attrs = program.class_taint[(function.module, function.cls)]
                for param, level in attrs.items():
                    if level > function.tainted.get(param, 0):
                        function.tainted[param] = level
                        changed = True
            for _pass in range(2):  # loops: a name tainted late in the body
                run = Analysis(program, module, function, [])
                run.visit(function.node)
                changed |= run.changed
            run = Analysis(program, module, function, findings)
            run.visit(function.node)
            if run.returns > function.returns:
                function.returns = run.returns
                changed = True
            changed |= run.changed
        if not changed:
            return sorted(set(findings), key=lambda f: (f.file, f.line, f.call))
    raise AssertionError("the taint analysis did not settle")


def _privilege_drops() -> Iterator[str]:
    for path in sorted(JOBS.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in PRIVILEGE_DROPPERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and (dotted(node.func) or "").rpartition(".")[2] in RUNNERS:
                for keyword in node.keywords:
                    if keyword.arg in ("extra_groups", "user", "group", "preexec_fn"):
                        yield f"{rel}:{node.lineno}: {keyword.arg}="
            if isinstance(node, ast.Constant) and node.value == "extra_groups":
                yield f"{rel}:{node.lineno}: 'extra_groups'"


# --- the tests ---------------------------------------------------------------------------------


def test_no_handler_touches_a_users_tree_by_name() -> None:
    """Every forbidden call found is an allowed one, and every allowance still has its call (one
    whose call went away goes with it: the list stays the proven few)."""
    found = analyse()
    findings = [f for f in found if f.key not in ALLOWED]
    assert not findings, "go through agent.jobs.toolkit.boundary instead:\n" + "\n".join(map(str, findings))
    assert not set(ALLOWED) - {f.key for f in found}, sorted(set(ALLOWED) - {f.key for f in found})


# The rule itself, on code that breaks it in each way it knows (and on code that keeps it).
BREAKING = """
import os
import shutil
from pathlib import Path

import trio


def _copy(ctx, slug, target):
    shutil.copytree(ctx.site_home(slug), target)


def _remove(home, slug):
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    shutil.rmtree(slug, dir_fd=fd)


async def _delete(ctx, site):
    await trio.to_thread.run_sync(_remove, ctx.home, site.slug)


class Runner:
    def __init__(self, ctx, site):
        self.folder = ctx.site_home(site.slug)

    def read(self):
        with open(os.path.join(self.folder, "logs", "a.log")) as f:
            return f.read()


def _page(ctx, slug):
    return (Path(ctx.site_home(slug)) / "index.html").read_text()


def _where(ctx, slug, name):
    return f"{ctx.site_home(slug)}/{name}"


def _chmod(ctx, slug, name):
    os.chmod(_where(ctx, slug, name), 0o600)


def _fine(ctx, slug, dir_fd):
    os.lstat(ctx.site_home(slug))  # the anchor's own entry
    os.mkdir("uploads", dir_fd=dir_fd)  # a name beneath a held descriptor
    path = os.path.join(ctx.site_home(slug), "x")
    path = os.path.join(ctx.state_dir, "y")  # a name given a new value loses the old
    os.unlink(path)
"""


def test_the_rule_finds_each_way_of_breaking_it(tmp_path: Path) -> None:
    jobs = tmp_path / "agent" / "jobs"
    jobs.mkdir(parents=True)
    (jobs / "bad.py").write_text(BREAKING)
    found = {(f.function, f.call) for f in analyse(jobs, tmp_path)}
    assert found == {
        ("_copy", "shutil.copytree"),
        ("_remove", "shutil.rmtree"),
        ("Runner.read", "open"),
        ("_page", "Path.read_text"),
        ("_chmod", "os.chmod"),
    }


def test_only_the_boundary_drops_privileges() -> None:
    assert not list(_privilege_drops()), list(_privilege_drops())
