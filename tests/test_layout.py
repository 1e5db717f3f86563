"""The package's layout, enforced: which folder may import which (capsedu/__init__.py's table).

An AST walk over every module, imports inside functions included: no import cycle between
modules, no import of a folder outside its row, no experiment importing another, no private
name imported across folders, re-exports only in package ``__init__``s, nothing imports ``cli``,
and ``python -m capsedu --help`` leaves torch out of ``sys.modules``.
"""
import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import networkx as nx  # a dependency of torch
import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "capsedu"

# folder -> the folders it may import (besides itself and the root's constants)
ALLOWED = {
    "core": set(), "methods": {"core"}, "runtime": set(), "data": {"runtime"}, "training": {"core", "data", "runtime"},
    "speed": {"core", "runtime"}, "figures": {"core", "methods", "runtime"},
    "experiments": {"core", "methods", "runtime", "data", "training", "speed", "figures"},
}
ROOT_MODULES = {"capsedu", "capsedu.cli", "capsedu.__main__"}
INDEX = "capsedu.experiments.catalogue"  # declares every experiment: imports each inside a function only
MAX_TOP_LEVEL, MAX_LINES, MAX_CORE_LINES = 6, 350, 600  # the core: readable in one sitting


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path = PACKAGE):
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def imports(path: Path, name: str):
    """(imported module, [names], line, is a re-export candidate) for each capsedu import in ``path``."""
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            target = importlib.util.resolve_name("." * node.level + (node.module or ""), here)
            if target == "capsedu" or target.startswith("capsedu."):
                found.append((target, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names if alias.name.startswith("capsedu")]
    return found


def resolve(target: str, names, known):
    """The modules an import statement loads: ``from capsedu.x import y`` loads capsedu.x.y if it is a module."""
    return [target] + [f"{target}.{n}" for n in names if f"{target}.{n}" in known]


def folder(module: str) -> str:
    """'core' for capsedu.core.squashing; the root's modules map to ''."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and module not in ROOT_MODULES else ""


def experiment(module: str):
    """'robustness' for capsedu.experiments.robustness, 'two_digits' for its folder, None for the shared part."""
    parts = module.split(".")
    if len(parts) < 3 or parts[1] != "experiments" or parts[2] == "shared" or module == INDEX:
        return None
    return parts[2]


def graph(package: Path = PACKAGE):
    known = modules(package)
    edges = {name: [(dep, names if dep == target else [], line) for target, names, line in imports(path, name)
                    for dep in resolve(target, names, known) if dep in known and dep != name]
             for name, path in known.items()}
    return known, edges


def lazy(name, line, known):
    """Whether ``INDEX`` imports at ``line`` inside a function (loading the index loads no experiment)."""
    tree = ast.parse(known[name].read_text())
    return name == INDEX and line not in {n.lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))}


def violations(package: Path = PACKAGE):
    """Every broken rule, one line each."""
    known, edges = graph(package)
    bad = []
    eager = {n: [d for d in deps if not lazy(n, d[2], known)] for n, deps in edges.items()}
    for name, deps in edges.items():
        src = folder(name)
        for dep, names, line in deps:
            dst = folder(dep)
            where = f"{name}:{line} imports {dep}"
            if dep == "capsedu.cli" or dep == "capsedu.__main__":
                if name != "capsedu.__main__":
                    bad.append(f"{where}: nothing imports the CLI")
                continue
            if dst == "":                                           # the root's constants: everyone may
                if src == "" and name == "capsedu":
                    bad.append(f"{where}: the root imports nothing of capsedu")
                continue
            if src and dst != src and dst not in ALLOWED[src]:
                bad.append(f"{where}: {src} may import only {sorted(ALLOWED[src]) or 'itself'}")
            if src == "experiments" and experiment(dep) and experiment(dep) != experiment(name) \
                    and not lazy(name, line, known):
                bad.append(f"{where}: an experiment never imports another")
            if dst != src and any(n.startswith("_") for n in names):
                bad.append(f"{where}: private name(s) {[n for n in names if n.startswith('_')]} across folders")
    for name, path in known.items():
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        imported = {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom)
                    and (n.level or (n.module or "").startswith("capsedu")) for a in n.names}
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                exported = [e.value for e in node.value.elts]
                again = sorted(set(exported) & imported)
                if again:
                    bad.append(f"{name}: __all__ re-exports {again}; only package __init__s re-export")
    eager_graph = nx.DiGraph((name, dep) for name, deps in eager.items() for dep, _, _ in deps)
    return bad + [f"cycle: {' -> '.join(c + c[:1])}" for c in nx.simple_cycles(eager_graph)]


def test_the_import_table_holds():
    assert violations() == []


def test_every_folder_is_in_the_table():
    assert {p.parent.name for p in PACKAGE.glob("*/__init__.py")} == set(ALLOWED)


def test_size_limits():
    top = [p.name for p in PACKAGE.glob("*.py")]
    assert len(top) <= MAX_TOP_LEVEL, top
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}
    core = sum(len(p.read_text().splitlines()) for p in (PACKAGE / "core").glob("*.py"))
    assert core <= MAX_CORE_LINES


def _plant(tmp_path, relative: str, code: str) -> Path:
    """A copy of the package with one extra module, to show the checker sees a planted violation."""
    import shutil
    copy = tmp_path / "capsedu"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("assets", "weights", "__pycache__"))
    (copy / relative).write_text(code)
    return copy


@pytest.mark.parametrize("relative, code, expected", [
    ("core/planted.py", "from capsedu.training.loop import fit\n", "core may import only"),
    ("runtime/planted.py", "def f():\n    from capsedu.data.mnist import load_dataset\n", "runtime may import only"),
    ("experiments/planted.py", "from capsedu.experiments.robustness import make_model\n", "never imports another"),
    ("data/planted.py", "from capsedu.runtime.device import _mps_available\n", "private name"),
    ("figures/planted.py", "from capsedu.cli import main\n", "nothing imports the CLI"),
    ("speed/planted.py", "from capsedu.core.squashing import squash\n__all__ = ['squash']\n", "re-exports"),
    ("experiments/catalogue.py", "from capsedu.experiments import ablation\n", "never imports another"),
])
def test_a_planted_violation_is_caught(tmp_path, relative, code, expected):
    copy = _plant(tmp_path, relative, code)
    assert any(expected in line for line in violations(copy)), violations(copy)


def test_a_planted_cycle_is_caught(tmp_path):
    copy = _plant(tmp_path, "core/planted.py", "from capsedu.core.planted2 import x\ny = 1\n")
    (copy / "core" / "planted2.py").write_text("def f():\n    from capsedu.core.planted import y\nx = 1\n")
    assert any(line.startswith("cycle:") and "planted2" in line for line in violations(copy))


def test_help_imports_no_torch():
    code = ("import sys, contextlib, io\nfrom capsedu.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    for argv in ([], ['train'], ['two-digits'], ['robustness'], ['compare-routing']):\n"
            "        try:\n            main([*argv, '--help'])\n        except SystemExit:\n            pass\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
