"""The book's wiring: one repository URL, the licences declared, notebooks committed without
outputs, every chapter in the toc."""
import json
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def repository_url() -> str:
    match = re.search(r"^repository:\s*\n\s+url:\s*(\S+)", (ROOT / "_config.yml").read_text(), re.M)
    assert match, "_config.yml has no repository.url"
    return match.group(1)


def test_there_are_notebooks():
    assert NOTEBOOKS


def test_notebooks_repeat_the_one_repository_url():
    url = repository_url()
    for nb in NOTEBOOKS:
        source = "".join("".join(c["source"]) for c in json.loads(nb.read_text())["cells"])
        found = re.findall(r'REPO_URL = "([^"]+)"', source)
        assert found == [url], f"{nb.name}: REPO_URL {found} differs from _config.yml's {url}"


def test_the_package_names_the_same_repository():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    url = repository_url()
    assert project["urls"]["Repository"] == url
    assert project["urls"]["Issues"] == f"{url}/issues"


def test_the_licences_are_declared_and_shipped():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT AND CC-BY-SA-3.0"
    for path in project["license-files"]:
        assert (ROOT / path).is_file(), f"license file {path} is missing"
    notice = (ROOT / "capsedu" / "assets" / "NOTICE.md").read_text()
    for shipped in ("mnist10k.npz", "capsnet_mnist_sample.pt", "CC BY-SA 3.0", "LeCun"):
        assert shipped in notice, f"NOTICE.md does not mention {shipped}"


def test_notebooks_are_committed_without_outputs():
    for nb in NOTEBOOKS:
        cells = json.loads(nb.read_text())["cells"]
        assert not any(c.get("outputs") for c in cells if c["cell_type"] == "code"), nb.name


def test_every_notebook_is_in_the_toc():
    toc = (ROOT / "_toc.yml").read_text()
    for nb in NOTEBOOKS:
        assert f"book/{nb.stem}" in toc, f"{nb.name} is missing from _toc.yml"


def test_no_cell_carries_an_nbval_marker():
    """The chapters run once in the tests, from the wheel (test_colab_wheel.py), where a failing cell fails;
    that is all of nbval's lax mode as long as no cell asks nbval for more (an output check, a skip)."""
    for nb in NOTEBOOKS:
        for cell in json.loads(nb.read_text())["cells"]:
            tags = cell.get("metadata", {}).get("tags", [])
            assert "NBVAL_" not in "".join(cell["source"]) and not any(t.startswith("nbval") for t in tags), nb.name
