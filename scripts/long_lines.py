"""Lines the book's pages would have to scroll sideways: code lines longer than the column.

    python scripts/long_lines.py [--limit 88] [--glue | --outputs] [book/05_training.ipynb ...]

Code cells are ruff's (E501 at 88, pyproject.toml; ``ruff check book``). This checks what ruff
cannot read: the code fences (```python, ```bash, bare ```) in markdown cells and book/*.md, with
an admonition's narrower box. Prints one line per offender: file, cell index, line number in the
cell, length. With --glue it lists instead the
code cells the HTML shows (no remove-input, remove-cell, hide-input or hide-cell tag) that call
glue( or glue_all(. With --outputs it checks the printed lines of executed notebooks (the
committed ones have no outputs; tests/book/test_browser.py measures the built pages). Exits 1
when anything is found.
"""
import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Characters of the code font that fit the content column at 1280 px (tests/book/test_browser.py
# measures the column; 0.875 rem Menlo/monospace in sphinx-book-theme's 1280 px layout).
LIMIT = 88
ADMONITION_LIMIT = 79  # an admonition's box is 671 px of the 740 px column
HIDDEN_INPUT = {"remove-input", "remove-cell", "hide-input", "hide-cell"}
GLUE = re.compile(r"\bglue(_all)?\(")
WIDGET = "application/vnd.jupyter.widget-view+json"  # the HTML drops these (book/_ext)
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*(\S*)")


def cells(path: Path):
    """(index, cell type, tags, source lines) of a notebook, or one markdown cell for a .md file."""
    if path.suffix == ".md":
        return [(0, "markdown", [], path.read_text(encoding="utf-8").splitlines())]
    notebook = json.loads(path.read_text(encoding="utf-8"))
    return [(i, c["cell_type"], c.get("metadata", {}).get("tags", []), "".join(c["source"]).splitlines())
            for i, c in enumerate(notebook["cells"])]


def code_lines(kind, lines):
    """(line number, line, limit) of the inside of a markdown cell's code fences (not MyST directives
    such as ```{admonition}, whose boxes are narrower: a fence inside one has ADMONITION_LIMIT)."""
    if kind == "code":
        return []  # ruff checks code cells
    found, fence, directives = [], None, []  # directives: the open ```{...} markers
    for number, line in enumerate(lines, 1):
        match = FENCE.match(line)
        if fence is not None:
            if line.strip() == fence:
                fence = None
            else:
                found.append((number, line, ADMONITION_LIMIT if directives else LIMIT))
        elif match and directives and line.strip() == directives[-1]:
            directives.pop()
        elif match and match.group(2).startswith("{"):
            directives.append(match.group(1))
        elif match:
            fence = match.group(1)
    return found


def long_lines(path: Path, limit: int = LIMIT):
    """(cell index, line number, length, the limit there) of each code line in ``path``
    longer than ``limit`` (less the admonition's margin, inside an admonition)."""
    return [(index, number, len(line.expandtabs(4)), limit - (LIMIT - box))
            for index, kind, _, lines in cells(path)
            for number, line, box in code_lines(kind, lines)
            if len(line.expandtabs(4)) > limit - (LIMIT - box)]


def printed_lines(path: Path, limit: int = LIMIT):
    """(cell index, line number, length) of each printed line longer than ``limit`` in an
    executed notebook's shown outputs: streams, and plain text where no HTML, image or widget
    stands in."""
    found = []
    for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        lines = []
        if {"remove-cell", "remove-output"} & set(cell.get("metadata", {}).get("tags", [])):
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if output["output_type"] == "stream":
                lines += "".join(output["text"]).splitlines()
            elif "text/plain" in data and not {"text/html", "image/png", "image/svg+xml",
                                               WIDGET} & set(data):
                lines += "".join(data["text/plain"]).splitlines()
        found += [(index, n, len(line)) for n, line in enumerate(lines, 1) if len(line) > limit]
    return found


def visible_glue(path: Path):
    """Indices of the code cells the HTML shows that call glue or glue_all."""
    return [index for index, kind, tags, lines in cells(path)
            if kind == "code" and not HIDDEN_INPUT & set(tags) and GLUE.search("\n".join(lines))]


def book_files():
    return sorted((ROOT / "book").glob("*.ipynb")) + sorted((ROOT / "book").glob("*.md"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--limit", type=int, default=LIMIT)
    parser.add_argument("--outputs", action="store_true",
                        help="printed lines of executed notebooks instead (e.g. run_nb's copies)")
    parser.add_argument("--glue", action="store_true", help="list visible code cells calling glue")
    args = parser.parse_args(argv)
    found = 0
    for path in args.files or book_files():
        name = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
        if args.outputs:
            for index, number, length in printed_lines(path, args.limit):
                print(f"{name}: cell {index} printed line {number}: {length} > {args.limit}")
                found += 1
            continue
        if args.glue:
            for index in visible_glue(path):
                print(f"{name}: cell {index} calls glue in a visible code cell")
                found += 1
            continue
        for index, number, length, limit in long_lines(path, args.limit):
            print(f"{name}: cell {index} line {number}: {length} > {limit}")
            found += 1
    print(f"{found} found", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
