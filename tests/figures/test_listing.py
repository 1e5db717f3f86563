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
