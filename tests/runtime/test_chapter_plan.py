"""capsedu.runtime.chapter_plan: the notebooks' training settings as the notebooks set them, and the
stored chapter times read per mode."""
import ast
import json
import re
from pathlib import Path

import pytest

from capsedu import MODES
from capsedu.runtime import chapter_plan
from capsedu.runtime.chapter_plan import NOTEBOOK_TRAINING, stored_cpu_times

BOOK = Path(__file__).resolve().parents[2] / "book"


def by_mode(notebook: str, name: str) -> dict:
    """The literal keyword values of ``by_mode(...)`` in ``NAME = ...`` of a notebook's code."""
    for cell in json.loads((BOOK / notebook).read_text())["cells"]:
        code = "".join(cell["source"]) if cell["cell_type"] == "code" else ""
        if not re.search(rf"^{name} = ", code, re.M):
            continue
        tree = ast.parse(re.sub(r"^[%!].*$", "", code, flags=re.M))   # IPython magics out
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
                call = next(n for n in ast.walk(node.value) if isinstance(n, ast.Call)
                            and getattr(n.func, "id", None) == "by_mode")
                return {k.arg: k.value.value for k in call.keywords if isinstance(k.value, ast.Constant)}
    raise AssertionError(f"{notebook} sets no {name} with by_mode")


def test_every_chapter_has_every_mode():
    for chapter, modes in NOTEBOOK_TRAINING.items():
        assert set(modes) == set(MODES), chapter
        assert all(isinstance(x, int) and x > 0 for plan in modes.values() for x in plan), chapter


@pytest.mark.parametrize("notebook, digits, epochs", [("05_training.ipynb", "N_TRAIN", "EPOCHS"),
                                                       ("08_fast.ipynb", "N_TRAIN", "EPOCHS")])
def test_the_plan_is_what_the_notebook_trains(notebook, digits, epochs):
    plan = NOTEBOOK_TRAINING[notebook.removesuffix(".ipynb")]
    n, e = by_mode(notebook, digits), by_mode(notebook, epochs)
    for mode in MODES:
        if mode in n:              # a literal (not "all of the data")
            assert plan[mode][1] == n[mode], (mode, plan[mode], n[mode])
        assert plan[mode][2] == e[mode], (mode, plan[mode], e[mode])


def test_chapter_11_previews_are_its_presets():
    from capsedu.experiments.tutorial_vs_fixed import PRESETS
    for mode in ("smoke", "quick"):
        c = PRESETS[mode]
        assert NOTEBOOK_TRAINING["11_tutorial_code"][mode] == (len(c.models) * len(c.seeds), c.n_train, c.epochs)


def test_stored_cpu_times_reads_one_mode(tmp_path, monkeypatch):
    assert (shipped := stored_cpu_times("quick")) and all(r["seconds"] for r in shipped)   # the stored files read
    chapters = [{"notebook": "05_training.ipynb", "seconds": 58.0, "ok": True,
                 "load_average_1min_before_after": [1.5, 3.0]},
                {"notebook": "07_two_digits.ipynb", "seconds": 900.0, "ok": False}]
    for name, mode in (("chapters-cpu-2026-12-01.json", "quick"), ("chapters-cpu-2026-12-02.json", "smoke")):
        (tmp_path / name).write_text(json.dumps({"mode": mode, "hardware": "cpu", "date": "2026-12-01T00:00:00",
                                                 "chapters": chapters}))
    monkeypatch.setattr(chapter_plan, "benchmarks_dir", lambda: tmp_path)
    (run,) = stored_cpu_times("quick")
    assert run["file"] == "chapters-cpu-2026-12-01.json" and run["load"] == (1.5, 3.0)
    assert run["seconds"] == {"05_training.ipynb": 58.0, "07_two_digits.ipynb": None}
    assert run["complete"] and run["date"] == "2026-12-01"
    with pytest.raises(ValueError, match="mode"):
        stored_cpu_times("fast")
