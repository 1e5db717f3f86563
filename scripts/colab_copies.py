"""Colab-ready copies of the chapters: markdown a notebook front end renders, code cells unchanged.

    python scripts/colab_copies.py [--built _build/jupyter_execute/book] [--out _build/colab/book]

For every ``book/*.ipynb`` (the chapters and the appendix pages) it writes a copy whose markdown
has no MyST left:

- ``{cite}`key``` -> "(Sabour et al., 2017)" from book/references.bib, with the chapter's
  reference list at the end;
- ``{doc}`name``` -> a link to the rendered page (``[project.urls] Documentation``), titled as the
  page is (or as the role says);
- ``{glue:text}`name:fmt``` -> the value the book build glued (``--built``: myst-nb writes
  ``NN_x.glue.json`` beside each executed notebook), formatted by myst-nb's own function, or, where it
  was not built, a pointer to the code cell that computes it;
- a fenced directive -> an HTML ``<details>`` for a dropdown, a quotation otherwise;
- ``<span class="html-only">...</span>``: a sentence true of the HTML pages only, left out.

Cells keep their ids, order and code; the first markdown cell gains one line saying where the
numbers in the text come from.

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
import unicodedata
from pathlib import Path
from typing import Callable

import nbformat
from myst_nb.core.variables import format_plain_text  # the HTML's formatting of a glued value

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
BUILT = ROOT / "_build" / "jupyter_execute" / "book"
NOTE = "*This is the book's chapter as a notebook ({page}). {numbers}*"
BUILT_NUMBERS = ("The numbers quoted in the text are those of the book's build (quick mode, on a CPU); the "
                 "cells print your own run's, which differ with the mode and the machine.")
POINTERS = "Where the text quotes a computed number, a bracket names the code cell that computes it."


ROLE = re.compile(r"\{(cite|doc|glue:text)\}`([^`]*)`")
HTML_ONLY = re.compile(r'\s*<span class="html-only">.*?</span>', re.S)
FENCE_OPEN = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w-]+)\}[ \t]*(?P<title>.*)$")
OPTION = re.compile(r"^:(?P<key>[\w-]+):[ \t]*(?P<value>.*)$")


# ---------------------------------------------------------------- citations
def detex(text: str) -> str:
    """BibTeX text as plain Unicode, by pybtex's LaTeX reader: {\\'e} composed, braces dropped."""
    from pybtex.richtext import Text
    return unicodedata.normalize("NFC", " ".join(Text.from_latex(text).render_as("text").split()))


class Bibliography:
    """book/references.bib (read by pybtex, as sphinxcontrib-bibtex reads it), cited as
    "(Sabour et al., 2017)" and listed as a reference section."""

    def __init__(self, path: Path):
        from pybtex.database import parse_string
        self.entries = parse_string(Path(path).read_text(encoding="utf-8"), "bibtex").entries

    def _authors(self, key: str, full: bool) -> list[str]:
        """Family names ({higgsfield} stays whole), or "First Last" names with ``full``."""
        people = self.entries[key].persons.get("author", [])
        return [detex(" ".join((p.first_names + p.middle_names if full else []) + p.prelast_names + p.last_names))
                for p in people]

    def label(self, key: str) -> str:
        if key not in self.entries:
            raise KeyError(f"{{cite}}`{key}`: no entry {key!r} in the bibliography")
        fields = self.entries[key].fields
        names = self._authors(key, full=False) or [detex(fields.get("title", key))]
        who = names[0] if len(names) == 1 else " and ".join(names) if len(names) == 2 else f"{names[0]} et al."
        return f"{who}, {fields.get('year', 'n.d.')}"

    def cite(self, keys: str) -> str:
        return "(" + "; ".join(self.label(k.strip()) for k in keys.split(",") if k.strip()) + ")"

    def reference(self, key: str) -> str:
        """One line of the reference list: authors (year). Title. Where. Link."""
        e = {k.lower(): v if k.lower() in ("url", "doi") else detex(v) for k, v in self.entries[key].fields.items()}
        authors = " and ".join(", ".join(self._authors(key, full=True)).rsplit(", ", 1))
        where = e.get("journal") or e.get("booktitle") or e.get("howpublished") or e.get("publisher", "")
        title = e.get("title", key)
        parts = [f"{authors} ({e.get('year', 'n.d.')}). *{title}*{'' if title.endswith(('.', '?', '!')) else '.'}",
                 where and f"{where}."]
        link = e.get("url") or (e.get("doi") and f"https://doi.org/{e['doi']}")
        return " ".join(p for p in [*parts, link and f"<{link}>"] if p)

    def section(self, keys) -> str:
        """The markdown of a chapter's reference list, sorted by the cited labels."""
        lines = [f"- {self.reference(k)}" for k in sorted(set(keys), key=lambda k: (self.label(k), k))]
        return "## References\n\n" + "\n".join(lines)


# ---------------------------------------------------------------- glued values
def escape_markdown(text: str) -> str:
    """Plain text that markdown shows as it is (a glued '2*3' must not turn into emphasis)."""
    return re.sub(r"([\\`*_<\[\]])", r"\\\1", text)


# ---------------------------------------------------------------- directives
def directives_to_markdown(text: str) -> str:
    """Each fenced directive as a front end renders it: a dropdown as <details>, others as quotations."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        match = FENCE_OPEN.match(lines[i])
        if match is None:
            out.append(lines[i])
            i += 1
            continue
        fence, options, j = match.group("fence"), {}, i + 1
        while j < len(lines) and OPTION.match(lines[j]):
            option = OPTION.match(lines[j])
            options[option.group("key")] = option.group("value")
            j += 1
        end = next((k for k in range(j, len(lines)) if lines[k].strip() == fence), None)
        if end is None:
            raise ValueError(f"directive {{{match.group('name')}}} opened with {fence} is never closed")
        body = directives_to_markdown("\n".join(lines[j:end])).strip("\n")
        title = match.group("title").strip() or match.group("name").capitalize()
        if "dropdown" in options.get("class", "").split():
            out += ["<details>", f"<summary>{title}</summary>", "", body, "", "</details>"]
        else:
            out += [f"> **{title}**", ">", *[f"> {line}".rstrip() for line in body.split("\n")]]
        i = end + 1
    return "\n".join(out)


# ---------------------------------------------------------------- one cell
def convert(text: str, bib: Bibliography, doc_link: Callable[[str], str],
            glued: Callable[[str, str], str], cited: list[str] | None = None) -> str:
    """A markdown cell's source for a notebook front end; the cited keys are appended to ``cited``."""
    text = HTML_ONLY.sub("", text)

    def role(match):
        name, content = match.groups()
        if name == "cite":
            if cited is not None:
                cited.extend(k.strip() for k in content.split(","))
            return bib.cite(content)
        if name == "doc":
            return doc_link(content)
        key, _, spec = content.rpartition(":") if ":" in content else (content, "", "s")
        return glued(key, spec)

    return directives_to_markdown(ROLE.sub(role, text))


# ---------------------------------------------------------------- the copies
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


def glued_values(executed: Path | None) -> dict[str, str]:
    """name -> text/plain of every value the build glued in the chapter ``executed`` names
    (myst-nb's ``NN_x.glue.json`` beside it); none where it was not built."""
    store = executed and executed.with_suffix(".glue.json")
    if store is None or not store.exists():
        return {}
    return {name: out["data"]["text/plain"] for name, out in json.loads(store.read_text()).items()
            if "text/plain" in out.get("data", {})}


def glue_cells(nb) -> dict[str, int]:
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


def glue_cell(cells: dict[str, int], name: str) -> int | None:
    return next((n for pattern, n in cells.items() if re.fullmatch(pattern, name)), None)


def colab_copy(source: Path, built: Path | None, bib: Bibliography):
    """The Colab-ready notebook of ``source``, glued values from ``built`` (an executed copy, or None)."""
    nb = nbformat.read(source, as_version=4)
    values, cells = glued_values(built), glue_cells(nb)

    def glued(name, spec):
        if name in values:
            return escape_markdown(format_plain_text(values[name], spec))
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


def write_copies(out: Path, built: Path | None = BUILT) -> list:
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
