"""The Colab install line: one URL and one revision, repeated exactly in every chapter's first cell."""
import importlib.util
import json
import re
from pathlib import Path

import capsedu

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def colab_cell_module():
    spec = importlib.util.spec_from_file_location("colab_cell", ROOT / "scripts" / "colab_cell.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_one_place_agrees_with_the_book_config():
    config = (ROOT / "_config.yml").read_text()
    assert re.search(r"^repository:\s*\n\s+url:\s*(\S+)", config, re.M).group(1) == capsedu.REPO_URL
    assert capsedu.REVISION == f"v{capsedu.__version__}"          # a release tag, not a branch that moves


def test_every_notebook_installs_the_pinned_revision():
    expected = colab_cell_module().cell_source()
    assert f'REVISION = "{capsedu.REVISION}"' in expected and "@{REVISION}" in expected
    for nb in NOTEBOOKS:
        cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
        first = "".join(cells[0]["source"])
        assert first == expected, f"{nb.name}: first cell differs; run: python scripts/colab_cell.py book/{nb.name}"
        later = "".join("".join(c["source"]) for c in cells[1:])
        assert "pip install" not in later and "git+" not in later, f"{nb.name} installs something a second time"
