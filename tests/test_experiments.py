"""capsedu.experiments and the two-digits CLI: the metric, the test pairs, the experiment end to end.

All on the CPU in a few seconds: hand-made scores, tiny training runs on a few dozen digits.
"""
import json
import math
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from capsedu import cli
from capsedu.experiments import (INITS, LAYOUTS, MODELS, PRESETS, SU_EPOCHS, format_table, make_model,
                                 pair_metrics, set_hits, two_digit_experiment, two_digit_test_set)
from capsedu.params import count_parameters


def pair(*classes, n=10):
    t = torch.zeros(n)
    t[list(classes)] = 1.0
    return t


# ---------------------------------------------------------------- the metric on hand-made scores
def test_top2_on_hand_made_scores():
    scores = torch.tensor([
        [0.9, 0.8, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # right pair, both > 0.5
        [0.1, 0.3, 0.9, 0.4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # right pair (2, 3), second only 0.4
        [0.9, 0.1, 0.8, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # 0 found, 1 beaten by 2: wrong
        [0.2, 0.9, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.6],  # order does not matter: (1, 9)
    ])
    targets = torch.stack([pair(0, 1), pair(2, 3), pair(0, 1), pair(9, 1)])
    assert set_hits(scores, targets).tolist() == [True, True, False, True]
    assert set_hits(scores, targets, threshold=0.5).tolist() == [True, False, False, True]
    assert pair_metrics(scores, targets) == {"top2": 0.75, "top2_conf": 0.5}


def test_ties_and_the_threshold_are_strict():
    scores = torch.tensor([
        [0.9, 0.6, 0.6, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # 2nd and 3rd tie: the top-2 set is ambiguous
        [0.7, 0.7, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # tie between the two true classes: fine
        [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],  # all equal: a miss
        [0.9, 0.5, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # second exactly 0.5: not "> 0.5"
        [0.9, 0.5001, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # saturated sigmoids: a three-way tie
    ])
    targets = torch.stack([pair(0, 1)] * 6)
    assert set_hits(scores, targets).tolist() == [False, True, False, True, True, False]
    assert set_hits(scores, targets, threshold=0.5).tolist() == [False, True, False, False, True, False]


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


def test_single_digits_use_the_same_rule():
    scores = torch.tensor([[0.1, 0.8, 0.3], [0.4, 0.4, 0.1], [0.2, 0.1, 0.3]])
    targets = torch.nn.functional.one_hot(torch.tensor([1, 0, 2]), 3)
    assert set_hits(scores, targets).tolist() == [True, False, True]


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
    assert (targets.sum(dim=1) == 2).all()                           # two classes: never a digit twice
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
    assert counts["capsule-su"] == counts["capsule-hinton"] == 279_488  # 259,008 conv + 10*16*128 W
    assert counts["pooling"] == 276_810
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
def digits():
    from capsedu.data import load_dataset
    d = load_dataset("mnist", source="sample", device="cpu", verbose=False)
    return SimpleNamespace(x_train=d.x_train[:48], y_train=d.y_train[:48], x_test=d.x_test[:60],
                           y_test=d.y_test[:60], name="mnist", source="sample")


TINY = dict(seeds=[0, 1], epochs={"pooling": 2, "capsule-su": 1, "capsule-hinton": 1}, batch_size=16,
            n_pairs=30, layouts=list(LAYOUTS), device="cpu", progress=False)


@pytest.fixture(scope="module")
def tiny_result(digits):
    return two_digit_experiment(digits, return_models=True, **TINY)


def test_experiment_returns_every_field(tiny_result):
    r = tiny_result
    metrics = ["single_acc"] + [f"{lay}_{m}" for lay in LAYOUTS for m in ("top2", "top2_conf")]
    assert [row["model"] for row in r["table"]] == list(MODELS)
    for row in r["table"]:
        assert set(row) == {"model", "head", "params", "seeds"} | set(metrics) | {f + "_std" for f in metrics}
        assert 270_000 < row["params"] < 285_000 and row["seeds"] == 2
        for f in metrics:
            assert 0.0 <= row[f] <= 1.0 and row[f + "_std"] >= 0.0
    assert len(r["runs"]) == 6
    assert {(x["model"], x["seed"]) for x in r["runs"]} == {(m, s) for m in MODELS for s in (0, 1)}
    for run in r["runs"]:
        for lay in LAYOUTS:
            assert run[f"{lay}_top2_conf"] <= run[f"{lay}_top2"]
    pooling = [x["single_acc"] for x in r["runs"] if x["model"] == "pooling"]
    assert r["table"][0]["single_acc"] == pytest.approx(sum(pooling) / 2)
    c = r["config"]
    assert c["epochs"] == TINY["epochs"] and c["margin_lam"] == 0.25 and c["n_train"] == 48 and c["n_pairs"] == 30
    assert c["data"] == ["mnist", "sample"]
    plain = {k: v for k, v in r.items() if k != "trained"}
    assert json.loads(json.dumps(plain)) == plain                      # JSON-friendly
    assert "| capsule-su | 279,488 |" in format_table(r)
    html = format_table(r, html=True)
    assert "<td>capsule-su</td><td>279,488</td>" in html and "<th>vertical top-2 &gt; 0.5</th>" in html


def test_returned_models_reproduce_their_row(tiny_result, digits):
    model = tiny_result["trained"]["capsule-su"][1]
    from capsedu.train import predict_lengths
    images, targets = two_digit_test_set(digits.x_test, digits.y_test, 30, "horizontal")
    row = next(x for x in tiny_result["runs"] if x["model"] == "capsule-su" and x["seed"] == 1)
    assert pair_metrics(predict_lengths(model, images), targets)["top2"] == row["horizontal_top2"]


def test_one_seed_has_no_spread(digits):
    r = two_digit_experiment(digits, models=["pooling"], seeds=[3], epochs=1, batch_size=48, n_pairs=5,
                             device="cpu", progress=False)
    assert r["table"][0]["single_acc_std"] is None and r["config"]["seeds"] == [3]


@pytest.mark.parametrize("bad, match", [
    (dict(models=["pooling", "capsnet"]), "models"),
    (dict(models=[]), "models"),
    (dict(seeds=[0, 0]), "seeds"),
    (dict(seeds=[-1]), "seeds"),
    (dict(epochs={"pooling": 1}), "epochs"),
    (dict(epochs=0), "epochs"),
    (dict(layouts=["vertical", "diagonal"]), "layouts"),
    (dict(n_pairs=0), "n_pairs"),
    (dict(margin_lam=-0.1), "margin_lam"),
    (dict(squash_k=0), "squash_k"),
    (dict(init="zeros"), "init"),
])
def test_experiment_rejects_bad_arguments(digits, bad, match):
    with pytest.raises(ValueError, match=match):
        two_digit_experiment(digits, **{**TINY, **bad})


def test_experiment_rejects_multi_hot_training_labels(digits):
    wrong = SimpleNamespace(**{**vars(digits), "y_train": torch.nn.functional.one_hot(digits.y_train, 10).float()})
    with pytest.raises(ValueError, match="integer labels"):
        two_digit_experiment(wrong, **TINY)


def test_presets():
    for mode, p in PRESETS.items():
        assert len(p["seeds"]) >= 3 and list(p["models"]) == list(MODELS), mode
        assert {"vertical", "horizontal"} <= set(p["layouts"]), mode
    assert PRESETS["full"]["epochs"] == SU_EPOCHS and PRESETS["full"]["batch_size"] == 128
    assert PRESETS["full"]["source"] == "auto" and PRESETS["quick"]["source"] == "sample"
    assert PRESETS["full"]["margin_lam"] == 0.25


# ---------------------------------------------------------------- the CLI
def test_cli_choices_match_the_module():
    assert cli.TWO_DIGIT_MODELS == tuple(MODELS)
    assert cli.TWO_DIGIT_LAYOUTS == LAYOUTS and cli.TWO_DIGIT_INITS == INITS


def test_cli_two_digits_bad_arguments():
    for bad in (["--models", "capsnet"], ["--seeds", "-1"], ["--pairs", "0"], ["--margin-lam", "-1"],
                ["--layouts", "diagonal"], ["--preset", "huge"], ["--seeds", "0", "0"]):
        r = subprocess.run([sys.executable, "-m", "capsedu", "two-digits", *bad], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2, bad
        assert len(r.stderr.strip().splitlines()) == 1 and "error" in r.stderr, r.stderr


def test_cli_prints_the_same_table_as_the_function(digits, capsys, tmp_path):
    args = ["two-digits", "--preset", "smoke", "--source", "sample", "--limit", "48", "--test-limit", "60",
            "--models", "pooling", "capsule-su", "--seeds", "0", "1", "--epochs", "1", "--batch-size", "16",
            "--pairs", "30", "--device", "cpu", "--no-progress", "--out", str(tmp_path / "r.json")]
    assert cli.main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((tmp_path / "r.json").read_text())
    kwargs = {k: v for k, v in PRESETS["smoke"].items() if k != "source"}
    direct = two_digit_experiment(digits, **{**kwargs, "models": ["pooling", "capsule-su"], "seeds": [0, 1],
                                             "epochs": 1, "batch_size": 16, "n_pairs": 30, "device": "cpu",
                                             "progress": False})
    assert printed["preset"] == "smoke" and printed["config"] == direct["config"]
    assert printed["table"] == direct["table"]                        # CPU training is deterministic
