"""Chapter 7's claims as data (capsedu.experiments.two_digits): they name what the experiment runs, and
``frames`` + ``verdict_table`` read a stored folder into the numbers and verdict words the chapter prints.

The synthetic folder is sealed run files written from one committed file's header, with misses
chosen so that each claim's answer is known; the settings investigation is read as it is stored.
"""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import no_preview

import capsedu.runtime.results
from capsedu.experiments import two_digits
from capsedu.experiments.shared.tables import load
from capsedu.experiments.shared.verdicts import CANNOT_TELL, EQUIVALENT, HOLDS, verdict_table
from capsedu.experiments.two_digits.config import LAYOUTS, MODELS, PRESETS
from capsedu.experiments.two_digits.run import ink_gap
from capsedu.runtime.stored import write_stored

RESULTS = Path(__file__).resolve().parents[2] / "results"
N = 1000                                                    # items per test set in the template


def test_the_claims_name_what_the_stored_run_trains():
    ids = [c["id"] for c in two_digits.CLAIMS]
    assert len(set(ids)) == len(ids)
    models = set(PRESETS["long-items"].models)
    for c in two_digits.CLAIMS:
        assert {c["a"], c["b"]} <= models <= set(MODELS) and c["test"] in ("single", *LAYOUTS), c
        assert (c.get("kind") == "matches") == (c.get("delta") == two_digits.DELTA), c
    # every network of the run is in a primary claim
    assert {m for c in two_digits.CLAIMS if c["primary"] for m in (c["a"], c["b"])} == models
    for c in two_digits.VARIANTS_CLAIMS:
        folder, model = c["a"].split("/")
        assert folder in two_digits.VARIANTS and c["b"] == f"preset/{model}" and model in MODELS, c


def _write(folder: Path, template: dict, model: str, seed: int, misses: dict):
    run = {**template["run"], "model": model, "seed": seed, "misses": misses}
    run.update({f"{lay}_top2": 1 - len(misses[lay]) / N for lay in LAYOUTS},
               single_acc=1 - len(misses["single"]) / N)
    run["curve"] = {k: v[:3] for k, v in run["curve"].items()}          # a short learning curve
    write_stored({**template, "run": run}, folder / f"{model}-seed{seed}.json")


@pytest.fixture
def synthetic(tmp_path, monkeypatch):
    """Five seeds of five networks whose vertical misses are known: pooling misses 700 pairs, pooling-sum
    600, capsule-mean 200, capsule-su and capsule-su-r1 about 100 (a few more or fewer by seed)."""
    template = json.loads((RESULTS / two_digits.STORED / "pooling-seed0.json").read_text())
    template.pop("checksum")
    folder = tmp_path / two_digits.STORED
    folder.mkdir()
    rng = np.random.default_rng(0)
    base = {"pooling": 700, "pooling-sum": 600, "capsule-mean": 200, "capsule-su": 100, "capsule-su-r1": 100}
    for seed in range(5):
        for model, n in base.items():
            wrong = sorted(rng.choice(N, size=n + int(rng.integers(-10, 11)), replace=False).tolist())
            misses = {"single": list(range(10 + seed)), "horizontal": wrong, "overlapping": wrong,
                      "vertical": wrong}
            _write(folder, template, model, seed, misses)
    monkeypatch.setattr(capsedu.runtime.results, "results_dir", lambda: tmp_path)
    return load(two_digits.STORED, no_preview)


def test_frames_hold_one_row_per_run_epoch_and_item(synthetic):
    f = two_digits.frames(synthetic)
    assert len(f["runs"]) == 25 and len(f["epochs"]) == 25 * 3
    assert len(f["items"]) == 25 * (1 + len(LAYOUTS)) * N
    means = f["items"].groupby(["model", "seed", "test"]).right.mean()
    runs = f["runs"].set_index(["model", "seed"])
    for (model, seed, test), mean in means.items():
        field = "single_acc" if test == "single" else f"{test}_top2"
        assert mean == pytest.approx(runs.loc[(model, seed), field])


def test_the_verdicts_on_known_misses(synthetic):
    f = two_digits.frames(synthetic)
    have = set(f["items"].model)
    claims = [c for c in two_digits.CLAIMS if {c["a"], c["b"]} <= have]
    table = verdict_table(claims, f["runs"], f["items"]).set_index("id")
    assert set(table.index) == {"7.1", "7.4", "7.5", "7.6", "7.9", "7.10", "7.12", "7.13", "7.14", "7.15",
                                "7.16"}
    runs = f["runs"].groupby("model").vertical_top2.mean()
    assert table.loc["7.1", "mean"] == pytest.approx(runs["capsule-su"] - runs["pooling"])
    assert table.loc["7.1", "mean"] == pytest.approx(0.6, abs=0.02) and (table.seeds == 5).all()
    assert table.loc[["7.1", "7.5", "7.6", "7.9", "7.15", "7.16"], "verdict"].tolist() == [HOLDS] * 6
    assert table.loc["7.4", "verdict"] == EQUIVALENT          # within ±0.05 of each other
    assert table.loc["7.14", "verdict"] == CANNOT_TELL        # identical single-digit misses
    assert table.loc["7.4", "low"] > -two_digits.DELTA and table.loc["7.4", "high"] < two_digits.DELTA


def test_the_settings_investigation_reads_every_folder_and_names_a_missing_one(tmp_path, monkeypatch):
    f = two_digits.variants_frames()
    assert f["missing"] == [] and f["runs"].groupby(["variant", "head"]).ngroups == 7
    table = verdict_table(two_digits.VARIANTS_CLAIMS, f["runs"])
    assert len(table) == 15 and set(table.method) == {"seeds only"} and (table.seeds == 3).all()
    shutil.copytree(RESULTS / two_digits.VARIANTS_STORED, tmp_path / two_digits.VARIANTS_STORED)
    shutil.rmtree(tmp_path / two_digits.VARIANTS_STORED / "squash_k_1")
    monkeypatch.setattr(capsedu.runtime.results, "results_dir", lambda: tmp_path)
    f = two_digits.variants_frames()
    (line,) = f["missing"]
    assert "squash_k_1" in line and "preview" not in line and "squash_k_1" not in set(f["runs"].variant)


def test_the_ink_gap_counts_the_blank_pixels_between_the_digits():
    images = torch.zeros(2, 1, 56, 28)
    images[0, 0, 20, 5] = images[0, 0, 30, 5] = 1.0              # ink in rows 20 and 30: 9 blank rows
    images[1, 0, 27, 3] = images[1, 0, 28, 9] = 1.0              # touching halves: no blank row
    assert ink_gap(images, "vertical").tolist() == [9.0, 0.0]
    assert ink_gap(images.transpose(2, 3), "horizontal").tolist() == [9.0, 0.0]


def test_disjoint_pairs_keep_a_largest_set_that_reuses_no_digit():
    # taken in order, (1, 2) would block both others; the largest set is the other two
    assert two_digits.disjoint_pairs([1, 0, 2], [2, 1, 3]) == [1, 2]
    rng = np.random.default_rng(0)
    first, second = rng.integers(0, 60, 80), rng.integers(60, 120, 80)
    kept = two_digits.disjoint_pairs(first, second)
    digits = [d for k in kept for d in (first[k], second[k])]
    assert len(set(digits)) == len(digits)                    # no digit twice
    # none left out could be added: each shares a digit with a kept pair
    assert all({first[k], second[k]} & set(digits) for k in set(range(80)) - set(kept))


def test_pair_digits_are_the_pairs_the_run_tests():
    from capsedu.experiments.two_digits.run import two_digit_test_set
    y = torch.arange(60) % 10
    x = torch.rand(60, 1, 28, 28)
    data = {"settings": {"n_pairs": 40, "pair_seed": 7}, "meta": {"n_test": 50, "data": ["mnist", "sample"]}}
    first, second = two_digits.pair_digits(data, y)
    for layout in LAYOUTS:                                   # one pairing serves every layout
        _, targets = two_digit_test_set(x[:50], y[:50], 40, layout, seed=7)
        assert max(first + second) < 50 and targets.sum().item() == 80
        assert (targets[torch.arange(40), y[first]] == 1).all() and (targets[torch.arange(40), y[second]] == 1).all()


def test_the_ledger_and_the_scale_appendix_judge_chapter_7_on_its_items():
    """Chapter 7 judges its pair rows on the pairs that share no test digit (judged_frames); the
    pages that read its stored run again must give the same verdicts, not those on every pair."""
    import ast

    import nbformat
    book = RESULTS.parent / "book"
    chapter = "\n".join(c.source for c in nbformat.read(book / "07_two_digits.ipynb", 4).cells)
    assert "judged_frames(stored" in chapter and "verdict_table(CLAIMS, runs, items)" in chapter
    stored = load(two_digits.STORED, no_preview)
    f = two_digits.judged_frames(stored)
    ours = verdict_table(two_digits.CLAIMS, f["runs"], f["items"]).set_index("id")
    every = verdict_table(two_digits.CLAIMS, f["runs"], f["all_items"]).set_index("id")
    assert (ours.verdict != every.verdict).any()       # the choice of items shows in a verdict
    assert (f["items"].groupby(["model", "seed", "test"]).size().drop("single", level="test")
            == len(f["kept"])).all()
    # the ledger's frames(), taken from its page and run on the stored run
    ledger = nbformat.read(book / "claim_ledger.ipynb", 4).cells
    cell = next(c.source for c in ledger if "def frames(module)" in c.source)
    tree = ast.parse(cell)
    tree.body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "frames"]
    space = {"two_digits": two_digits, "stored_or_preview": capsedu.runtime.results.stored_or_preview}
    exec(compile(tree, "claim_ledger", "exec"), space)
    g = space["frames"](two_digits)
    assert verdict_table(two_digits.CLAIMS, g["runs"], g["items"]).set_index("id").verdict.equals(ours.verdict)
    # the scale appendix reads chapter 7 through the same function
    scale = "\n".join(c.source for c in nbformat.read(book / "appendix_scale.ipynb", 4).cells)
    assert "m.judged_frames if m is two_digits" in scale
