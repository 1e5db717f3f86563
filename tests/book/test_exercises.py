"""Every exercise has a check: a chapter's cells tagged ``exercise-check`` pass with its hidden
solutions (the book build and the smoke runs execute them) and fail without them.

Each chapter with checks runs once in smoke mode with its ``exercise-solution`` cells left out:
every check cell must then stop at an AssertionError, and no other cell may fail. Each numbered
exercise must be named ("ex. N") by an assertion of a check cell."""
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = [p for p in sorted((ROOT / "book").glob("*.ipynb"))
            if any("exercise-check" in c.metadata.get("tags", [])
                   for c in nbformat.read(p, as_version=4).cells)]


def tagged(cell, tag):
    return tag in cell.metadata.get("tags", [])


def exercise_numbers(nb):
    """The numbers of the exercises a chapter sets: the items of its "## Exercises" list."""
    text = next(c.source for c in nb.cells if c.cell_type == "markdown" and "## Exercises" in c.source)
    return {int(n) for n in re.findall(r"^(\d+)\. ", text.split("## Exercises", 1)[1], re.M)}


def test_chapters_1_to_3_have_checks():
    assert {p.stem for p in CHAPTERS} >= {"01_intuition", "02_capsule", "03_routing"}


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_exercise_is_named_by_a_check(path):
    nb = nbformat.read(path, as_version=4)
    checks = "\n".join(c.source for c in nb.cells if tagged(c, "exercise-check"))
    named = {int(n) for n in re.findall(r"\bex\. (\d+)", checks)}
    assert exercise_numbers(nb) and exercise_numbers(nb) <= named
    assert any(tagged(c, "exercise-solution") for c in nb.cells)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_checks_fail_without_the_solutions(path, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("CAPSEDU_MODE", "smoke")
    monkeypatch.setenv("MPLBACKEND", "agg")
    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if not tagged(c, "exercise-solution")]
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        errors = [o.ename for o in cell.outputs if o.output_type == "error"]
        if tagged(cell, "exercise-check"):
            assert errors == ["AssertionError"], f"{path.stem} {cell.id}: passes without the solutions"
        else:
            assert not errors, f"{path.stem} {cell.id}: {errors}"
