"""Source listings for the page: the maths of a definition without what guards it.

``model_lines(source)`` drops the docstrings, the ``if ...: raise`` argument checks, the
``check_*(...)`` calls and the statements marked ``# engineering`` (the fast path's hook, the dtype
guard) from the source of a function or class, so that chapter 4's whole-model screen shows the
network and nothing else; the package's file keeps all of it.
``helper_lines(helpers)`` gives one line for each helper such a listing calls but does not show.
"""
from __future__ import annotations

import ast
import inspect
import re
import textwrap

__all__ = ["helper_lines", "model_lines"]


ENGINEERING = re.compile(r"#\s*engineering\b")   # marks a statement that is not the maths


def _guard(node: ast.AST, lines: list) -> bool:
    """A docstring, an ``if`` that only raises, a call of a ``check_*`` function, or a statement
    whose first line carries an ``# engineering`` comment."""
    if ENGINEERING.search(lines[node.lineno - 1]):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return isinstance(node.value.value, str)
    if isinstance(node, ast.If):
        return not node.orelse and all(isinstance(n, ast.Raise) for n in node.body)
    call = node.value if isinstance(node, ast.Expr) else None
    return (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id.startswith("check_"))


def model_lines(source: str) -> str:
    """``source`` (one def or class) without its docstrings, raise-only ifs, check_ calls and
    ``# engineering`` statements, and without a name assigned only for them (e.g.
    ``unknown = ...`` checked by a raise)."""
    lines = textwrap.dedent(source).splitlines()
    tree = ast.parse("\n".join(lines))
    drop = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        for child in body if isinstance(body, list) else []:
            if _guard(child, lines):
                drop.update(range(child.lineno - 1, child.end_lineno))
    functions = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)]
    for fn in functions:                     # names that no kept line of the function reads
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Assign)
                    and all(isinstance(t, ast.Name) for t in node.targets)):
                continue
            own = set(range(node.lineno - 1, node.end_lineno))
            rest = " ".join(lines[n] for n in range(fn.lineno - 1, fn.end_lineno)
                            if n not in drop | own)
            if not any(re.search(rf"\b{t.id}\b", rest) for t in node.targets):
                drop |= own
    kept = [line for n, line in enumerate(lines) if n not in drop]
    # no blank line left between a class's head and its first method
    kept = [line for n, line in enumerate(kept)
            if line.strip() or not (n and kept[n - 1].rstrip().endswith(":"))]
    return "\n".join(kept) + "\n"


def helper_lines(helpers: dict) -> str:
    """One line per ``name: object``: a constant's value, else the function's signature with
    its one-line body or its docstring's first clause, so a listing's calls are all shown."""
    lines = []
    for name, obj in helpers.items():
        if not callable(obj):
            lines.append(f"{name} = {obj!r}")
            continue
        head = f"def {name}({', '.join(inspect.signature(obj).parameters)}):"
        doc = (inspect.getdoc(obj) or "").splitlines()
        body = [line.strip() for line in model_lines(inspect.getsource(obj)).splitlines()[1:]]
        if len(body) == 1 or not doc:
            lines.append(f"{head} {body[0]}")
        else:          # the docstring's first clause (up to a comma outside brackets)
            clause = re.split(r",\s+(?![^()]*\))", doc[0])[0]
            lines += [f"{head} ...", "    # " + clause.replace("``", "")]
    return "\n".join(lines) + "\n"
