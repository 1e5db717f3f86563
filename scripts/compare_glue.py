"""Compare the glued values of two sets of executed notebooks; print the differences as JSON.

    python scripts/compare_glue.py BEFORE_DIR AFTER_DIR [--names 03_routing 11_tutorial_code ...]

myst-nb's ``glue`` stores each value as a display output whose metadata holds ``scrapbook.name``
(its data keys carry a ``mime_prefix`` when the value is not shown). For every notebook in both
folders this lists the names glued in one set only and the names whose text differs. A difference
is also judged "as printed": each ``{glue:text}`name:fmt``` in the notebook's markdown formats both
values with ``fmt``, and the value counts as equal on the page when every such use prints alike.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from myst_nb.core.variables import format_plain_text

USES = re.compile(r"\{glue(?::text|:)?\}`([^`:]+)(?::([^`]*))?`")


def glued(path: Path):
    """{name: the glued value's text/plain}, and {name: the format specs the markdown uses it with}."""
    nb = json.loads(path.read_text())
    values, formats = {}, {}
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for name, spec in USES.findall("".join(cell["source"])):
                formats.setdefault(name, set()).add(spec)
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook")
            if meta:
                prefix = meta.get("mime_prefix", "")
                values[meta["name"]] = out["data"].get(prefix + "text/plain")
    return values, formats


def as_printed(text: str, spec: str):
    """What ``{glue:text}`name:spec``` prints (myst-nb's own formatting), or the error it would raise."""
    try:
        return format_plain_text(text, spec)
    except (TypeError, ValueError) as err:
        return f"{type(err).__name__}: {err}"


def compare(before: Path, after: Path, names=None):
    report = {}
    stems = names or sorted(p.stem for p in before.glob("*.ipynb") if (after / p.name).exists())
    for stem in stems:
        (old, formats), (new, _) = glued(before / f"{stem}.ipynb"), glued(after / f"{stem}.ipynb")
        differ = {}
        for name in sorted(set(old) & set(new)):
            if old[name] != new[name]:
                specs = sorted(formats.get(name) or {""})
                printed = [(as_printed(old[name], s), as_printed(new[name], s)) for s in specs]
                differ[name] = {"before": old[name], "after": new[name], "formats": specs,
                                "equal_as_printed": all(a == b for a, b in printed)}
        report[stem] = {"glued": len(new), "only_before": sorted(set(old) - set(new)),
                        "only_after": sorted(set(new) - set(old)), "differ": differ}
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--names", nargs="*", help="notebook stems (default: every notebook in both)")
    args = parser.parse_args(argv)
    print(json.dumps(compare(args.before, args.after, args.names), indent=1))


if __name__ == "__main__":
    main()
