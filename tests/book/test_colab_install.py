"""The Colab install cell: one URL and one version, repeated exactly in every chapter's first cell,
which the HTML leaves out; the version in one place (capsedu.__version__, read by pyproject.toml)."""
import json
import re
import tomllib
from pathlib import Path

from cli_helpers import load_script

import capsedu

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def test_the_one_place_agrees_with_the_book_config():
    config = (ROOT / "_config.yml").read_text()
    assert re.search(r"^repository:\s*\n\s+url:\s*(\S+)", config, re.M).group(1) == capsedu.REPO_URL
    assert capsedu.REVISION == f"v{capsedu.__version__}"          # a release tag, not a branch that moves
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "capsedu.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", capsedu.__version__)


def test_every_notebook_installs_the_release_from_the_index_then_the_tag():
    module = load_script("scripts/colab_cell.py")
    expected = module.cell_source()
    assert f'VERSION = "{capsedu.__version__}"' in expected
    assert 'f"capsedu=={VERSION}"' in expected and '@v{VERSION}' in expected and "returncode != 0" in expected
    for nb in NOTEBOOKS:
        cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
        first = "".join(cells[0]["source"])
        assert first == expected, f"{nb.name}: first cell differs; run: python scripts/colab_cell.py book/{nb.name}"
        assert module.TAG in cells[0]["metadata"].get("tags", []), f"{nb.name}: the install cell shows in the HTML"
        later = "".join("".join(c["source"]) for c in cells[1:])
        assert "pip install" not in later and "git+" not in later, f"{nb.name} installs something a second time"
