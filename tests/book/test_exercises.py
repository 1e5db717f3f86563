"""Every exercise of chapters 1-6 has a check that fails until the learner answers it.

The pattern, the same in every chapter:

- the learner's cell assigns a placeholder, ``answer = ...`` (more names may share it);
- a check cell tagged ``exercise-check`` and ``raises-exception`` follows it: it raises an
  AssertionError naming the exercise ("ex. N") while the placeholder is there, and passes
  with a right answer;
- the solution, a code cell tagged ``exercise-solution`` (and ``hide-cell``), comes after
  the check and assigns every placeholder name.

So the page, as built, shows each check failing on its placeholder; its hidden solution runs
only after it. The tests run each chapter twice in smoke mode: as it stands, where every
check must raise an AssertionError and no other cell may fail; and with each solution moved
to just after the learner's cell it answers, where no cell may fail."""
import ast
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]


def sets_exercises(path):
    return any(c.cell_type == "markdown" and "## Exercises" in c.source
               for c in nbformat.read(path, as_version=4).cells)


CHAPTERS = [p for p in sorted((ROOT / "book").glob("0[1-6]_*.ipynb")) if sets_exercises(p)]


def tagged(cell, tag):
    return tag in cell.metadata.get("tags", [])


def assigned(cell, placeholder_only=False):
    """Names a code cell assigns (only those assigned ``...`` if placeholder_only)."""
    try:
        tree = ast.parse(cell.source)
    except SyntaxError:                                  # IPython magics
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not placeholder_only:
            names.add(node.name)
        if isinstance(node, ast.Assign) and (
                not placeholder_only or (isinstance(node.value, ast.Constant)
                                         and node.value.value is Ellipsis)):
            names |= {t.id for target in node.targets for t in ast.walk(target)
                      if isinstance(t, ast.Name)}
    return names


def exercise_numbers(nb):
    """The numbers of the exercises a chapter sets: the items of its "## Exercises" list."""
    text = next(c.source for c in nb.cells if c.cell_type == "markdown" and "## Exercises" in c.source)
    return {int(n) for n in re.findall(r"^(\d+)\. ", text.split("## Exercises", 1)[1], re.M)}


def with_solutions(nb):
    """The notebook with each solution moved to just after the learner's cell it answers."""
    cells = [c for c in nb.cells if not tagged(c, "exercise-solution")]
    after = {}
    for solution in (c for c in nb.cells if tagged(c, "exercise-solution")):
        at = max(n for n, c in enumerate(cells) if c.cell_type == "code"
                 and assigned(c, placeholder_only=True) & assigned(solution))
        after.setdefault(at, []).append(solution)
    return [c for n, cell in enumerate(cells) for c in (cell, *after.get(n, []))]


def execute(nb, path, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("CAPSEDU_MODE", "smoke")
    monkeypatch.setenv("MPLBACKEND", "agg")
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return {c.id: [o.ename for o in c.outputs if o.output_type == "error"]
            for c in nb.cells if c.cell_type == "code"}


def test_chapters_1_to_6_with_exercises_are_covered():
    assert {p.stem[:2] for p in CHAPTERS} == {"01", "02", "03", "04", "05", "06"}


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_exercise_has_a_check_a_placeholder_and_a_solution(path):
    nb = nbformat.read(path, as_version=4)
    checks = [c for c in nb.cells if tagged(c, "exercise-check")]
    named = {int(n) for c in checks for n in re.findall(r"\bex\. (\d+)", c.source)}
    assert exercise_numbers(nb) and exercise_numbers(nb) <= named, "a check names each exercise"
    assert all(tagged(c, "raises-exception") for c in checks), "the build lets a check raise"
    placeholders = set().union(*(assigned(c, True) for c in nb.cells if c.cell_type == "code"
                                 and not tagged(c, "exercise-solution")))
    solutions = [assigned(c) for c in nb.cells if tagged(c, "exercise-solution")]
    assert placeholders and placeholders <= set().union(*solutions), "a solution fills every placeholder"
    assert all(names & placeholders for names in solutions), "each solution answers a placeholder"
    first_solution = min(n for n, c in enumerate(nb.cells) if tagged(c, "exercise-solution"))
    assert nb.cells.index(checks[0]) < first_solution, "no solution runs before the first check"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_checks_fail_on_the_placeholders_and_pass_with_the_solutions(path, monkeypatch):
    nb = nbformat.read(path, as_version=4)
    checks = {c.id for c in nb.cells if tagged(c, "exercise-check")}
    as_built = execute(nb, path, monkeypatch)
    assert {i: e for i, e in as_built.items() if i in checks} == {i: ["AssertionError"] for i in checks}
    assert not {i: e for i, e in as_built.items() if e and i not in checks}
    nb = nbformat.read(path, as_version=4)
    nb.cells = with_solutions(nb)
    solved = execute(nb, path, monkeypatch)
    assert not {i: e for i, e in solved.items() if e}, f"{path.stem}: fails with the solutions"
