"""Every figure of chapters 1-6 has text of at least 10 px as the page shows it.

A figure shown inline is a PNG of the ``bbox_inches="tight"`` crop at the figure's dpi, and the
page scales an image wider than its column down to the column. So a text of ``size`` points is
``size * dpi / 72 * min(1, COLUMN_PX / image_width_px)`` pixels on the page.

COLUMN_PX is the width sphinx-book-theme 1.3 gives a cell's output on a wide screen, read from
its CSS and pydata-sphinx-theme's: the page is at most 88rem (1,408 px) wide; the primary sidebar
takes 25% of it (352 px); the article container stops 17rem (272 px) short of the rest (room for
the secondary sidebar); the article pads 2rem (32 px) on each side, and myst-nb's
``.cell_output`` 1em (16 px) on the left: 1408 - 352 - 272 - 64 - 16 = 704 px.

The chapters run in smoke mode (as in test_colab_wheel.py, here in this environment) with
``figure_text_probe`` installed by a first cell that the test adds; it logs every text each
figure draws. A figure drawn twice in one cell counts as its last draw (the PNG shown).
"""
import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "book").glob("0[1-6]_*.ipynb"))
COLUMN_PX = 704   # the article column of sphinx-book-theme 1.3, less the output's indent (above)
MIN_PX = 10


def rendered_px(size_pt: float, dpi: float, width_px: float) -> float:
    """Height in page pixels of text of ``size_pt`` points in an image ``width_px`` wide at ``dpi``."""
    return size_pt * dpi / 72 * min(1.0, COLUMN_PX / width_px)


def shown_draws(log: Path):
    """The last draw of each figure in each cell: {(cell, figure): record}."""
    last = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["width_px"]:
            last[(record["cell"], record["figure"])] = record
    return last


def too_small(draws):
    """[(cell, rendered px, text)] for every text below MIN_PX on the page."""
    found = [(cell, rendered_px(size, r["dpi"], r["width_px"]), text)
             for (cell, _), r in draws.items() for size, text in r["texts"]]
    return [(cell, round(px, 1), text) for cell, px, text in found if px < MIN_PX]


def run_with_probe(notebook: Path, log: Path):
    nb = nbformat.read(notebook, as_version=4)
    probe = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
             f"import figure_text_probe; figure_text_probe.install({str(log)!r})")
    nb.cells.insert(0, nbformat.v4.new_code_cell(probe))
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(notebook.parent)}}).execute()
    return nb


def test_the_measure_on_a_known_figure(tmp_path):
    """A 10 pt label in a figure twice the column's width shows at half its size."""
    import matplotlib
    matplotlib.use("agg")
    import matplotlib.pyplot as plt
    import figure_text_probe

    log = tmp_path / "draws.jsonl"
    figure_text_probe.install(str(log))
    try:
        fig, ax = plt.subplots(figsize=(2 * COLUMN_PX / 100, 3), dpi=100)
        ax.set_title("ten points", fontsize=10)
        fig.savefig(tmp_path / "f.png")                   # no crop: 2 x COLUMN_PX wide
        plt.close(fig)
    finally:
        figure_text_probe.uninstall()
    (draw,) = shown_draws(log).values()
    assert draw["width_px"] == 2 * COLUMN_PX and draw["dpi"] == 100
    assert [10, "ten points"] in draw["texts"]
    assert rendered_px(10, 100, draw["width_px"]) == pytest.approx(10 * 100 / 72 / 2)
    assert any(text == "ten points" for _, _, text in too_small(shown_draws(log)))


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_every_figure_text_is_readable_at_the_column(notebook, tmp_path, monkeypatch):
    monkeypatch.setenv("CAPSEDU_MODE", "smoke")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    log = tmp_path / "draws.jsonl"
    log.touch()
    run_with_probe(notebook, log)
    draws = shown_draws(log)
    assert draws, f"{notebook.name} drew no figure"
    small = too_small(draws)
    assert not small, (f"{notebook.name}: text below {MIN_PX} px at a {COLUMN_PX} px column "
                       f"(cell, px, text): {small[:20]}")
