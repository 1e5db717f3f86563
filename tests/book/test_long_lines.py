"""Without a browser: no code line of the book wider than a code box (scripts/long_lines.py;
tests/book/test_browser.py checks the limit against the measured box and the printed output),
and no glue call in a code cell the HTML shows."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("long_lines", ROOT / "scripts" / "long_lines.py")
long_lines = importlib.util.module_from_spec(spec)
spec.loader.exec_module(long_lines)
FILES = long_lines.book_files()
NOT_YET = pytest.mark.xfail(strict=False, reason="chapters not yet wrapped: remove once they are (issue 36)")


def test_the_checker_finds_a_line_one_past_the_limit(tmp_path):
    cell = {"cell_type": "code", "metadata": {}, "source": ["x = 1\n", "#" * (long_lines.LIMIT + 1)]}
    fence = {"cell_type": "markdown", "metadata": {},
             "source": ["```{admonition} " + "a" * 99 + "\n", "```\n", "```python\n", "y" * 99 + "\n", "```"]}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [cell, fence]}))
    assert long_lines.long_lines(path) == [(0, 2, long_lines.LIMIT + 1), (1, 4, 99)]


@NOT_YET
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_code_lines_fit_the_column(path):
    found = long_lines.long_lines(path)
    assert not found, f"{path.name}: " + "; ".join(f"cell {c} line {n}: {k}" for c, n, k in found)


@NOT_YET
@pytest.mark.parametrize("path", [p for p in FILES if p.suffix == ".ipynb"], ids=lambda p: p.name)
def test_glue_calls_are_hidden_in_the_html(path):
    assert not long_lines.visible_glue(path), f"{path.name}: cells {long_lines.visible_glue(path)} show glue("
