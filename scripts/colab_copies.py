"""Colab-ready copies of the chapters: markdown a notebook front end renders, code cells unchanged.

    python scripts/colab_copies.py [--built _build/jupyter_execute/book] [--out _build/colab/book]

For every ``book/*.ipynb`` (the chapters and the appendix pages) it writes a copy whose markdown has no MyST left (the conversions
are in scripts/colab_markdown.py): citations as "(Sabour et al., 2017)" with the chapter's
reference list at the end, ``{doc}`` links to the rendered pages (``[project.urls] Documentation``
in pyproject.toml), glued numbers as the values of the executed notebooks in ``--built`` (the
book build writes them there) or, where a value was not built, a pointer to the code cell that
computes it. Cells keep their ids, order and code; the first markdown cell gains one line saying
where the numbers in the text come from.

The book's Colab buttons open these copies: .github/workflows/book.yml writes them, after the
build, to the ``colab`` branch (``book/NN_*.ipynb`` there), and ``_config.yml`` names that branch
(``repository.branch``), which is the branch Jupyter Book puts in the button's URL:
``https://colab.research.google.com/github/<owner>/<repo>/blob/colab/book/NN_x.ipynb``.
tests/book/test_colab_copies.py checks that the copies hold no MyST and match the sources cell by cell.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Dict, Optional

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from colab_markdown import Bibliography, convert, escape_markdown, format_glued  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
BUILT = ROOT / "_build" / "jupyter_execute" / "book"
NOTE = "*This is the book's chapter as a notebook ({page}). {numbers}*"
BUILT_NUMBERS = ("The numbers quoted in the text are those of the book's build (quick mode, on a CPU); the "
                 "cells print your own run's, which differ with the mode and the machine.")
POINTERS = "Where the text quotes a computed number, a bracket names the code cell that computes it."


def pages_url() -> str:
    """The rendered book's address, from pyproject.toml (one place, as the repository URL is)."""
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    return urls["Documentation"].rstrip("/") + "/"


def page_title(name: str) -> str:
    """The title of ``book/<name>`` (.ipynb or .md): its first '# ' heading."""
    path = next(p for p in (BOOK / f"{name}.ipynb", BOOK / f"{name}.md") if p.exists())
    if path.suffix == ".ipynb":
        text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    else:
        text = path.read_text()
    return re.search(r"^# (.+)$", text, re.M).group(1).strip()


def doc_link(content: str) -> str:
    """``{doc}`name``` or ``{doc}`text <name>``` as a link to the rendered page."""
    match = re.fullmatch(r"\s*(.*?)\s*<([^>]+)>\s*", content)
    text, name = (match.group(1), match.group(2)) if match else (None, content.strip())
    return f"[{text or page_title(name)}]({pages_url()}book/{name}.html)"


def glued_values(executed: Optional[Path]) -> Dict[str, str]:
    """name -> text/plain of every value the build glued in the chapter ``executed`` names: myst-nb
    writes them beside the executed notebook (``NN_x.glue.json``); else its scrapbook outputs."""
    if executed is None:
        return {}
    store = executed.with_suffix(".glue.json")
    if store.exists():
        return {name: out["data"]["text/plain"] for name, out in json.loads(store.read_text()).items()
                if "text/plain" in out.get("data", {})}
    if not executed.exists():
        return {}
    values = {}
    for cell in nbformat.read(executed, as_version=4).cells:
        for output in cell.get("outputs", []):
            scrap = output.get("metadata", {}).get("scrapbook", {})
            data = {k[len(scrap.get("mime_prefix", "")):]: v for k, v in output.get("data", {}).items()}
            if "name" in scrap and "text/plain" in data:
                values[scrap["name"]] = data["text/plain"]
    return values


def glue_cells(nb) -> Dict[str, int]:
    """name pattern -> the number (from 1) of the code cell that glues it, for pointers when nothing
    was built; ``glue(f"slope_{name}", ...)`` gives the pattern ``slope_.+``."""
    where = {}
    code = [c for c in nb.cells if c.cell_type == "code"]
    for number, cell in enumerate(code, 1):
        for name in re.findall(r"""\bglue\(\s*f?["']([^"']+)["']""", cell.source):
            pattern = "".join(".+" if part.startswith("{") else re.escape(part)
                              for part in re.split(r"(\{[^}]*\})", name) if part)
            where.setdefault(pattern, number)
    return where


def glue_cell(cells: Dict[str, int], name: str) -> Optional[int]:
    return next((n for pattern, n in cells.items() if re.fullmatch(pattern, name)), None)


def colab_copy(source: Path, built: Optional[Path], bib: Bibliography):
    """The Colab-ready notebook of ``source``, glued values from ``built`` (an executed copy, or None)."""
    nb = nbformat.read(source, as_version=4)
    values, cells = glued_values(built), glue_cells(nb)

    def glued(name, spec):
        if name in values:
            return escape_markdown(format_glued(values[name], spec))
        number = glue_cell(cells, name)
        if number is None:   # glued in a loop over names: the cell that spells the name out
            number = next((k for k, c in enumerate(code, 1) if f'"{name}"' in c.source or f"'{name}'" in c.source),
                          None)
        if number is None:   # glued from a reader's dict: the last cell before this text that glues
            number = next((k for k in range(seen, 0, -1) if re.search(r"\bglue(_all)?\(", code[k - 1].source)), None)
        if number is None:   # text above the cell that glues it (a page that opens with its findings)
            number = next((k for k, c in enumerate(code, 1) if re.search(r"\bglue(_all)?\(", c.source)), None)
        if number is None:
            raise KeyError(f"{source.name}: {{glue:text}}`{name}` is glued by no code cell")
        return f"[`{name}`: computed by code cell {number}]"

    cited, code, seen = [], [c for c in nb.cells if c.cell_type == "code"], 0
    for cell in nb.cells:
        seen += cell.cell_type == "code"
        if cell.cell_type == "markdown":
            cell.source = convert(cell.source, bib, doc_link, glued, cited)
    first = next(c for c in nb.cells if c.cell_type == "markdown")
    page = f"[rendered page]({pages_url()}book/{source.stem}.html)"
    first.source += "\n\n" + NOTE.format(page=page, numbers=BUILT_NUMBERS if values else POINTERS)
    if cited:
        nb.cells.append(nbformat.v4.new_markdown_cell(bib.section(cited), id="colab-references"))
    return nb


def chapters():
    return sorted(BOOK.glob("*.ipynb"))   # the chapters and the pages after them (appendix, ledger)


def write_copies(out: Path, built: Optional[Path] = BUILT) -> list:
    """Every chapter's copy into ``out``; returns the paths written."""
    bib, written = Bibliography(BOOK / "references.bib"), []
    out.mkdir(parents=True, exist_ok=True)
    for source in chapters():
        executed = built / source.name if built is not None else None
        path = out / source.name
        path.write_text(nbformat.writes(colab_copy(source, executed, bib)) + "\n")
        written.append(path)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--built", type=Path, default=BUILT, help="the executed notebooks of the book build")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "colab" / "book", help="where the copies go")
    args = parser.parse_args(argv)
    if not args.built.is_dir():
        print(f"no executed notebooks in {args.built}: glued numbers become pointers to their cells", file=sys.stderr)
    for path in write_copies(args.out, args.built if args.built.is_dir() else None):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
