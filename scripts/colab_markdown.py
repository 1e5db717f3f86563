"""MyST markdown to the markdown a notebook front end renders (Colab, Jupyter): the conversions.

scripts/colab_copies.py applies these to every markdown cell of a chapter:

- ``{cite}`key``` -> "(Sabour et al., 2017)", from book/references.bib (``Bibliography``);
- ``{doc}`name``` -> a link to the rendered page, titled as the page is (or as the role says);
- ``{glue:text}`name:fmt``` -> the value the book's build glued, formatted as myst-nb formats it,
  or, without a build, a pointer to the code cell that computes it;
- a fenced directive (```` ```{admonition} Title ````, ``:class: dropdown``) -> an HTML
  ``<details>`` for a dropdown, a quotation otherwise;
- ``<span class="html-only">...</span>``: a sentence true of the HTML pages only, left out.

Nothing here imports capsedu, myst-nb or Sphinx; the .bib file is read by pybtex (which
sphinxcontrib-bibtex, in the book's environment, reads it with too).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Callable, Dict, List, Optional

ROLE = re.compile(r"\{(cite|doc|glue:text)\}`([^`]*)`")
HTML_ONLY = re.compile(r'\s*<span class="html-only">.*?</span>', re.S)
FENCE_OPEN = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w-]+)\}[ \t]*(?P<title>.*)$")
OPTION = re.compile(r"^:(?P<key>[\w-]+):[ \t]*(?P<value>.*)$")
TEX_ACCENTS = {"'": "\u0301", '"': "\u0308", "`": "\u0300", "^": "\u0302", "~": "\u0303"}


# ---------------------------------------------------------------- citations
def detex(text: str) -> str:
    """BibTeX text as plain Unicode: accents such as {\\'e} composed, grouping braces dropped."""
    import unicodedata
    text = re.sub(r"\{?\\([\'\"`^~])\{?(\w)\}?\}?", lambda m: m.group(2) + TEX_ACCENTS[m.group(1)], text)
    text = text.replace("``", "\u201c").replace("''", "\u201d").replace("--", "\u2013")
    text = text.replace("{", "").replace("}", "")
    return unicodedata.normalize("NFC", " ".join(text.split()))


def parse_bib(text: str) -> Dict[str, Dict[str, str]]:
    """Every entry of a .bib file (pybtex, sphinxcontrib-bibtex's parser): key -> {field: raw value};
    the author list back in BibTeX's "Last, First and ..." form, braces kept, for ``surnames``."""
    from pybtex.database import parse_string
    return {key: {"type": e.type, **{k.lower(): v for k, v in e.fields.items()},
                  **{role.lower(): " and ".join(map(str, people)) for role, people in e.persons.items()}}
            for key, e in parse_string(text, "bibtex").entries.items()}


def surnames(authors: str) -> List[str]:
    """The family names of a BibTeX author list ("Sabour, Sara and Frosst, Nicholas"; "{higgsfield}")."""
    names = []
    for name in re.split(r"\s+and\s+", authors.strip()):
        if name.startswith("{") and name.endswith("}"):
            names.append(detex(name))
        elif "," in name:
            names.append(detex(name.split(",")[0]))
        else:
            names.append(detex(name).split()[-1])
    return names


class Bibliography:
    """book/references.bib, cited as "(Sabour et al., 2017)" and listed as a reference section."""

    def __init__(self, path: Path):
        self.entries = parse_bib(Path(path).read_text(encoding="utf-8"))

    def label(self, key: str) -> str:
        if key not in self.entries:
            raise KeyError(f"{{cite}}`{key}`: no entry {key!r} in the bibliography")
        entry = self.entries[key]
        names = surnames(entry.get("author", "")) or [detex(entry.get("title", key))]
        who = names[0] if len(names) == 1 else " and ".join(names) if len(names) == 2 else f"{names[0]} et al."
        return f"{who}, {entry.get('year', 'n.d.')}"

    def cite(self, keys: str) -> str:
        return "(" + "; ".join(self.label(k.strip()) for k in keys.split(",") if k.strip()) + ")"

    def reference(self, key: str) -> str:
        """One line of the reference list: authors (year). Title. Where. Link."""
        e = {k: detex(v) for k, v in self.entries[key].items()}
        authors = " and ".join(", ".join(self._full_names(self.entries[key].get("author", ""))).rsplit(", ", 1))
        where = e.get("journal") or e.get("booktitle") or e.get("howpublished") or e.get("publisher", "")
        title = e.get("title", key)
        parts = [f"{authors} ({e.get('year', 'n.d.')}). *{title}*{'' if title.endswith(('.', '?', '!')) else '.'}",
                 where and f"{where}."]
        link = e.get("url") or (e.get("doi") and f"https://doi.org/{e['doi']}")
        return " ".join(p for p in [*parts, link and f"<{link}>"] if p)

    @staticmethod
    def _full_names(authors: str) -> List[str]:
        full = []
        for name in re.split(r"\s+and\s+", authors.strip()):
            last, _, first = name.partition(",")
            full.append(detex(f"{first.strip()} {last.strip()}" if first else name))
        return full

    def section(self, keys) -> str:
        """The markdown of a chapter's reference list, sorted by the cited labels."""
        lines = [f"- {self.reference(k)}" for k in sorted(set(keys), key=self.label)]
        return "## References\n\n" + "\n".join(lines)


# ---------------------------------------------------------------- glued values
def format_glued(plain: str, spec: str) -> str:
    """A glued value as the HTML shows it: the text/plain repr evaluated when it is a literal, then
    formatted with ``spec`` (its last character decides int, float or str, as in myst-nb)."""
    try:
        value = ast.literal_eval(plain)
    except (SyntaxError, ValueError):
        value = plain
    if spec == "":
        return str(value)
    kind = spec[-1]
    if kind == "s":
        value = str(value)
    elif kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    return format(value, spec)


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
            glued: Callable[[str, str], str], cited: Optional[List[str]] = None) -> str:
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
