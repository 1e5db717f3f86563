"""Stored runs and benchmark results where the book runs from an installed package: the shipped
copies win over the checkout's, found from any folder; a file the package lacks is downloaded, and
a failed download says which URL and why, never "not there"."""
import urllib.error
import urllib.request

import pytest

import capsedu
from capsedu.runtime import results


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A package folder with shipped/results and shipped/benchmarks, as a wheel installs it."""
    (tmp_path / "results").mkdir()
    (tmp_path / "benchmarks").mkdir()
    monkeypatch.setattr(results, "SHIPPED", tmp_path)
    monkeypatch.setattr(capsedu, "REPO_URL", "https://github.com/capsedu/capsedu")
    return tmp_path


def test_the_shipped_copies_win_and_the_checkout_is_the_fallback(installed, monkeypatch, tmp_path_factory):
    assert results.results_dir() == installed / "results"
    assert results.benchmarks_dir() == installed / "benchmarks"
    monkeypatch.setattr(results, "SHIPPED", tmp_path_factory.mktemp("no_shipped_copies"))
    assert results.results_dir() == results.CHECKOUT / "results"
    assert results.benchmarks_dir() == results.CHECKOUT / "benchmarks" / "results"
    assert results.results_dir().is_absolute() and results.benchmarks_dir().is_absolute()


def raising(err):
    def urlopen(url, timeout):
        raise err
    return urlopen


def test_a_failed_download_names_the_url_and_the_reason(installed, monkeypatch):
    monkeypatch.setattr(urllib.request, "urlopen", raising(urllib.error.URLError("Network is unreachable")))
    with pytest.raises(results.StoredRunUnavailable, match=r"could not download https://raw\..*/results/x\.json: "
                                                            r"Network is unreachable"):
        results.stored_run("x.json")
    data, note = results.stored_or_preview("x.json")
    assert data is None and note.endswith("the live preview stands in (not the stored run)")
    assert "not there" not in note and len(note.splitlines()) == 1


def test_only_a_404_means_the_file_is_not_there(installed, monkeypatch):
    def http(code):
        return urllib.error.HTTPError("u", code, "Not Found" if code == 404 else "Server Error", {}, None)
    monkeypatch.setattr(urllib.request, "urlopen", raising(http(404)))
    assert results.stored_run("x.json") is None
    assert "is not there" in results.stored_or_preview("x.json")[1]
    monkeypatch.setattr(urllib.request, "urlopen", raising(http(503)))
    assert "HTTP 503" in results.stored_or_preview("x.json")[1]
