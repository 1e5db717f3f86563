"""The one mode table, book/intro.md's: a row per mode, and its "unset" row says what
current_mode() does."""
import re
from pathlib import Path

import pytest

import capsedu

INTRO = Path(__file__).resolve().parents[2] / "book" / "intro.md"


def intro_mode_rows():
    text = INTRO.read_text()
    table = text[text.index("| mode | for |"):].split("\n\n")[0].splitlines()[2:]
    return [tuple(cell.strip().strip("`") for cell in row.strip("|").split("|")) for row in table]


def test_every_mode_has_a_row_and_the_last_is_unset():
    rows = intro_mode_rows()
    assert tuple(r[0] for r in rows[:-1]) == capsedu.MODES and rows[-1][0] == "unset"


@pytest.mark.parametrize("cuda, apple, expected", [(True, False, "gpu"), (False, True, "gpu"), (False, False, "quick")])
def test_unset_row_matches_current_mode(monkeypatch, cuda, apple, expected):
    torch = pytest.importorskip("torch")
    monkeypatch.delenv("CAPSEDU_MODE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: apple)
    assert capsedu.current_mode() == expected
    said = re.findall(rf"\b({'|'.join(capsedu.MODES)})\b", intro_mode_rows()[-1][-1])  # with a device, else
    assert said[0 if cuda or apple else 1] == expected
