"""Chapter 10's claims as data (``capsedu.experiments.compare_routing.claims``), judged on a small
synthetic stored folder whose differences are known: the tables' numbers and the verdict words."""
import json

import pytest

from capsedu.experiments import compare_routing as cr
from capsedu.experiments.compare_routing.claims import newest_benchmark, readable
from capsedu.experiments.shared.tables import PREVIEW, load
from capsedu.experiments.shared.verdicts import CANNOT_TELL, EQUIVALENT, FAILS, HOLDS, verdict_table
from capsedu.runtime import results
from capsedu.runtime.stored import write_stored

N, SEEDS = 1000, (0, 1, 2)
BASE = list(range(40))                                  # dynamic routing misses these: accuracy 0.96


def misses(method, seed):
    """none: one digit swapped per seed (equal on average); attention: +0.03, -0.03, 0 by seed;
    em-spread: 50 more digits missed in every seed (-0.05)."""
    if method == "none":
        return BASE[:-1] + [40 + seed]
    if method == "attention":
        return {0: BASE[10:], 1: BASE + list(range(100, 130)), 2: BASE}[seed]
    return BASE + (list(range(200, 250)) if method == "em-spread" else [])


def write_folder(root, methods=("dynamic", "none", "attention", "em-spread")):
    folder = root / cr.STORED
    folder.mkdir()
    settings = {"methods": list(methods), "seeds": list(SEEDS), "epochs": 2, "n_test": N, "source": "sample"}
    for method in methods:
        for seed in SEEDS:
            missed = sorted(misses(method, seed))
            accuracy = 1 - len(missed) / N
            run = {"method": method, "seed": seed, "params": 10, "seconds": 1.0, "test": accuracy,
                   "affine": accuracy, "misses": {"test": missed, "affine": missed},
                   "epochs": [{"epoch": e, "test": accuracy, "affine": accuracy} for e in (1, 2)]}
            write_stored({"command": "synthetic", "date": "2026-12-07", "settings": settings, "run": run,
                          "seconds": 1.0}, folder / f"{method}-seed{seed}.json")


@pytest.fixture
def stored(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    write_folder(tmp_path)
    return load(cr.STORED, lambda: pytest.fail("the stored folder was usable"), check=readable)


def test_the_tables_hold_every_digit_and_the_verdicts_follow_the_known_differences(stored):
    f = cr.frames(stored)
    items, runs = f["items"], f["runs"]
    assert len(runs) == 12 and len(f["epochs"]) == 24 and len(items) == 12 * 2 * N
    right = items.groupby(["method", "seed", "test"]).right.sum()
    assert right[("em-spread", 1, "test")] == N - 90 and right[("none", 2, "affine")] == N - 40
    rows = verdict_table(cr.CLAIMS, items=items, key="method").set_index("id")
    # equal on average: equivalent within the affine δ; on test digits δ (a tenth of the paper's
    # Table 1 gap, verdicts.DELTA["clean"]) is finer than 3 seeds x 1,000 digits resolve
    assert rows.verdict.to_dict() == {"10.1": CANNOT_TELL, "10.2": EQUIVALENT, "10.3": CANNOT_TELL,
                                      "10.5": FAILS, "10.6": FAILS}
    assert rows.low["10.1"] < -rows.delta["10.1"] < rows.delta["10.1"] < rows.high["10.1"]
    assert rows["mean"]["10.1"] == pytest.approx(0) and rows["mean"]["10.5"] == pytest.approx(-0.05)
    # the sign test on each digit's mean over the seeds: em-spread behind on 50 digits, ahead on none
    assert (rows.items_up["10.5"], rows.items_down["10.5"]) == (0, 50)
    assert not rows.primary.any()      # recast after the results were read: every row is Holm-adjusted
    assert (rows.delta == rows.test.map(cr.claims.DELTA)).all()


def test_a_folder_without_a_compared_method_leaves_the_page_to_the_preview(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    write_folder(tmp_path, methods=("dynamic", "none", "attention"))
    data = load(cr.STORED, lambda: {"settings": {}, "runs": []}, check=readable)
    assert data["origin"] == PREVIEW and "em-spread" in capsys.readouterr().out


def benchmark(date, slower=1.0):
    """Dynamic routing ``slower`` ms behind attention in every round, at both sizes."""
    rounds = range(20)
    ms = {n: {"dynamic": [2.0 + slower + 0.01 * (i % 3) for i in rounds], "attention": [2.0] * 20}
          for n in ("16", "64")}
    return {"date": date, "methods": {m: {"routing_fwd_ms": [1.0] * 20, "routing_fwd_bwd_ms": [3.0] * 20}
                                      for m in ("dynamic", "attention")},
            "equal_work": {"input_capsules": {"dynamic": 64, "attention": 16}, "ms": ms}}


def test_the_cost_claim_pairs_the_benchmarks_rounds_at_attentions_size():
    cost = cr.cost_frames(benchmark("2026-12-04"))
    assert sorted(cost["runs"].seed.unique()) == list(range(20)) and set(cost["runs"].inputs) == {16}
    assert len(cost["networks"]) == 40 and len(cost["equal"]) == 80
    rows = verdict_table(cr.COST_CLAIMS, cost["runs"], key="method")
    assert rows.verdict[0] == HOLDS and rows["mean"][0] == pytest.approx(1 + 0.01 * sum(i % 3 for i in range(20)) / 20)
    rows = verdict_table(cr.COST_CLAIMS, cr.cost_frames(benchmark("2026-12-04", -1.0))["runs"], key="method")
    assert rows.verdict[0] == FAILS


def test_the_newest_benchmark_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "benchmarks_dir", lambda: tmp_path)
    with pytest.raises(FileNotFoundError):
        newest_benchmark()
    for name, date in (("routing_cost-cpu-b.json", "2026-12-02"), ("routing_cost-cpu-a.json", "2026-12-04")):
        (tmp_path / name).write_text(json.dumps(benchmark(date)))
    found = newest_benchmark()
    assert found["date"] == "2026-12-04" and found["file"] == "routing_cost-cpu-a.json"
