"""The book's wiring: one repository URL, notebooks committed without outputs, every chapter in the toc."""
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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


def test_notebooks_are_committed_without_outputs():
    for nb in NOTEBOOKS:
        cells = json.loads(nb.read_text())["cells"]
        assert not any(c.get("outputs") for c in cells if c["cell_type"] == "code"), nb.name


def test_every_notebook_is_in_the_toc():
    toc = (ROOT / "_toc.yml").read_text()
    for nb in NOTEBOOKS:
        assert f"book/{nb.stem}" in toc, f"{nb.name} is missing from _toc.yml"
