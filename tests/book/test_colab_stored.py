"""Stored runs and benchmark results where the book runs from an installed package: the shipped
copies win over the checkout's, found from any folder."""
import pytest

from capsedu.runtime import results
from capsedu.runtime.stored import write_stored


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A package folder with shipped/results and shipped/benchmarks, as a wheel installs it."""
    (tmp_path / "results").mkdir()
    (tmp_path / "benchmarks").mkdir()
    monkeypatch.setattr(results, "SHIPPED", tmp_path)
    return tmp_path


def test_the_shipped_copies_win_and_the_checkout_is_the_fallback(installed, monkeypatch, tmp_path_factory):
    assert results.results_dir() == installed / "results"
    assert results.benchmarks_dir() == installed / "benchmarks"
    monkeypatch.setattr(results, "SHIPPED", tmp_path_factory.mktemp("no_shipped_copies"))
    assert results.results_dir() == results.CHECKOUT / "results"
    assert results.benchmarks_dir() == results.CHECKOUT / "benchmarks" / "results"
    assert results.results_dir().is_absolute() and results.benchmarks_dir().is_absolute()


def test_an_installed_package_reads_its_shipped_folder_and_nothing_else(installed):
    assert results.stored_run("ablation") is None                 # not shipped: not there (no download)
    folder = installed / "results" / "ablation"
    folder.mkdir()
    write_stored({"settings": {"seeds": [0]}, "run": {"variant": "r1", "seed": 0}}, folder / "r1-seed0.json")
    assert results.stored_run("ablation")["runs"] == [{"variant": "r1", "seed": 0}]
