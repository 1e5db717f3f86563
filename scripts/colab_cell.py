"""The first cell of every chapter: in Colab, install capsedu at the pinned revision.

The repository URL and the revision live in ``capsedu/__init__.py`` (``REPO_URL``,
``REVISION``). A notebook opened in Colab cannot import capsedu before installing it,
so each first cell carries a copy of both; this script writes that cell from the one
place, and ``tests/test_colab_install.py`` checks every notebook's copy.

    python scripts/colab_cell.py [book/NN_x.ipynb ...]      # default: every notebook in book/
"""
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import capsedu  # noqa: E402  (the checkout's, not an installed copy)

TEMPLATE = '''\
import sys

REPO_URL = "{url}"  # capsedu.REPO_URL, as in _config.yml
REVISION = "{revision}"  # capsedu.REVISION: the release this page was written for
if "google.colab" in sys.modules:  # in Colab: install capsedu, and say if the session must restart
    import subprocess
    from importlib.metadata import version
    loaded = {{m: version(m) for m in ("numpy", "torch", "matplotlib", "ipywidgets", "tqdm") if m in sys.modules}}
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"git+{{REPO_URL}}@{{REVISION}}"], check=True)
    changed = [m for m, v in loaded.items() if version(m) != v]
    if changed:
        print(f"Restart needed: pip replaced {{', '.join(changed)}}, already loaded in this session. "
              "Use Runtime > Restart session, then run this page from the top.")'''


def cell_source() -> str:
    """The first code cell's source, from capsedu.REPO_URL and capsedu.REVISION."""
    return TEMPLATE.format(url=capsedu.REPO_URL, revision=capsedu.REVISION)


def first_code_cell(nb):
    return next(c for c in nb.cells if c.cell_type == "code")


def main(paths) -> int:
    for path in paths or sorted((ROOT / "book").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        cell = first_code_cell(nb)
        if cell.source != cell_source():
            cell.source = cell_source()
            Path(path).write_text(nbformat.writes(nb) + "\n")
            print(f"rewrote the first cell of {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
