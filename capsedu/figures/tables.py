"""Tables for the book and the CLI, as Markdown or HTML, and printed text folded to the book's
column (no torch needed)."""
from __future__ import annotations

import textwrap
from html import escape
from typing import Sequence

__all__ = ["render_table", "noted_table", "fold", "COLUMN"]

COLUMN = 88  # characters of the code font in the book's column (ruff's line-length, pyproject.toml)


def render_table(heads: Sequence[str], rows: Sequence[Sequence], html: bool = False) -> str:
    """A table as Markdown, or as HTML (which notebooks and the rendered book both display)."""
    if html:
        def line(cells, tag):
            return "<tr>" + "".join(f"<{tag}>{escape(str(c))}</{tag}>" for c in cells) + "</tr>"
        body = "\n".join(line(r, "td") for r in rows)
        return f"<table>\n<thead>{line(heads, 'th')}</thead>\n<tbody>\n{body}\n</tbody>\n</table>"
    lines = ["| " + " | ".join(map(str, heads)) + " |", "|" + "---|" * len(heads)]
    return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def noted_table(heads: Sequence[str], rows: Sequence[Sequence]) -> str:
    """HTML: a table whose last column (the long words: why a verdict is what it is) is printed
    under it as numbered notes, each row's last remaining cell marked with its note's number, so
    that a table of many columns still fits the page."""
    body = [[*r[:-2], f"{r[-2]} [{i}]" if r[-1] else r[-2]] for i, r in enumerate(rows, 1)]
    notes = "".join(f'<li value="{i}"><small>{escape(str(r[-1]))}</small></li>'
                    for i, r in enumerate(rows, 1) if r[-1])
    return render_table(heads[:-1], body, html=True) + (
        f"<p><small>{escape(heads[-1].capitalize())}:</small></p><ol>{notes}</ol>" if notes else "")


def fold(text, width: int = COLUMN) -> str:
    """``text`` with every line longer than ``width`` broken at spaces, its continuation lines
    indented two spaces past the line's own indent: printed output that reads without scrolling.
    A word longer than ``width`` (a path, say) stays whole."""
    out = []
    for line in str(text).split("\n"):
        indent = line[:len(line) - len(line.lstrip())]
        out.append(line if len(line) <= width else textwrap.fill(
            line, width, subsequent_indent=indent + "  ", break_long_words=False,
            break_on_hyphens=False))
    return "\n".join(out)
