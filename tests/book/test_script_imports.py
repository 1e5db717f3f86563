"""Every ``capsedu`` import written in the shell scripts and benchmarks resolves.

The GPU check (benchmarks/gpu_check.sh) runs only where a GPU is lent, so an import it names
that a package move broke would surface there first; this test finds it on any machine.
"""
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted([*ROOT.glob("benchmarks/*.sh"), *ROOT.glob("benchmarks/*.py"), *ROOT.glob("scripts/*.sh"),
                  *ROOT.glob("scripts/*.py")])
IMPORT = re.compile(r"from (capsedu(?:\.\w+)*) import ([\w, ]+?(?: as \w+)?(?:, [\w]+(?: as \w+)?)*)(?=[;\"'\n)]|$)")


def named_imports():
    found = []
    for path in SCRIPTS:
        for module, names in IMPORT.findall(path.read_text()):
            for name in names.split(","):
                found.append((path.relative_to(ROOT).as_posix(), module, name.split(" as ")[0].strip()))
    return found


def test_the_scripts_import_something():
    assert any(p == "benchmarks/gpu_check.sh" for p, _, _ in named_imports())


@pytest.mark.parametrize("path, module, name", named_imports())
def test_import_resolves(path, module, name):
    mod = importlib.import_module(module)
    assert hasattr(mod, name) or importlib.util.find_spec(f"{module}.{name}") is not None, (path, module, name)
