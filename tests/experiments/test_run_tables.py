"""The stored runs as tables: every run on disk is one row, and the tables agree with the records."""
import json
import shutil

import pytest
from cli_helpers import no_preview

from capsedu.experiments.shared.tables import PREVIEW, epochs_table, items_table, load, runs_table
from capsedu.runtime import results
from capsedu.runtime.stored import NAME_KEYS

STORED = ["ablation", "compare_routing", "multimnist", "robustness", "tutorial_vs_fixed", "two_digits_long",
          "two_digits_r1"]


@pytest.mark.parametrize("name", STORED)
def test_one_row_per_run_file_and_per_epoch(name):
    data = load(name, no_preview)
    runs, epochs = runs_table(data), epochs_table(data)
    files = sorted((results.results_dir() / name).glob("*.json"))
    assert len(runs) == len(files) > 0
    key = [k for k in (*NAME_KEYS, "seed") if k in runs]
    assert not runs.duplicated(key).any()
    assert runs.attrs["origin"] == f"stored run results/{name}" and set(runs["origin"]) == {runs.attrs["origin"]}
    records = [json.loads(f.read_text())["run"] for f in files]
    lengths = [len(r["epochs"]) if "epochs" in r else len(next(iter(r.get("curve", {"": []}).values())))
               for r in records]
    assert len(epochs) == sum(lengths)
    assert sorted(epochs.groupby(key)["epoch"].max().tolist()) == sorted(n for n in lengths if n)


def test_the_runs_table_holds_the_records_numbers_and_the_settings():
    data = load("compare_routing", no_preview)
    runs = runs_table(data).set_index(["method", "seed"])
    for r in data["runs"]:
        assert runs.loc[(r["method"], r["seed"]), "test"] == r["test"]
        assert runs.loc[(r["method"], r["seed"]), "params"] == r["params"]
    assert (runs["epochs"] == data["settings"]["epochs"]).all() and (runs["command"] == data["command"]).all()
    two = runs_table(load("two_digits_long", no_preview))
    per_model = load("two_digits_long", no_preview)["settings"]["epochs"]        # {model: epochs}
    assert (two["epochs"] == two["model"].map(per_model)).all()


@pytest.mark.parametrize("name, n_items, accuracy", [
    ("compare_routing", 1000, {"test": "test", "affine": "affine"}),
    ("tutorial_vs_fixed", 1000, {"test": "test"}),
    ("two_digits_r1", 1000, {"single": "single_acc", "vertical": "vertical_top2", "horizontal": "horizontal_top2"}),
])
def test_an_item_tables_mean_is_the_stored_accuracy(name, n_items, accuracy):
    data = load(name, no_preview)
    items, runs = items_table(data, n_items), runs_table(data)
    key = [k for k in (*NAME_KEYS, "seed") if k in runs]
    assert set(items["right"]) == {0, 1} and items.attrs["origin"] == runs.attrs["origin"]
    means = items.groupby([*key, "test"])["right"].mean()
    for _, run in runs.iterrows():
        for test, field in accuracy.items():
            assert means[(*run[key], test)] == pytest.approx(run[field], abs=1e-6)
    assert len(items) == len(runs) * n_items * len(data["runs"][0]["misses"])


def test_an_index_past_the_test_set_is_refused():
    data = {"settings": {}, "runs": [{"model": "a", "seed": 0, "misses": {"test": [3, 10]}}]}
    with pytest.raises(IndexError):
        items_table(data, 10)
    assert items_table(data, 11)["right"].sum() == 9


def test_a_missing_or_damaged_folder_shows_the_preview_and_says_why(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    preview = {"settings": {"seeds": [0]}, "runs": [{"model": "a", "seed": 0, "test": 0.5}]}
    data = load("tutorial_vs_fixed", lambda: preview)
    assert data["origin"] == PREVIEW and "is not there" in capsys.readouterr().out
    assert runs_table(data).attrs["origin"] == PREVIEW and runs_table(data)["test"].tolist() == [0.5]
    shutil.copytree(results.CHECKOUT / "results" / "tutorial_vs_fixed", tmp_path / "tutorial_vs_fixed")
    assert load("tutorial_vs_fixed", no_preview)["origin"] == "stored run results/tutorial_vs_fixed"
    damaged = tmp_path / "tutorial_vs_fixed" / "fixed-seed0.json"
    damaged.write_text(damaged.read_text().replace('"seed": 0', '"seed": 0 ', 1).replace("0.98", "0.99", 1))
    assert load("tutorial_vs_fixed", lambda: preview)["origin"] == PREVIEW
    assert "fixed-seed0.json" in capsys.readouterr().out
