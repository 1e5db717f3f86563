"""capsedu.experiments.two_digits.run and the two-digits CLI: the metric, the test pairs, the config, the experiment end to end.

All on the CPU in a few seconds: hand-made scores, tiny training runs on a few dozen digits.
"""
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from cli_helpers import measured, subset

from capsedu import cli
from capsedu.core.params import count_parameters
from capsedu.core.squashing import safe_norm, squash
from capsedu.experiments.two_digits import frames
from capsedu.experiments.two_digits.config import HEADS, LAYOUTS, MODELS, PRESETS, SU_EPOCHS, TwoDigitConfig
from capsedu.experiments.two_digits.run import (make_model, pair_metrics, two_digit_experiment,
    two_digit_test_set)
from capsedu.training.evaluation import count_correct, set_border, set_hits
from capsedu.runtime.stored import read_runs


def pair(*classes, n=10):
    t = torch.zeros(n)
    t[list(classes)] = 1.0
    return t


def scores(*rows):
    """Rows of 10 scores given by their first entries, the rest 0."""
    return torch.tensor([list(r) + [0.0] * (10 - len(r)) for r in rows])


# ---------------------------------------------------------------- the metric on hand-made scores
def test_top2_on_hand_made_scores():
    s = scores((0.9, 0.8, 0.1),             # right pair, both > 0.5
               (0.1, 0.3, 0.9, 0.4),        # right pair (2, 3), second only 0.4
               (0.9, 0.1, 0.8),             # 0 found, 1 beaten by 2: wrong
               (0.2, 0.9, *[0.0] * 7, 0.6))  # order does not matter: (1, 9)
    targets = torch.stack([pair(0, 1), pair(2, 3), pair(0, 1), pair(9, 1)])
    assert set_hits(s, targets).tolist() == [True, True, False, True]
    assert set_hits(s, targets, threshold=0.5).tolist() == [True, False, False, True]
    assert pair_metrics(s, targets) == {"top2": 0.75, "top2_conf": 0.5, "ties": 0.0}
    single = torch.tensor([[0.1, 0.8, 0.3], [0.4, 0.4, 0.1], [0.2, 0.1, 0.3]])   # one digit: the same rule
    assert set_hits(single, torch.nn.functional.one_hot(torch.tensor([1, 0, 2]), 3)).tolist() == [True, False, True]


def test_ties_and_the_threshold_are_strict_and_count_correct_agrees():
    s = scores((0.9, 0.6, 0.6),             # 2nd and 3rd tie: the top-2 set is ambiguous
               (0.7, 0.7, 0.2),             # tie between the two true classes: fine
               [0.5] * 10,                  # all equal: a miss
               (0.9, 0.5, 0.1),             # second exactly 0.5: not "> 0.5"
               (0.9, 0.5001, 0.1), (1.0, 1.0, 1.0))  # the last: saturated sigmoids, a three-way tie
    targets = torch.stack([pair(0, 1)] * 6)
    assert set_hits(s, targets).tolist() == [False, True, False, True, True, False]
    assert set_hits(s, targets, threshold=0.5).tolist() == [False, True, False, False, True, False]
    assert pair_metrics(s, targets)["ties"] == pytest.approx(3 / 6)  # rows 1, 3 and 6 tie at the border
    lowest_true, highest_false = set_border(s, targets)
    assert (lowest_true == highest_false).tolist() == [True, False, True, False, False, True]
    assert count_correct(s, targets).item() == 3                 # the training form counts the same hits


def test_metric_agrees_with_su_numpy_code_when_there_are_no_ties():
    g = torch.Generator().manual_seed(0)
    scores = 0.7 * torch.rand(2000, 10, generator=g)                 # continuous: no ties
    labels = torch.stack([torch.randperm(10, generator=g)[:2] for _ in range(2000)])
    targets = torch.zeros(2000, 10).scatter_(1, labels, 1.0)
    s, y = scores.numpy(), np.sort(labels.numpy(), axis=1)
    greater = np.sort(s, axis=1)[:, -2] > 0.5                        # the two numbers as Su's script computes them
    top = np.sort(s.argsort()[:, -2:], axis=1)
    right = np.prod(top == y, axis=1)
    m = pair_metrics(scores, targets)
    assert m["top2"] == pytest.approx(right.mean())
    assert m["top2_conf"] == pytest.approx((right * greater).mean())
    assert 0.0 < m["top2_conf"] < m["top2"] < 0.1                    # random scores: about 1/45 right


def test_count_correct_counts_set_hits_for_any_k():
    """One rule in two forms: count_correct (unchecked, for training) counts exactly set_hits' hits,
    border ties included (the k-th and (k+1)-th scores equal: a miss)."""
    g = torch.Generator().manual_seed(0)                             # many ties: scores on a coarse grid
    for k in (1, 2, 3):
        scores = torch.randint(0, 4, (500, 10), generator=g).float() / 4
        targets = (torch.rand(500, 10, generator=g).argsort(1) < k).float()
        hits = set_hits(scores, targets)
        assert 0 < hits.sum() < 500
        assert count_correct(scores, targets).item() == hits.sum().item()
        assert count_correct(scores.half(), targets).item() == hits.sum().item()


def test_count_correct_outside_set_hits_domain():
    """count_correct checks nothing: a row with no true class or a NaN score is a miss; integer labels
    use argmax, where a tie goes to the lower class (one-hot float targets would count it as a miss)."""
    scores = torch.tensor([[0.9, 0.1, 0.0], [math.nan, 0.9, 0.1], [0.2, 0.9, math.nan]])
    targets = torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    assert count_correct(scores, targets).item() == 0
    tied = torch.tensor([[0.6, 0.6, 0.1]])
    assert count_correct(tied, torch.tensor([0])).item() == 1 and count_correct(tied, torch.tensor([1])).item() == 0
    assert count_correct(tied, torch.tensor([[1.0, 0.0, 0.0]])).item() == 0


@pytest.mark.parametrize("scores, targets, match", [
    (torch.rand(3, 10), torch.zeros(3, 9), "shape"),
    (torch.rand(3, 10), torch.full((3, 10), 0.5), "0/1"),
    (torch.rand(2, 10), torch.stack([pair(1, 2), torch.zeros(10)]), "at least one true"),
    (torch.tensor([[math.nan] * 10]), pair(1, 2)[None], "NaN"),
    (torch.ones(3, 10, dtype=torch.long), torch.zeros(3, 10), "float"),
])
def test_metric_rejects_bad_input(scores, targets, match):
    with pytest.raises(ValueError, match=match):
        set_hits(scores, targets)


# ---------------------------------------------------------------- test pairs
@pytest.fixture(scope="module")
def numbered():
    """40 images whose pixels hold their own index, labels mostly 3 (so clashes are frequent)."""
    x = torch.arange(40.0).view(40, 1, 1, 1).expand(40, 1, 28, 28).contiguous()
    y = torch.full((40,), 3, dtype=torch.long)
    y[::8] = torch.tensor([0, 1, 7, 8, 9])
    return x, y


@pytest.mark.parametrize("layout", ["vertical", "horizontal"])
def test_pairs_are_two_distinct_digits_in_the_right_layout(numbered, layout):
    x, y = numbered
    images, targets = two_digit_test_set(x, y, 500, layout, seed=0)
    assert images.shape == ((500, 1, 56, 28) if layout == "vertical" else (500, 1, 28, 56))
    assert targets.dtype == torch.float32 and (targets.sum(dim=1) == 2).all()   # two classes: never a digit twice
    first, second = images[:, 0, 0, 0].long(), images[:, 0, -1, -1].long()  # the two halves' indices
    assert (y[first] != y[second]).all()
    assert torch.equal(targets, torch.nn.functional.one_hot(y[first], 10) + torch.nn.functional.one_hot(y[second], 10))


def test_every_layout_draws_the_same_pairs(numbered):
    x, y = numbered
    sets = {layout: two_digit_test_set(x, y, 200, layout, seed=5) for layout in LAYOUTS}
    assert sets["overlapping"][0].shape == (200, 1, 36, 36)
    for layout in LAYOUTS:
        assert torch.equal(sets[layout][1], sets["vertical"][1])
    assert not torch.equal(two_digit_test_set(x, y, 200, "vertical", seed=6)[1], sets["vertical"][1])
    with pytest.raises(ValueError, match="layout"):
        two_digit_test_set(x, y, 10, "diagonal")


# ---------------------------------------------------------------- models
def test_models_are_about_270k_parameters_and_take_any_image_size():
    counts = {name: count_parameters(make_model(name)) for name in MODELS}
    assert counts["capsule-su"] == counts["capsule-hinton"] == counts["capsule-su-march"] == 279_488  # 259,008 conv + 10*16*128 W
    assert counts["pooling"] == 276_810
    assert make_model("capsule-su-r1", iterations=3).capsules.iterations == 1   # the control's own name
    assert counts["pooling-sum"] == counts["pooling"] and counts["capsule-mean"] == counts["capsule-su"]
    torch.manual_seed(0)
    model = make_model("capsule-su").eval()
    with torch.no_grad():
        for shape in [(2, 1, 28, 28), (2, 1, 56, 28), (2, 1, 28, 56), (2, 1, 36, 36)]:
            assert model(torch.rand(shape)).shape == (2, 10)


def test_keras_init_is_glorot_and_seeded():
    torch.manual_seed(1)
    a = make_model("capsule-su")
    torch.manual_seed(1)
    b = make_model("capsule-hinton")
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))  # paired comparison
    w = a.capsules.weight
    bound = math.sqrt(6 / (128 + 160))
    assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
    layers = [m for m in a.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert layers and all(torch.count_nonzero(m.bias) == 0 for m in layers)
    torch.manual_seed(1)
    assert make_model("capsule-su", init="torch").capsules.weight.abs().max() < 0.1  # PyTorch's: std 0.01
    with pytest.raises(ValueError, match="init"):
        make_model("pooling", init="he")
    with pytest.raises(ValueError, match="model"):
        make_model("capsnet")


# ---------------------------------------------------------------- the experiment end to end
@pytest.fixture(scope="module")
def digits(mnist_sample):
    return subset(mnist_sample, 48, 60)


TINY = TwoDigitConfig(seeds=(0, 1), epochs={"pooling": 2, "capsule-su": 1, "capsule-hinton": 1,
                                           "capsule-su-march": 1}, batch_size=16, n_pairs=30, curve=True)


@pytest.fixture(scope="module")
def tiny_result(digits):
    return two_digit_experiment(digits, TINY, device="cpu", progress=False, return_models=True)


def test_experiment_returns_every_field(tiny_result):
    r = tiny_result
    metrics = ["single_acc"] + [f"{lay}_{m}" for lay in LAYOUTS for m in ("top2", "top2_conf", "ties")]
    assert len(r["runs"]) == 8
    assert [(x["model"], x["seed"]) for x in r["runs"]] == [(m, s) for s in (0, 1) for m in HEADS]  # seed-major
    for run in r["runs"]:
        assert 270_000 < run["params"] < 285_000 and all(0.0 <= run[f] <= 1.0 for f in metrics)
        for lay in LAYOUTS:
            assert run[f"{lay}_top2_conf"] <= run[f"{lay}_top2"]
        epochs = TINY.epochs[run["model"]]
        assert len(run["curve"]["test_acc"]) == len(run["curve"]["vertical_top2"]) == epochs
        assert run["curve"]["vertical_top2"][-1] == run["vertical_top2"]  # the curve ends at the final value
    assert r["settings"] == TINY.as_dict() and r["meta"]["n_train"] == 48 and r["meta"]["data"] == ["mnist", "sample"]
    assert "config" not in r and "table" not in r and r["device"] == "cpu" and "device" not in r["meta"]
    plain = {k: v for k, v in r.items() if k != "trained"}
    assert json.loads(json.dumps(plain)) == plain                      # JSON-friendly
    epochs = frames(r)["epochs"]                                      # the learning curves as a table
    mean = epochs[epochs.model == "pooling"].groupby("epoch").horizontal_top2.mean()
    runs = [x["curve"]["horizontal_top2"] for x in r["runs"] if x["model"] == "pooling"]
    assert list(mean.index) == [1, 2] and mean[2] == pytest.approx((runs[0][1] + runs[1][1]) / 2)


def test_returned_models_reproduce_their_row(tiny_result, digits):
    model = tiny_result["trained"]["capsule-su"][1]
    from capsedu.training.evaluation import predict_lengths
    images, targets = two_digit_test_set(digits.x_test, digits.y_test, 30, "horizontal")
    row = next(x for x in tiny_result["runs"] if x["model"] == "capsule-su" and x["seed"] == 1)
    assert pair_metrics(predict_lengths(model, images), targets)["top2"] == row["horizontal_top2"]


def test_a_run_interrupted_mid_way_resumes_from_its_checkpoint(digits, tmp_path, monkeypatch):
    import capsedu.training.loop as loop
    config = TwoDigitConfig(models=("capsule-su",), seeds=(0,), epochs=2, batch_size=16, n_pairs=20, curve=True)
    straight = two_digit_experiment(digits, config, device="cpu", progress=False)
    real = loop.train_epoch

    def interrupted_in_epoch_2(run, epoch, *args, **kwargs):
        if epoch == 2:
            raise KeyboardInterrupt
        return real(run, epoch, *args, **kwargs)
    monkeypatch.setattr(loop, "train_epoch", interrupted_in_epoch_2)
    out = tmp_path / "r"
    with pytest.raises(KeyboardInterrupt):
        two_digit_experiment(digits, config, out=out, device="cpu", progress=False)
    assert [p.name for p in out.iterdir()] == ["capsule-su-seed0.ckpt.pt"]   # the run's checkpoint, no run file
    monkeypatch.setattr(loop, "train_epoch", real)
    resumed = two_digit_experiment(digits, config, out=out, device="cpu", progress=False)  # continues at epoch 2
    assert measured(resumed["runs"][0]) == measured(straight["runs"][0])  # bit-exact on a CPU
    assert [p.name for p in out.iterdir()] == ["capsule-su-seed0.json"]      # the checkpoint went


@pytest.mark.parametrize("bad, match", [
    (dict(models=("pooling", "capsnet")), "models"),
    (dict(models=()), "models"),
    (dict(seeds=(0, 0)), "seeds"),
    (dict(seeds=(-1,)), "seeds"),
    (dict(epochs={"pooling": 1}), "epochs"),
    (dict(epochs=0), "epochs"),
    (dict(layouts=("vertical", "diagonal")), "layouts"),
    (dict(n_pairs=0), "n_pairs"),
    (dict(margin_lam=-0.1), "margin_lam"),
    (dict(squash_k=0), "squash_k"),
    (dict(lr=float("inf")), "lr"),
    (dict(init="zeros"), "init"),
    (dict(lr_schedule="step"), "lr_schedule"),
    (dict(source="web"), "source"),
    (dict(curve=1), "curve"),
])
def test_config_rejects_bad_settings(bad, match):
    with pytest.raises(ValueError, match=match):
        TwoDigitConfig(**bad)


def test_experiment_rejects_bad_data_and_config(digits):
    wrong = SimpleNamespace(**{**vars(digits), "y_train": torch.nn.functional.one_hot(digits.y_train, 10).float()})
    with pytest.raises(ValueError, match="integer labels"):
        two_digit_experiment(wrong, TINY)
    with pytest.raises(TypeError, match="TwoDigitConfig"):
        two_digit_experiment(digits, {"epochs": 1})


def test_the_controls_sum_and_average_what_their_names_say():
    """pooling-sum sums the grid where pooling averages it; capsule-mean averages the votes where one routing
    iteration (uniform c = 1/10) sums them."""
    torch.manual_seed(0)
    x = torch.rand(2, 1, 28, 28)
    for name in ("pooling", "pooling-sum", "capsule-mean", "capsule-su-r1"):
        model = make_model(name).eval()
        f = model.features(x)
        with torch.no_grad():
            if name.startswith("pooling"):
                pooled = f.sum(dim=(2, 3)) if name == "pooling-sum" else f.mean(dim=(2, 3))
                assert torch.allclose(model(x), model.head(pooled))
            else:
                u = f.flatten(2).transpose(1, 2)
                votes = model.capsules.predictions(u)             # (B, N_in, 10, 16)
                s = votes.mean(dim=1) if name == "capsule-mean" else votes.sum(dim=1) / 10
                assert torch.allclose(model(x), safe_norm(squash(s, k=0.5), dim=-1))


def test_presets_follow_su_where_they_say_so_and_round_trip_through_json():
    from capsedu.experiments.shared.runs import config_from_settings
    for name, config in PRESETS.items():
        assert config_from_settings(TwoDigitConfig, json.loads(json.dumps(config.as_dict()))) == config, name
    assert PRESETS["full"].epochs == SU_EPOCHS and PRESETS["full"].batch_size == 128
    assert PRESETS["full"].lr_schedule == "constant" and PRESETS["full"].source == "auto"
    for name in ("quick", "long"):   # the chapter's budgets: all 9,000 sample digits
        p = PRESETS[name]
        assert p.source == "sample" and p.n_train is None and p.margin_lam == 0.25
    assert PRESETS["long"].models == HEADS              # the stored run: every head but the control
    assert PRESETS["quick"].models == ("pooling", "capsule-su")  # the preview: the two its 3 minutes allow
    assert len(PRESETS["long"].seeds) >= 3 and PRESETS["long"].curve
    items = PRESETS["long-items"]                        # the rerun: >= 5 seeds, every head and control
    assert len(items.seeds) >= 5 and set(items.models) == set(MODELS) and set(items.epochs.values()) == {12}


def test_the_stored_investigation_baseline_is_the_investigation_preset():
    """Chapter 7's investigation changes one setting at a time from results/two_digits_variants/preset/: its
    settings must be the investigation preset's (the quick preset's before 2026-12-03)."""
    stored = read_runs(Path(__file__).parents[2] / "results" / "two_digits_variants" / "preset")
    preset = PRESETS["investigation"].as_dict()
    differ = {k for k in preset if stored["settings"].get(k) != preset[k]}
    assert not differ, {k: (stored["settings"].get(k), preset[k]) for k in differ}


# ---------------------------------------------------------------- the CLI
def test_cli_prints_the_same_table_as_the_function_and_resumes(digits, capsys, tmp_path):
    args = ["two-digits", "--preset", "smoke", "--source", "sample", "--limit", "48", "--test-limit", "60",
            "--models", "pooling", "capsule-su", "--seeds", "0", "1", "--epochs", "1", "--batch-size", "16",
            "--pairs", "30", "--device", "cpu", "--no-progress", "--out", str(tmp_path / "td")]
    assert cli.main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["runs"] == read_runs(tmp_path / "td")["runs"]
    assert sorted(p.name for p in (tmp_path / "td").iterdir()) == [   # one file per run; no .tmp, no checkpoint
        f"{m}-seed{s}.json" for m in ("capsule-su", "pooling") for s in (0, 1)]
    config = PRESETS["smoke"].replace(models=("pooling", "capsule-su"), seeds=(0, 1), epochs=1, n_pairs=30,
                                      n_train=48, n_test=60)
    direct = two_digit_experiment(digits, config, device="cpu", progress=False)
    assert printed["preset"] == "smoke" and printed["settings"] == direct["settings"]
    assert measured(printed["runs"]) == measured(direct["runs"])       # CPU training is deterministic
    assert printed["command"].endswith(" ".join(args)) and printed["torch"] == torch.__version__
    assert cli.main(args) == 0                                         # rerun: every run is already there
    again = json.loads(capsys.readouterr().out)
    assert again["runs"] == printed["runs"]   # other settings and --fresh: test_paper_experiments.py


def test_each_run_stores_the_items_it_got_wrong(tiny_result, digits):
    n_test = len(digits.y_test[:TINY.n_test])
    for row in tiny_result["runs"]:
        wrong = row["misses"]
        assert set(wrong) == {"single", *TINY.layouts}
        assert 1 - len(wrong["single"]) / n_test == pytest.approx(row["single_acc"], abs=1e-6)
        for layout in TINY.layouts:
            assert 1 - len(wrong[layout]) / TINY.n_pairs == pytest.approx(row[f"{layout}_top2"], abs=1e-6)
            assert wrong[layout] == sorted(set(wrong[layout])) and all(0 <= i < TINY.n_pairs for i in wrong[layout])
