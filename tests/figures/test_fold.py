"""fold: printed text folded to the book's column, nothing lost, short lines untouched."""
from capsedu.figures.tables import COLUMN, fold


def test_long_lines_fold_at_spaces_and_keep_every_word():
    line = "  stored run: " + " ".join(f"word{i}" for i in range(40))
    short = "a short line"
    folded = fold(f"{line}\n{short}", width=40).split("\n")
    assert all(len(piece) <= 40 for piece in folded)
    assert folded[-1] == short
    assert folded[0].startswith("  stored run:") and all(p.startswith("    ") for p in folded[1:-1])
    assert " ".join(p.strip() for p in folded[:-1]).split() == line.split()


def test_a_word_wider_than_the_column_stays_whole():
    path = "/" + "x" * (COLUMN + 5)
    assert fold(f"out {path} done") == f"out\n  {path}\n  done"
