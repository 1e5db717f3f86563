"""Everything is in pyproject.toml, except one step: the stored runs travel with the package.

``results/`` (the sealed stored runs, a folder per experiment, and the weights chapter 9 loads) and ``benchmarks/results/``
live beside the package in the repository, where the commands write them. A wheel copies them
into ``capsedu/shipped/results/`` and ``capsedu/shipped/benchmarks/``, where
``capsedu.runtime.results`` finds them in an installed package (Colab). ``results/partial/``
(runs in progress) is left out; MANIFEST.in puts the same files into the sdist.
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# (folder in the repository, its files to ship, folder inside the package)
SHIPPED = [
    ("results", ["*/*.json", "*/*.pt", "two_digits_variants/*/*.json"], "shipped/results"),
    ("benchmarks/results", ["*.json"], "shipped/benchmarks"),
]


def shipped_files():
    """(source file, its path inside the package) for every stored run and benchmark result."""
    for source, patterns, target in SHIPPED:
        for pattern in patterns:
            for path in sorted((HERE / source).glob(pattern)):
                if path.relative_to(HERE / source).parts[0] == "partial":
                    continue
                yield path, Path(target) / path.relative_to(HERE / source)


class BuildWithStoredRuns(build_py):
    """build_py, then the stored runs copied into the built package."""

    def run(self):
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's folders directly
            return
        for path, inside in shipped_files():
            dest = Path(self.build_lib) / "capsedu" / inside
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)


setup(cmdclass={"build_py": BuildWithStoredRuns})
