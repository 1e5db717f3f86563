"""The intro's reading path: each chapter's typed reading time is its main-line words at 200
a minute plus the code the page shows at 20 lines a minute (scripts/word_count.py), and every
numbered chapter is on the path."""
import re
from pathlib import Path

from cli_helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| \{doc\}`(\w+)` \|.*\| (\d+) min \|$", re.M)


def test_reading_times_come_from_the_word_counts():
    minutes = load_script("scripts/word_count.py").reading_minutes
    text = (ROOT / "book" / "intro.md").read_text()
    typed = {name: int(m) for name, m in ROW.findall(text.split("## Reading path", 1)[1])}
    chapters = {p.stem for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb")}
    assert set(typed) == chapters, "the reading path lists every numbered chapter, once"
    expected = {name: minutes(ROOT / "book" / f"{name}.ipynb") for name in typed}
    assert typed == expected, f"retype the intro's reading times: {expected}"
