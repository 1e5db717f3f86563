"""Words of a chapter's main line: the prose of its markdown cells outside collapsed blocks.

    python scripts/word_count.py book/0[1-6]_*.ipynb      # prints {notebook: words} as JSON
    python scripts/word_count.py --minutes book/*.ipynb   # the intro's reading times

A reading time is the main-line words at 200 a minute plus the code shown on the page (code
cells not hidden or collapsed, non-blank lines) at 20 lines a minute; outputs are not counted.

Left out: fenced blocks with `:class: dropdown` or a `{dropdown}` directive (engineering notes,
solutions: a learner can skip them), display maths ($$ ... $$), HTML tags and `{glue}` roles' targets.
A word is a run of letters or digits (so "8,215,568" and "c_ij" count as one or a few).
"""
from __future__ import annotations

import json
import re
import sys

FENCE = re.compile(r"^(`{3,}|:{3,})\s*\{(\w[\w-]*)\}[^\n]*\n(.*?)^\1\s*$", re.M | re.S)
WORD = re.compile(r"[^\W_]+(?:[-'.,][^\W_]+)*")


def main_line(markdown: str) -> str:
    """The markdown with its collapsed blocks, display maths and HTML tags removed."""
    def keep(block: re.Match) -> str:
        collapsed = block.group(2) == "dropdown" or re.search(r"^:class:.*\bdropdown\b", block.group(3), re.M)
        return "" if collapsed else block.group(3)
    text = FENCE.sub(keep, markdown)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", text)
    return re.sub(r"\{glue(?::\w+)?\}`[^`]*`", "N", text)   # a glued number reads as one word


def count_words(path: str) -> int:
    """Main-line words of the notebook at ``path``."""
    cells = json.load(open(path, encoding="utf-8"))["cells"]
    return sum(len(WORD.findall(main_line("".join(c["source"])))) for c in cells if c["cell_type"] == "markdown")


WORDS_PER_MINUTE, CODE_LINES_PER_MINUTE = 200, 20
HIDDEN = {"remove-input", "remove-cell", "hide-input", "hide-cell"}   # code not shown, or collapsed


def count_code_lines(path: str) -> int:
    """Non-blank lines of the code cells the page shows open, at ``path``."""
    cells = json.load(open(path, encoding="utf-8"))["cells"]
    return sum(sum(1 for line in "".join(c["source"]).splitlines() if line.strip())
               for c in cells if c["cell_type"] == "code" and not HIDDEN & set(c["metadata"].get("tags", [])))


def reading_minutes(path: str) -> int:
    """The reading time the intro types: prose and shown code, rounded, at least 1 minute."""
    return max(1, round(count_words(path) / WORDS_PER_MINUTE + count_code_lines(path) / CODE_LINES_PER_MINUTE))


if __name__ == "__main__":
    measure = reading_minutes if "--minutes" in sys.argv else count_words
    print(json.dumps({p: measure(p) for p in sys.argv[1:] if p != "--minutes"}, indent=1))
