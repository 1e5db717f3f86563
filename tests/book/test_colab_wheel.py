"""Colab's path, as a reader takes it: the wheel installed, the notebooks alone in an empty folder.

The wheel is built from this checkout and installed (not editable) into a fresh venv with only
its declared dependencies, at the versions Colab preinstalls (``COLAB``), not the newest. Then only
the ``.ipynb`` files are copied into an empty folder and each chapter runs top to bottom there in
smoke mode with nbclient, the network cut (a proxy that answers nothing): a build-only import
(``myst_nb``), a path relative to the repository or a stored run missing from the package fails here.

torch comes from the running environment, read-only: a folder of links to torch and the packages
it requires, named in a ``.pth`` file, so the test does not install gigabytes; nothing else of the
running environment is visible to the venv. The first run downloads the rest (about a minute);
later runs take them from pip's cache. Deselect with ``-m "not colab_wheel"`` where a wheel cannot
be built (no package registry).
"""
import importlib.metadata as metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))
# What Colab preinstalls, at its versions (googlecolab/backend-info, pip-freeze.gpu.txt): a reader
# there runs the book on these, so the test does too.
COLAB = ["numpy==2.0.2", "matplotlib==3.10.0", "ipykernel==6.17.1", "IPython==7.34.0", "ipywidgets==7.7.1",
         "traitlets==5.7.1", "pandas==2.2.2", "scipy==1.16.3", "statsmodels==0.14.6"]
NO_NETWORK = "http://127.0.0.1:9"  # the discard port: every download through it fails at once
# Chapters that read stored runs, and what they print when a stored run is shown or is missing.
STORED_CHAPTERS = ("07_two_digits", "09_paper_experiments", "10_after_routing")
FALLBACKS = ("showing the live preview instead", "the live preview stands in", "could not download",
             "stored weights are not available")

pytestmark = pytest.mark.colab_wheel


def requirement_closure(name: str):
    """The installed distributions ``name`` needs (itself included), following their requirements."""
    found, todo = {}, [name]
    while todo:
        key = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if key in found:
            continue
        found[key] = dist = metadata.distribution(key)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return found.values()


def link_torch(folder: Path) -> Path:
    """A folder of links to torch and its requirements, as installed here (read-only use)."""
    folder.mkdir()
    for dist in requirement_closure("torch"):
        for top in {Path(f).parts[0] for f in dist.files or []}:
            source = Path(dist.locate_file(top))
            if top in ("..", "__pycache__") or top.endswith(".pth") or (folder / top).exists():
                continue
            (folder / top).symlink_to(source)
    return folder


def run(*args, **kwargs):
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, args))} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """(the fresh venv's python, an empty folder holding only the notebooks, an environment for kernels)."""
    tmp = tmp_path_factory.mktemp("colab")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", ROOT)
    wheel = next((tmp / "dist").glob("capsedu-*.whl"))
    run(getattr(sys, "_base_executable", sys.executable), "-m", "venv", tmp / "venv")
    python = tmp / "venv" / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").strip())
    (site / "_torch_from_the_test_runner.pth").write_text(f"{link_torch(tmp / 'torch')}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "CAPSEDU_MODE")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel, *COLAB, env=env)
    book = tmp / "book"
    book.mkdir()
    for nb in NOTEBOOKS:
        shutil.copy(nb, book / nb.name)
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env[proxy] = NO_NETWORK
    env.update(CAPSEDU_MODE="smoke", NO_PROXY="", no_proxy="", MPLBACKEND="module://matplotlib_inline.backend_inline")
    kernels = tmp / "jupyter" / "kernels" / "colab"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "capsedu from its wheel", "language": "python", "env": env}))
    return python, book, env, tmp / "jupyter"


def test_the_venv_has_the_wheel_and_no_build_only_package(colab):
    python, book, env, _ = colab
    where = run(python, "-c", "import capsedu, importlib.util as u; print(capsedu.__file__); "
                "print(u.find_spec('myst_nb'), u.find_spec('torchvision'))", cwd=book, env=env).split()
    assert "site-packages" in where[0] and not where[0].startswith(str(ROOT)), where
    assert where[1:] == ["None", "None"], "a package the wheel does not declare is visible to the venv"
    versions = run(python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check", env=env)
    installed = {d["name"].lower(): d["version"] for d in json.loads(versions)}
    pinned = dict(p.lower().split("==") for p in COLAB)
    assert {name: installed.get(name) for name in pinned} == pinned


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_chapter_runs_from_the_wheel_in_an_empty_folder(colab, notebook, monkeypatch):
    python, book, env, jupyter = colab
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter))
    for name in ("PYTHONPATH", "VIRTUAL_ENV"):  # the kernel inherits them: the checkout's capsedu would win
        monkeypatch.delenv(name, raising=False)
    nb = nbformat.read(book / notebook.name, as_version=4)
    NotebookClient(nb, kernel_name="colab", timeout=600, resources={"metadata": {"path": str(book)}}).execute()
    assert sorted(p.name for p in book.iterdir() if p.suffix != ".ipynb") == [], "a chapter wrote into its folder"
    printed = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                        if o.get("output_type") == "stream")
    if notebook.stem in STORED_CHAPTERS:
        assert "stored run" in printed and not any(f in printed for f in FALLBACKS), printed[-3000:]
    if notebook.stem == "08_fast":  # the benchmark results, found from the empty folder
        assert "no stored results found" not in printed and "stored GPU result" in printed
