"""Chapter 4's whole-model screen trims the package's source: the trimmed text is the package's
own lines in order, still parses, defines the same functions, and has no docstring or raise."""
import ast
import inspect

import pytest

from capsedu.core.capsnet import CapsNet
from capsedu.core.layers import PrimaryCapsules, RoutedCapsules
from capsedu.core.routing import dynamic_routing
from capsedu.figures.listing import model_lines


@pytest.mark.parametrize("obj", [CapsNet, PrimaryCapsules, RoutedCapsules, dynamic_routing])
def test_model_lines_keeps_the_maths_and_drops_the_guards(obj):
    source = inspect.getsource(obj)
    trimmed = model_lines(source)
    lines, kept = source.splitlines(), trimmed.splitlines()
    rest = iter(lines)
    assert all(any(line == original for original in rest) for line in kept)  # a subsequence
    assert len(kept) < len(lines)
    tree, full = ast.parse(trimmed), ast.parse(source)
    names = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    assert names == [n.name for n in ast.walk(full) if isinstance(n, ast.FunctionDef)]
    assert not any(isinstance(n, ast.Raise) for n in ast.walk(tree))
    assert not any(ast.get_docstring(n) for n in ast.walk(tree)
                   if isinstance(n, (ast.FunctionDef, ast.ClassDef)))
    assert "return" in trimmed and "check_" not in trimmed


def test_helper_lines_gives_one_readable_line_per_helper():
    from capsedu.core.checks import as_multi_hot
    from capsedu.core.layers import W_INIT_STD
    from capsedu.core.squashing import at_least_float32
    from capsedu.figures.listing import helper_lines

    text = helper_lines({"W_INIT_STD": W_INIT_STD, "at_least_float32": at_least_float32,
                         "as_multi_hot": as_multi_hot})
    lines = text.splitlines()
    assert lines[0] == f"W_INIT_STD = {W_INIT_STD!r}"
    assert lines[1].startswith("def at_least_float32(s): return ")   # its one-line body
    assert lines[2] == "def as_multi_hot(targets, batch, classes, device): ..."
    assert lines[3].startswith("    # ") and "multi-hot" in lines[3]  # its docstring
    ast.parse(text)
