"""One mode table: book/intro.md's copy and the rows chapter 0 renders are capsedu.MODE_TABLE,
and its "unset" row says what current_mode() does."""
import re
from pathlib import Path

import pytest

import capsedu

INTRO = Path(__file__).resolve().parents[2] / "book" / "intro.md"


def intro_mode_rows():
    text = INTRO.read_text()
    table = text[text.index("| mode | for |"):].split("\n\n")[0].splitlines()[2:]
    return [tuple(cell.strip().strip("`") for cell in row.strip("|").split("|")) for row in table]


def test_intro_repeats_the_mode_table():
    rows = intro_mode_rows()
    assert rows[:-1] == [tuple(r) for r in capsedu.MODE_TABLE]
    assert rows[-1][0] == "unset" and rows[-1][-1] == capsedu.MODE_UNSET.strip("`")
    assert tuple(r[0] for r in capsedu.MODE_TABLE) == capsedu.MODES


@pytest.mark.parametrize("cuda, apple, expected", [(True, False, "gpu"), (False, True, "gpu"), (False, False, "quick")])
def test_unset_row_matches_current_mode(monkeypatch, cuda, apple, expected):
    torch = pytest.importorskip("torch")
    monkeypatch.delenv("CAPSEDU_MODE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: apple)
    assert capsedu.current_mode() == expected
    said = re.findall(r"`(\w+)`", capsedu.MODE_UNSET)        # ["gpu", "quick"]: with a device, else
    assert said[0 if cuda or apple else 1] == expected
