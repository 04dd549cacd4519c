"""The layout's rules (docs/architecture.md), read from the source: every import of every module of
evalbot/, engine/ and remote/, parsed with ast.

Every import counts for the cycle and layering rules: at module level, inside functions (lazy
loading) and under TYPE_CHECKING. A lazy import hides a cycle from the interpreter, it does not
remove it: the two modules still cannot be understood, tested or moved one without the other.
Only the third-party rules look at module level alone, since a function-level import is how a
heavy dependency is kept off the paths that do not need it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("evalbot", "engine", "remote")

# What each package may import of ours besides itself and the bare top package (its version, its
# path). The flow: trigger (github) -> job store (store) -> worker (service) -> box (evaluation,
# remote) -> harness (engine) -> grade (grading) -> render (report, audit) -> publish (github).
MAY_IMPORT: dict[str, set[str]] = {
    "evalbot.config": set(),
    "evalbot.store": {"evalbot.config", "engine.contract"},  # a migration upgrades results
    # the pure grader's door into the harness: its contract and the rule both sides compute
    # (engine/contract/shared/), never the measuring, the sandbox or a box's I/O
    "evalbot.grading": {"evalbot.config", "engine.contract"},
    "evalbot.audit": {"evalbot.config", "evalbot.grading", "engine.contract"},
    "evalbot.report": {"evalbot.config", "evalbot.store", "evalbot.grading", "evalbot.audit",
                       "engine.contract"},
    "evalbot.evaluation": {"evalbot.config", "evalbot.store", "evalbot.grading", "evalbot.audit",
                           "evalbot.report", "engine", "remote"},
    "evalbot.github": {"evalbot.config", "evalbot.store", "evalbot.grading", "evalbot.report",
                       "engine.contract"},  # the verdict's contract, checked before publishing
    "evalbot.service": {"evalbot.config", "evalbot.store", "evalbot.grading", "evalbot.audit",
                        "evalbot.report", "evalbot.evaluation", "evalbot.github", "engine", "remote"},
    "engine.contract": set(),
    "engine.sandbox": {"engine.contract"},
    "engine.sides": {"engine.contract", "engine.sandbox"},
    "engine.measure": {"engine.contract", "engine.sandbox", "engine.sides"},
    "engine.scoring": {"engine.contract", "engine.sandbox", "engine.sides"},
    "engine.harness": {"engine.contract", "engine.sandbox", "engine.sides", "engine.measure",
                       "engine.scoring"},
    "engine.llamacpp": {"engine.contract", "engine.measure"},
    "engine.sparkinfer": set(),
    "engine.demo": set(),
    "remote": set(),
}
# The one module allowed past its package's rule, and why: the GitHub commands (`evalbot poll`)
# refuse a pool without sandboxes before they queue work for it, as `evalbot serve` does.
EXCEPTIONS = {("evalbot.github.cli", "evalbot.service.pool")}
# Modules whose package is the top of its tree: the CLI and the entry points compose everything.
TOP = {"evalbot.cli", "evalbot.cli_console", "evalbot.lazy_group", "evalbot.__main__", "engine.__main__"}
HEAVY = ("github", "paramiko", "torch", "numpy", "scipy", "matplotlib", "jinja2", "yaml", "rich",
         "waitress", "cryptography", "werkzeug", "evalbot.engine", "evalbot.remote")
# The installed names of the top-level engine/ and remote/ (evalbot/engine -> ../engine): the
# rules below speak of engine.* and remote.*, the bot imports them as evalbot.engine.*.
INSTALLED_AS = ("evalbot.engine", "evalbot.remote")
# A module holds one concept whatever its length (issue 54: a cap of 400 lines split concepts in
# pieces); 800 lines is past any one concept here. The budget that keeps code readable is the
# function's: none longer than a screen and a half.
MAX_LINES = 800
MAX_FUNCTION_LINES = 100


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (or, for `from pkg import name`, pkg.name when a module)
    top_level: bool  # at module level, outside TYPE_CHECKING


def canonical(module: str) -> str:
    """engine.x for evalbot.engine.x (and remote): one name per module of the checkout."""
    for installed in INSTALLED_AS:
        if module == installed or module.startswith(installed + "."):
            return module.removeprefix("evalbot.")
    return module


def module_files() -> dict[str, Path]:
    found = {}
    for top in OURS:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if "template" in rel.parts:  # the demo engine's repository, as data
                continue
            if any((ROOT / Path(*rel.parts[:k])).is_symlink() for k in range(1, len(rel.parts))):
                continue  # evalbot/engine/...: the same file as engine/...
            parts = rel.with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = module_files()


def imports_of(name: str, path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, top_level: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend(Import(name, canonical(a.name), top_level) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = canonical(child.module or "")
                if child.level:
                    up = package.split(".")[:len(package.split(".")) - child.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for a in child.names:
                    full = canonical(f"{base}.{a.name}")
                    found.append(Import(name, full if full in MODULES else base, top_level))
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.dump(child.test):
                visit(child, False)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, False)
            else:
                visit(child, top_level)

    visit(tree, True)
    return found


IMPORTS = [i for name, path in MODULES.items() for i in imports_of(name, path)]


def ours(target: str) -> bool:
    return target.split(".")[0] in OURS


def package_of(module: str) -> str:
    """The rule's key of a module: the longest MAY_IMPORT key it sits in, else its top package."""
    keys = [k for k in MAY_IMPORT if module == k or module.startswith(k + ".")]
    return max(keys, key=len) if keys else module.split(".")[0]


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := walk(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for start in sorted(edges):
        if start not in state and (cycle := walk(start)):
            return cycle
    return None


def test_the_parser_sees_the_imports_it_must() -> None:
    """The rules below are only as good as this parse: known imports of each kind are found."""
    seen = {(i.source, i.target, i.top_level) for i in IMPORTS}
    assert ("engine.contract.job", "engine.contract.sandbox_spec", True) in seen  # from-import
    assert ("engine.sandbox.session", "engine.contract.job", False) in seen  # TYPE_CHECKING
    assert ("evalbot.github.service", "evalbot.github.shadow", False) in seen  # in a function
    assert ("evalbot.evaluation.pipeline", "engine", True) in seen  # `from evalbot import engine`
    assert ("engine.measure.witness", "engine.sandbox.proc", True) in seen  # relative
    assert len(MODULES) > 100 and all(i.source in MODULES for i in IMPORTS)


def test_no_import_cycles_between_modules() -> None:
    edges: dict[str, set[str]] = {}
    for i in IMPORTS:
        if i.target in MODULES and i.target != i.source:
            edges.setdefault(i.source, set()).add(i.target)
    assert find_cycle(edges) is None, f"import cycle: {' -> '.join(find_cycle(edges) or [])}"


def test_engine_imports_itself_only_relatively() -> None:
    """The box runs the harness copy as top-level `engine`, the wheel installs it as
    `evalbot.engine`: an absolute import of either name would break the other."""
    bad = []
    for name, path in MODULES.items():
        if name.startswith("engine"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                         else [])
                bad += [f"{name}: import {n}" for n in names if n.split(".")[0] in OURS]
    assert bad == []


def test_engine_imports_nothing_of_the_bot() -> None:
    """engine/ runs on the box from a bare copy of its tree: evalbot/ and remote/ are not there."""
    bad = [f"{i.source} -> {i.target}" for i in IMPORTS
           if i.source.startswith("engine") and i.target.split(".")[0] in ("evalbot", "remote")]
    assert bad == []


def test_engine_needs_only_the_standard_library_and_numpy() -> None:
    """The box has python and numpy (the demo engine and its reference are numpy programs); the
    root-run sandbox launcher imports the standard library only."""
    stdlib = set(sys.stdlib_module_names)
    bad = []
    for i in IMPORTS:
        top = i.target.split(".")[0]
        if not i.source.startswith("engine") or top in stdlib or top == "engine":
            continue
        if top == "numpy" and i.source != "engine.sandbox.sandbox_exec":
            continue
        bad.append(f"{i.source} -> {i.target}")
    bad += [f"engine.sandbox.sandbox_exec -> {i.target}" for i in IMPORTS
            if i.source == "engine.sandbox.sandbox_exec" and ours(i.target)]
    assert bad == []


def test_each_package_imports_only_what_its_layer_may() -> None:
    bad = []
    for i in IMPORTS:
        if not ours(i.target) or i.target in OURS or i.source in TOP or (i.source, i.target) in EXCEPTIONS:
            continue  # third party, the bare top package (engine.__version__), an entry point
        source, target = package_of(i.source), package_of(i.target)
        allowed = MAY_IMPORT.get(source, set())
        if target != source and target not in allowed and i.target.split(".")[0] not in allowed:
            bad.append(f"{i.source} -> {i.target} ({source} may import "
                       f"{', '.join(sorted(allowed)) or 'nothing of ours'})")
    assert bad == []


def test_every_module_is_in_a_package_with_a_rule() -> None:
    """A new module lands in a package of the layout (or is an entry point), never loose."""
    loose = [m for m in MODULES if m not in TOP and m not in OURS and package_of(m) not in MAY_IMPORT]
    assert loose == []


def test_modules_stay_one_concept_long() -> None:
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_functions_stay_short() -> None:
    long = {f"{m}.{f.name}": n for m, p in MODULES.items() for f in ast.walk(ast.parse(p.read_text()))
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
            and (n := (f.end_lineno or f.lineno) - f.lineno + 1) > MAX_FUNCTION_LINES}
    assert long == {}


@pytest.mark.parametrize("argv", [[], ["--help"]], ids=["import", "help"])
def test_the_cli_loads_no_command_before_it_runs(argv: list[str]) -> None:
    """`evalbot --help` imports no command's dependencies: each command imports its own."""
    probe = ("import sys\n"
             "import evalbot.cli\n"
             f"argv = {argv!r}\n"
             "if argv:\n"
             "    from click.testing import CliRunner\n"
             "    got = CliRunner().invoke(evalbot.cli.cli, argv)\n"
             "    assert got.exit_code == 0 and 'serve' in got.output, got.output\n"
             f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
             "ours = sorted(m for m in sys.modules if m.startswith('evalbot.'))\n"
             "print(heavy, ours)\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("[] ['evalbot.cli', 'evalbot.config', 'evalbot.config.errors', "
                                   "'evalbot.lazy_group']")


def test_the_graders_import_closure_holds_no_measuring_code() -> None:
    """Grading, the audit and the report load, of the engine, its contract and the pure rule both
    sides compute (engine/contract/shared/): never the measuring loop, the sandbox or its launcher.
    Imported for real, so a re-export or a package __init__ cannot slip one in."""
    probe = ("import sys\n"
             "import evalbot.grading.grade, evalbot.audit.reproduce, evalbot.report.render\n"
             "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('evalbot.engine.'))))\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert "evalbot.engine.contract.shared.replay" in loaded  # the probe sees what it must
    assert [m for m in loaded if not m.startswith("evalbot.engine.contract")] == []


def test_only_the_store_speaks_sql() -> None:
    """Every table, migration and query is evalbot/store/'s (issue 54): no other module imports
    sqlite3 or runs a statement, so the schema has one owner and grading opens no connection."""
    bad = [f"{i.source} imports sqlite3" for i in IMPORTS
           if i.target.split(".")[0] == "sqlite3" and not i.source.startswith("evalbot.store.")]
    for name, path in MODULES.items():
        if name.startswith("evalbot.") and not name.startswith("evalbot.store."):
            bad += [f"{name}:{node.lineno} .{node.func.attr}()" for node in ast.walk(
                ast.parse(path.read_text())) if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("execute", "executemany", "executescript")]
    assert bad == []
