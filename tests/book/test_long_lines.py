"""Without a browser: no code line of the book wider than a code box (ruff for code cells,
scripts/long_lines.py for fenced code;
tests/book/test_browser.py checks the limit against the measured box and the printed output),
none in the package code the chapters print, and no glue call in a code cell the HTML shows."""
import importlib
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
long_lines = load_script("scripts/long_lines.py")
FILES = long_lines.book_files()


def test_the_checker_finds_a_fence_line_one_past_the_limit(tmp_path):
    limit, boxed = long_lines.LIMIT, long_lines.ADMONITION_LIMIT
    cell = {"cell_type": "code", "metadata": {}, "source": ["x = 1\n", "#" * (limit + 1)]}  # ruff's
    fence = {"cell_type": "markdown", "metadata": {},
             "source": ["```{admonition} " + "a" * 99 + "\n", "```\n", "prose " * 20 + "\n",
                        "```python\n", "y" * 99 + "\n", "```\n",
                        "````{admonition} Solution\n", "```python\n", "z" * boxed + "\n",
                        "z" * (boxed + 1) + "\n", "```\n", "````"]}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [cell, fence]}))
    assert long_lines.long_lines(path) == [(1, 5, 99, limit), (1, 10, boxed + 1, boxed)]


def ruff(*paths):
    """``ruff check`` with the project's settings (pyproject.toml): (exit code, its report)."""
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", *map(str, paths)],
                          cwd=ROOT, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def test_ruff_finds_a_code_cell_line_one_past_the_limit():
    limit = long_lines.LIMIT
    cell = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": ["x = 1\n", "y = " + "1" * (limit - 4) + "\n", "z = " + "1" * (limit - 3)]}
    path = ROOT / "book" / "_ruff_probe.ipynb"  # in book/: where the settings apply E501
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    try:
        code, report = ruff(path)
    finally:
        path.unlink()
    assert code == 1 and report.count("E501") == 1 and f"({limit + 1} > {limit})" in report, report


def test_code_cells_fit_the_column():
    code, report = ruff("book")
    assert code == 0, report


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_fenced_code_lines_fit_the_column(path):
    found = long_lines.long_lines(path)
    assert not found, f"{path.name}: " + "; ".join(f"cell {c} line {n}: {k} > {m}"
                                                   for c, n, k, m in found)


@pytest.mark.parametrize("path", [p for p in FILES if p.suffix == ".ipynb"], ids=lambda p: p.name)
def test_glue_calls_are_hidden_in_the_html(path):
    assert not long_lines.visible_glue(path), f"{path.name}: cells {long_lines.visible_glue(path)} show glue("


# The package code the chapters print (inspect.getsource, or chapters 9 and 10's show()).
SHOWN = ["capsedu.core.squashing:squash", "capsedu.core.squashing:safe_norm",
         "capsedu.core.routing:dynamic_routing", "capsedu.core.layers:PrimaryCapsules",
         "capsedu.core.layers:RoutedCapsules", "capsedu.core.layers:DenseCapsules",
         "capsedu.core.capsnet:Decoder", "capsedu.core.losses:margin_loss",
         "capsedu.core.losses:reconstruction_loss", "capsedu.core.capsnet:CapsNet",
         "capsedu.core.capsnet:CapsNet.capsules",
         "capsedu.core.capsnet:CapsNet.forward", "capsedu.data.transforms:random_affine",
         "capsedu.experiments.ablation:make_variant",
         "capsedu.experiments.multimnist:PairCapsNet.forward", "capsedu.methods.em:m_step",
         "capsedu.methods.em:e_step", "capsedu.methods.em:em_routing",
         "capsedu.methods.matrix_capsnet:ClassMatrixCapsules.votes",
         "capsedu.methods.attention:self_attention_routing",
         "capsedu.methods.tutorial_capsnet:tutorial_squash",
         "capsedu.methods.tutorial_capsnet:tutorial_routing",
         "capsedu.speed.routing:_route_backward"]
PRINTS = re.compile(r"(?:getsource|(?<![\w.])show)\(([\w.]+)\)")
WHOLE_MODEL = re.compile(r"WHOLE_MODEL = \(([^)]*)\)")  # chapter 4's whole-model screen, printed


def _resolve(spec):
    module, name = spec.split(":")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def test_the_list_holds_what_the_chapters_print():
    printed = {m.group(1).split(".")[-1] for path in FILES if path.suffix == ".ipynb"
               for m in PRINTS.finditer(path.read_text(encoding="utf-8"))} - {"obj"}
    for path in FILES:
        if path.suffix == ".ipynb":
            code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
                             if c["cell_type"] == "code")
            printed |= {name.strip() for m in WHOLE_MODEL.finditer(code) for name in m.group(1).split(",")}
    assert printed == {spec.split(":")[1].split(".")[-1] for spec in SHOWN}


@pytest.mark.parametrize("spec", SHOWN)
def test_printed_package_code_fits_the_column(spec):
    lines = inspect.getsource(_resolve(spec)).splitlines()
    wide = [n for n, line in enumerate(lines, 1) if len(line) > long_lines.LIMIT]
    assert not wide, f"{spec}: lines {wide} are wider than {long_lines.LIMIT} characters"
