"""The first cell of every chapter: in Colab, install this release of capsedu.

The version and the repository URL live in ``capsedu/__init__.py`` (``__version__``, ``REPO_URL``;
pyproject.toml reads the version from there). A notebook opened in Colab cannot import capsedu
before installing it, so each first cell carries a copy of both: it installs ``capsedu==VERSION``
from the package index and, where that fails (not published yet, no index), the release tag
``vVERSION`` from the repository. Outside Colab the cell does nothing, so the HTML leaves it out
(tag ``remove-input``; Colab ignores tags and runs it). This script writes that cell, and only
that cell, from the one place; ``tests/book/test_colab_install.py`` checks every notebook's copy.

    python scripts/colab_cell.py [book/NN_x.ipynb ...]      # default: every notebook in book/
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import capsedu  # noqa: E402  (the checkout's, not an installed copy)

TEMPLATE = '''\
import sys

REPO_URL = "{url}"  # capsedu.REPO_URL, as in _config.yml
VERSION = "{version}"  # capsedu.__version__: the release this page was written for
if "google.colab" in sys.modules:  # in Colab: install capsedu; say if it must restart
    import subprocess
    from importlib.metadata import version
    modules = ("numpy", "torch", "matplotlib", "ipywidgets", "tqdm")
    loaded = {{m: version(m) for m in modules if m in sys.modules}}
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    if subprocess.run([*pip, f"capsedu=={{VERSION}}"]).returncode != 0:
        print(f"capsedu {{VERSION}} is not on the package index; "
              f"installing its release tag from {{REPO_URL}}")
        subprocess.run([*pip, f"git+{{REPO_URL}}@v{{VERSION}}"], check=True)
    changed = [m for m, v in loaded.items() if version(m) != v]
    if changed:
        print(f"Restart needed: pip replaced {{', '.join(changed)}}, already loaded. "
              "Use Runtime > Restart session, then run this page from the top.")'''
TAG = "remove-input"  # hidden in the HTML, where it does nothing; Colab runs it


def cell_source() -> str:
    """The first code cell's source, from capsedu.REPO_URL and capsedu.__version__."""
    return TEMPLATE.format(url=capsedu.REPO_URL, version=capsedu.__version__)


def main(paths) -> int:
    for path in paths or sorted((ROOT / "book").glob("*.ipynb")):
        # Plain JSON, not nbformat: every other cell keeps its bytes (key order included), so the
        # rewrite merges with other edits of the notebook.
        text = Path(path).read_text(encoding="utf-8")
        nb = json.loads(text)
        cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
        tags = cell.setdefault("metadata", {}).get("tags", [])
        if "".join(cell["source"]) != cell_source() or TAG not in tags:
            cell["source"] = cell_source().splitlines(keepends=True)
            cell["metadata"]["tags"] = tags if TAG in tags else [*tags, TAG]
            Path(path).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            print(f"rewrote the first cell of {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
