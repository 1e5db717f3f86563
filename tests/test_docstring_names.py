"""Every dotted name a docstring under capsedu/ puts in double backquotes names something real.

Checked: module, class and function docstrings (read with ``ast``); in them, each ``a.b`` made of
identifiers only (file names such as ``checkpoint.pt`` skipped by their extension). Such a name
resolves if, importing its longest importable prefix and taking the rest as attributes, it is
1. absolute: ``capsedu.runtime.device.resolve_amp``, ``torch.compile``;
2. in capsedu: ``training.objectives`` (capsedu.training.objectives), or after the end of any
   capsedu module's dotted name: ``device.resolve_amp`` (capsedu.runtime.device.resolve_amp);
3. on a global of the docstring's module or of its package: ``CapsNet.capsules`` in capsedu.core.
The last attribute may also be a dataclass field. A run-time value is skipped: a first part that
is ``self``, ``cls`` or a parameter of the documented function (``args.devices``).
"""
import ast
import dataclasses
import importlib
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "capsedu"
DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
FILE_EXTENSIONS = {"py", "pt", "json", "js", "md", "png", "npz", "tmp", "txt", "gz", "csv", "html", "ipynb", "sh", "css"}


def _module(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


MODULES = sorted(_module(p) for p in PACKAGE.rglob("*.py"))
def _attributes(obj, parts) -> bool:
    for i, part in enumerate(parts):
        if hasattr(obj, part):
            obj = getattr(obj, part)
        else:
            last_field = i == len(parts) - 1 and dataclasses.is_dataclass(obj)
            return last_field and part in {f.name for f in dataclasses.fields(obj)}
    return True


def _absolute(name: str) -> bool:
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        return _attributes(module, parts[k:])
    return False


def resolves(name: str, module_name: str) -> bool:
    """Whether ``name``, read in the docstrings of ``module_name``, names something (rules above)."""
    first, *rest = name.split(".")
    spaces = [vars(importlib.import_module(m)) for m in (module_name, module_name.rpartition(".")[0] or module_name)]
    return (_absolute(name) or _absolute(f"capsedu.{name}")
            or any(_absolute(".".join([m, *rest])) for m in MODULES if m.endswith(f".{first}"))
            or any(first in space and _attributes(space[first], rest) for space in spaces))


def docstring_names():
    """(file, line, module, name) for every dotted name in double backquotes, run-time values left out."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node, clean=False)
            if doc is None:
                continue
            values = {"self", "cls"}
            if not isinstance(node, (ast.Module, ast.ClassDef)):
                a = node.args
                values |= {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if x}
            for match in re.finditer(r"``([^`]+)``", doc):
                name = match.group(1)
                if (DOTTED.fullmatch(name) and name.rsplit(".", 1)[1] not in FILE_EXTENSIONS
                        and name.split(".")[0] not in values):
                    line = node.body[0].lineno + doc[:match.start()].count("\n")
                    yield path.relative_to(PACKAGE.parent).as_posix(), line, _module(path), name


def test_the_resolver_tells_a_real_name_from_a_made_up_one():
    assert resolves("device.resolve_amp", "capsedu.training.loop")
    assert not resolves("device.resolve_ampere", "capsedu.training.loop")


def test_every_dotted_name_in_a_docstring_resolves():
    found = list(docstring_names())
    assert len(found) > 30                                    # the walk found the docstrings
    unresolved = [(file, line, name) for file, line, module, name in found if not resolves(name, module)]
    wrong = [f"{file}:{line}: ``{name}``" for file, line, name in unresolved]
    assert not wrong, "docstrings name what does not exist:\n" + "\n".join(wrong)
