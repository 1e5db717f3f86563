"""Words of a chapter's main line: the prose of its markdown cells outside collapsed blocks.

    python scripts/word_count.py book/0[1-6]_*.ipynb      # prints {notebook: words} as JSON

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


if __name__ == "__main__":
    print(json.dumps({p: count_words(p) for p in sys.argv[1:]}, indent=1))
