"""Without a browser: no code line of the book wider than a code box, none in the package code
the chapters print, and no glue call in a code cell the HTML shows. ruff checks the code cells
(E501 at pyproject.toml's line-length); it reads neither markdown nor a function's printed
source, so the fenced code and the printed package code are measured here.
tests/book/test_browser.py checks the limit against the measured box."""
import importlib
import inspect
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["line-length"]
ADMONITION_LIMIT = 79  # an admonition's box is 671 px of the 740 px column
FILES = sorted((ROOT / "book").glob("*.ipynb")) + sorted((ROOT / "book").glob("*.md"))
NOTEBOOKS = [p for p in FILES if p.suffix == ".ipynb"]
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*(\S*)")
HIDDEN_INPUT = {"remove-input", "remove-cell", "hide-input", "hide-cell"}


def cells(path):
    """(index, cell type, tags, source) of a notebook's cells, or one markdown cell for a .md."""
    if path.suffix == ".md":
        return [(0, "markdown", [], path.read_text(encoding="utf-8"))]
    return [(i, c["cell_type"], c.get("metadata", {}).get("tags", []), "".join(c["source"]))
            for i, c in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"])]


def fenced_long_lines(path):
    """(cell, line number, length, limit) of each too-long line inside a markdown cell's code
    fence; a fence inside a MyST directive (```{admonition}) has the narrower box's limit."""
    found = []
    for index, kind, _, source in cells(path):
        fence, directives = None, []  # directives: the open ```{...} markers
        for number, line in enumerate(source.splitlines() if kind == "markdown" else [], 1):
            match = FENCE.match(line)
            if fence is not None:
                limit = ADMONITION_LIMIT if directives else LIMIT
                if line.strip() == fence:
                    fence = None
                elif len(line.expandtabs(4)) > limit:
                    found.append((index, number, len(line.expandtabs(4)), limit))
            elif match and directives and line.strip() == directives[-1]:
                directives.pop()
            elif match and match.group(2).startswith("{"):
                directives.append(match.group(1))
            elif match:
                fence = match.group(1)
    return found


def visible_glue(path):
    """Indices of the code cells the HTML shows that call glue or glue_all."""
    return [index for index, kind, tags, source in cells(path) if kind == "code"
            and not HIDDEN_INPUT & set(tags) and re.search(r"\bglue(_all)?\(", source)]


def test_the_check_finds_a_fence_line_one_past_the_limit(tmp_path):
    cell = {"cell_type": "code", "metadata": {}, "source": ["x = 1\n", "#" * (LIMIT + 1)]}  # ruff's
    boxed = ADMONITION_LIMIT
    fence = {"cell_type": "markdown", "metadata": {},
             "source": ["```{admonition} " + "a" * 99 + "\n", "```\n", "prose " * 20 + "\n",
                        "```python\n", "y" * 99 + "\n", "```\n",
                        "````{admonition} Solution\n", "```python\n", "z" * boxed + "\n",
                        "z" * (boxed + 1) + "\n", "```\n", "````"]}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [cell, fence]}))
    assert fenced_long_lines(path) == [(1, 5, 99, LIMIT), (1, 10, boxed + 1, boxed)]


def ruff(*paths):
    """``ruff check`` with the project's settings (pyproject.toml): (exit code, its report)."""
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise",
                           *map(str, paths)], cwd=ROOT, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def test_ruff_finds_a_code_cell_line_one_past_the_limit():
    cell = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": ["x = 1\n", "y = " + "1" * (LIMIT - 4) + "\n", "z = " + "1" * (LIMIT - 3)]}
    path = ROOT / "book" / "_ruff_probe.ipynb"  # in book/: where the settings apply E501
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    try:
        code, report = ruff(path)
    finally:
        path.unlink()
    assert code == 1 and report.count("E501") == 1 and f"({LIMIT + 1} > {LIMIT})" in report, report


def test_code_cells_fit_the_column():
    code, report = ruff("book")
    assert code == 0, report


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_fenced_code_lines_fit_the_column(path):
    assert not fenced_long_lines(path), f"{path.name}: (cell, line, length, limit) {fenced_long_lines(path)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_glue_calls_are_hidden_in_the_html(path):
    assert not visible_glue(path), f"{path.name}: cells {visible_glue(path)} show glue("


# The package code the chapters print (inspect.getsource, or chapters 9 and 10's show()).
SHOWN = [f"capsedu.{module}:{name}" for module, names in {
    "core.squashing": "squash safe_norm", "core.routing": "dynamic_routing", "core.losses": "margin_loss reconstruction_loss",
    "core.layers": "PrimaryCapsules RoutedCapsules DenseCapsules", "core.capsnet": "Decoder CapsNet CapsNet.capsules CapsNet.forward",
    "data.transforms": "random_affine", "experiments.ablation": "make_variant", "experiments.multimnist": "PairCapsNet.forward",
    "methods.em": "m_step e_step em_routing", "methods.matrix_capsnet": "ClassMatrixCapsules.votes",
    "methods.attention": "self_attention_routing", "methods.tutorial_capsnet": "tutorial_squash tutorial_routing",
    "speed.routing": "_route_backward"}.items() for name in names.split()]
PRINTS = re.compile(r"(?:getsource|(?<![\w.])show)\(([\w.]+)\)")
WHOLE_MODEL = re.compile(r"WHOLE_MODEL = \(([^)]*)\)")  # chapter 4's whole-model screen, printed


def _resolve(spec):
    module, name = spec.split(":")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def test_the_list_holds_what_the_chapters_print():
    printed = {m.group(1).split(".")[-1] for path in NOTEBOOKS
               for m in PRINTS.finditer(path.read_text(encoding="utf-8"))} - {"obj"}
    for path in NOTEBOOKS:
        code = "\n".join(source for _, kind, _, source in cells(path) if kind == "code")
        printed |= {name.strip() for m in WHOLE_MODEL.finditer(code) for name in m.group(1).split(",")}
    assert printed == {spec.split(":")[1].split(".")[-1] for spec in SHOWN}


@pytest.mark.parametrize("spec", SHOWN)
def test_printed_package_code_fits_the_column(spec):
    lines = inspect.getsource(_resolve(spec)).splitlines()
    wide = [n for n, line in enumerate(lines, 1) if len(line) > LIMIT]
    assert not wide, f"{spec}: lines {wide} are wider than {LIMIT} characters"
