"""Without a browser: no code line of the book wider than a code box (scripts/long_lines.py;
tests/book/test_browser.py checks the limit against the measured box and the printed output),
none in the package code the chapters print, and no glue call in a code cell the HTML shows."""
import importlib
import importlib.util
import inspect
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("long_lines", ROOT / "scripts" / "long_lines.py")
long_lines = importlib.util.module_from_spec(spec)
spec.loader.exec_module(long_lines)
FILES = long_lines.book_files()


def test_the_checker_finds_a_line_one_past_the_limit(tmp_path):
    limit, boxed = long_lines.LIMIT, long_lines.ADMONITION_LIMIT
    cell = {"cell_type": "code", "metadata": {}, "source": ["x = 1\n", "#" * (limit + 1)]}
    fence = {"cell_type": "markdown", "metadata": {},
             "source": ["```{admonition} " + "a" * 99 + "\n", "```\n", "prose " * 20 + "\n",
                        "```python\n", "y" * 99 + "\n", "```\n",
                        "````{admonition} Solution\n", "```python\n", "z" * boxed + "\n",
                        "z" * (boxed + 1) + "\n", "```\n", "````"]}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [cell, fence]}))
    assert long_lines.long_lines(path) == [(0, 2, limit + 1, limit), (1, 5, 99, limit),
                                           (1, 10, boxed + 1, boxed)]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_code_lines_fit_the_column(path):
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
         "capsedu.core.losses:reconstruction_loss", "capsedu.core.capsnet:CapsNet.capsules",
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


def _resolve(spec):
    module, name = spec.split(":")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def test_the_list_holds_what_the_chapters_print():
    printed = {m.group(1).split(".")[-1] for path in FILES if path.suffix == ".ipynb"
               for m in PRINTS.finditer(path.read_text(encoding="utf-8"))} - {"obj"}
    assert printed == {spec.split(":")[1].split(".")[-1] for spec in SHOWN}


@pytest.mark.parametrize("spec", SHOWN)
def test_printed_package_code_fits_the_column(spec):
    lines = inspect.getsource(_resolve(spec)).splitlines()
    wide = [n for n, line in enumerate(lines, 1) if len(line) > long_lines.LIMIT]
    assert not wide, f"{spec}: lines {wide} are wider than {long_lines.LIMIT} characters"
