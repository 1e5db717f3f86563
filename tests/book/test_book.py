"""The book's wiring: one repository URL, the licences declared, notebooks committed without
outputs and with cell ids, every chapter in the toc."""
import json
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def repository_url() -> str:
    match = re.search(r"^repository:\s*\n\s+url:\s*(\S+)", (ROOT / "_config.yml").read_text(), re.M)
    assert match, "_config.yml has no repository.url"
    return match.group(1)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.name)
def test_each_notebook_is_wired_in(nb):
    """_config.yml's repository URL as its REPO_URL, no outputs, in _toc.yml, nbformat 4.5 cell ids
    (unique; without them every build warns and a front end invents new ones on each save), and no
    nbval marker: the chapters run once, from the wheel (test_colab_wheel.py), where a failing cell
    fails; that is all of nbval's lax mode as long as no cell asks nbval for more."""
    notebook = json.loads(nb.read_text())
    cells = notebook["cells"]
    found = re.findall(r'REPO_URL = "([^"]+)"', "".join("".join(c["source"]) for c in cells))
    assert found == [repository_url()], f"REPO_URL {found} differs from _config.yml's"
    assert not any(c.get("outputs") for c in cells if c["cell_type"] == "code")
    assert f"book/{nb.stem}" in (ROOT / "_toc.yml").read_text(), "missing from _toc.yml"
    ids = [c.get("id") for c in cells]
    assert (notebook["nbformat"], notebook["nbformat_minor"]) >= (4, 5) and None not in ids
    assert len(set(ids)) == len(ids), "duplicate cell ids"
    for cell in cells:
        tags = cell.get("metadata", {}).get("tags", [])
        assert "NBVAL_" not in "".join(cell["source"]) and not any(t.startswith("nbval") for t in tags)


def test_the_package_names_the_same_repository_and_ships_the_licences():
    assert NOTEBOOKS                                   # the parametrized test above is not empty
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    url = repository_url()
    assert project["urls"]["Repository"] == url and project["urls"]["Issues"] == f"{url}/issues"
    assert project["license"] == "MIT AND CC-BY-SA-3.0"
    for path in project["license-files"]:
        assert (ROOT / path).is_file(), f"license file {path} is missing"
    notice = (ROOT / "capsedu" / "assets" / "NOTICE.md").read_text()
    for shipped in ("mnist10k.npz", "capsnet_mnist_sample.pt", "CC BY-SA 3.0", "LeCun"):
        assert shipped in notice, f"NOTICE.md does not mention {shipped}"
