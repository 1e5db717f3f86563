"""Tests for chapter 9's experiments: the baseline CNN, the three runners (smoke presets), resuming, the CLI."""
import dataclasses

import pytest
import torch

from capsedu import PRESET_NAMES
from capsedu.core.params import count_parameters
from capsedu.experiments import ablation, multimnist, robustness
from capsedu.experiments.multimnist import PairCapsNet
from capsedu.experiments.catalogue import EXPERIMENTS
from capsedu.methods.baseline_cnn import BaselineCNN, BaselineConfig
from capsedu.runtime.stored import read_runs, write_stored

MODULES = {"robustness": robustness, "ablation": ablation, "multimnist": multimnist}


# ---------------------------------------------------------------- the models
def test_baseline_parameter_counts():
    paper = count_parameters(BaselineCNN())
    affnist = count_parameters(BaselineCNN(BaselineConfig.affnist()))
    print(f"baseline CNN: {paper:,} parameters on 28x28 (the paper's 35.4M); {affnist:,} on the 40x40 canvas")
    # conv 1x256, 256x256, 256x128 (5x5) + dense 128*28*28 -> 328 -> 192 -> 10
    assert paper == 35_445_522 and round(paper / 1e6, 1) == 35.4
    # the same layers with 2x2 pooling after conv 1 and 2: the dense layer reads 128 x 10 x 10
    assert affnist == 6_656 + 1_638_656 + 819_328 + (12_800 * 328 + 328) + (328 * 192 + 192) + (192 * 10 + 10)


def test_baseline_outputs_scores_and_checks_shapes():
    model = BaselineCNN(BaselineConfig.affnist(channels=(8, 8, 4), hidden=(16,)))
    scores = model(torch.rand(3, 1, 40, 40))
    assert scores.shape == (3, 10) and ((scores > 0) & (scores < 1)).all()
    with pytest.raises(ValueError, match=r"images of shape \(batch, 1, 40, 40\)"):
        model(torch.rand(3, 1, 28, 28))
    with pytest.raises(ValueError, match="kernel must be odd"):
        BaselineConfig(kernel=4)
    with pytest.raises(ValueError, match="pool_after holds convolution numbers 1..3"):
        BaselineConfig(pool_after=(4,))


def test_baseline_logits_option_adds_no_weight_and_drops_the_sigmoid():
    for config in (BaselineConfig(), BaselineConfig.affnist(channels=(8, 8, 4), hidden=(16,))):
        torch.manual_seed(0)
        scores = BaselineCNN(config)
        torch.manual_seed(0)
        logits = BaselineCNN(dataclasses.replace(config, logits=True))
        assert not config.logits and count_parameters(logits) == count_parameters(scores)
        assert isinstance(scores.head[-1], torch.nn.Sigmoid) and isinstance(logits.head[-1], torch.nn.Linear)
        a, b = scores.state_dict(), logits.state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # the same draw from one seed
    scores.eval(), logits.eval()
    x = torch.rand(4, 1, 40, 40)
    assert torch.allclose(torch.sigmoid(logits(x)), scores(x), atol=1e-6)
    assert count_parameters(BaselineCNN(logits=True)) == 35_445_522
    with pytest.raises(ValueError, match="logits must be True or False"):
        BaselineConfig(logits=1)


def test_robustness_models_and_their_losses():
    config = robustness.PRESETS["smoke"]
    assert robustness.MODELS == ("cnn", "capsnet", "cnn-ce")  # a new model goes last: earlier runs keep their order
    assert robustness.MODEL_LOSS == {"cnn": "margin", "capsnet": "capsnet", "cnn-ce": "cross_entropy"}
    for name, preset in robustness.PRESETS.items():
        assert "cnn-ce" in preset.models, name
    cnn, ce = (robustness.make_model(name, config) for name in ("cnn", "cnn-ce"))  # logits: the baseline tests
    assert not cnn.config.logits and ce.config.logits


def _epochs(vals, strengths=(0.0, 1.0)):
    return [{"epoch": k, "val": v, "clean": v, **{f"affine@{s:g}": v / 2 for s in strengths},
             "wrong": [[k, 0]]} for k, v in enumerate(vals, start=1)]


def test_matching_works_for_any_number_of_models():
    vals = {"cnn": [0.5, 0.8, 0.9], "capsnet": [0.6, 0.7, 0.85], "cnn-ce": [0.4, 0.75, 0.7]}
    runs = [{"model": m, "seed": 0, "params": 1, "epochs": _epochs(v)} for m, v in vals.items()]

    def matched(models, runs):
        result = {"settings": {"models": list(models), "seeds": [0]}, "runs": runs}
        return [(r["model"], r["epoch"], r["val"]) for r in robustness.matched_runs(result)]
    # the lowest best is cnn-ce's 0.75: each model at its first epoch reaching 0.75
    assert matched(vals, runs) == [("cnn", 2, 0.8), ("capsnet", 3, 0.85), ("cnn-ce", 2, 0.75)]
    # without cnn-ce the bar is capsnet's 0.85
    assert matched(("cnn", "capsnet"), runs[:2]) == [("cnn", 3, 0.9), ("capsnet", 3, 0.85)]
    assert matched(vals, runs[1:]) == []                       # a seed without every model waits


def test_pair_capsnet_reconstructs_each_true_digit_separately():
    model = PairCapsNet(36, conv_channels=8, primary_types=2, decoder_hidden=(8,))
    x = torch.rand(4, 3, 36, 36)
    labels = torch.zeros(4, 10)
    labels[:, [2, 7]] = 1
    _, lengths, recon = model(x, labels)
    assert lengths.shape == (4, 10) and recon.shape == (4, 3, 36, 36)
    assert torch.equal(recon[:, 0], x[:, 0])  # channel 0 passes through: it adds nothing to the loss
    # channel 1 is the decoder fed capsule 2 alone, channel 2 capsule 7 alone
    digit = model.capsnet.capsules(x[:, :1])
    only = torch.zeros(4, 10)
    only[:, 7] = 1
    assert torch.allclose(recon[:, 2:3], model.capsnet.decoder(digit, only), atol=1e-6)
    classes, parts = model.segment(x)
    assert classes.shape == (4, 2) and (classes[:, 0] < classes[:, 1]).all() and parts.shape == (4, 2, 36, 36)


def test_detach_variant_changes_only_the_gradients():
    config = ablation.PRESETS["smoke"]
    torch.manual_seed(0)
    full, _ = ablation.make_variant("r3", config)
    torch.manual_seed(0)
    detached, weight = ablation.make_variant("r3-detach", config)
    assert weight == 0.0 and ablation.make_variant("r3+recon", config)[1] == config.recon_weight
    for m in (full, detached):  # longer predictions: the couplings move away from uniform
        with torch.no_grad():
            m.digits.weight.mul_(30)
    x = torch.rand(2, 1, 40, 40)
    outs = [m(x)[1] for m in (full, detached)]
    assert torch.allclose(outs[0], outs[1], atol=1e-5)
    grads = []
    for m, out in zip((full, detached), outs):
        out.sum().backward()
        grads.append(m.digits.weight.grad.clone())
    assert (grads[0] - grads[1]).abs().max() > 1e-3 * grads[0].abs().max()


# ---------------------------------------------------------------- configs
def test_every_experiment_has_every_preset():
    for name, experiment in EXPERIMENTS.items():  # two-digits has more: its investigation's
        presets = set(experiment.code().presets)
        assert presets == set(PRESET_NAMES) or name == "two-digits" and presets > set(PRESET_NAMES), name


@pytest.mark.parametrize("make, message", [
    (lambda: robustness.RobustnessConfig(models=("cnn", "mlp")), "RobustnessConfig.models must be distinct names"),
    (lambda: robustness.RobustnessConfig(strengths=(0.5, 1.5)), "RobustnessConfig.strengths must hold numbers"),
    (lambda: robustness.RobustnessConfig(max_shift=7), r"RobustnessConfig.max_shift must be an int in \[0, 6\]"),
    (lambda: robustness.RobustnessConfig(seeds=(0, 0)), "RobustnessConfig.seeds must be a non-empty tuple"),
    (lambda: ablation.AblationConfig(variants=("r2",)), "AblationConfig.variants must be distinct names"),
    (lambda: ablation.AblationConfig(epochs=0), r"AblationConfig.epochs must be an int in \[1, "),
    (lambda: ablation.AblationConfig(canvas=28, max_shift=3), r"AblationConfig.max_shift must be an int in \[0, 2\]"),
    (lambda: ablation.AblationConfig(canvas=24, max_shift=0), r"AblationConfig.canvas must be an int in \[28, "),
    (lambda: multimnist.MultiMNISTConfig(canvas=36, max_shift=5), r"MultiMNISTConfig.max_shift must be an int in \[0, 4\], got 5"),
    (lambda: multimnist.MultiMNISTConfig(lr=-1), "MultiMNISTConfig.lr must be a positive number"),
])
def test_bad_configs(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_runner_wants_its_config():
    with pytest.raises(TypeError, match="config must be a RobustnessConfig"):
        robustness.robustness_experiment(ablation.PRESETS["smoke"])


# ---------------------------------------------------------------- the runners, end to end
def _tiny(name):
    config = MODULES[name].PRESETS["smoke"]
    if name == "ablation":  # three variants cover the three switches (iterations, reconstruction, detach)
        return dataclasses.replace(config, seeds=(0, 1), variants=("r1", "r3+recon", "r3-detach"))
    return dataclasses.replace(config, seeds=(0, 1)) if name == "robustness" else config


def _run(name, config, **kw):
    return EXPERIMENTS[name].code().run(config, progress=False, device="cpu", **kw)


def test_robustness_end_to_end(mnist_sample, tmp_path, monkeypatch):
    config = _tiny("robustness")
    losses, real = {}, robustness.train_epochs

    def recording(*args, **kwargs):
        losses[kwargs["desc"]] = kwargs["loss"]
        return real(*args, **kwargs)
    monkeypatch.setattr(robustness, "train_epochs", recording)
    result = _run("robustness", config, data=mnist_sample, out=tmp_path / "r")
    assert losses == {f"{m} seed {s}": robustness.MODEL_LOSS[m] for m in config.models for s in config.seeds}
    assert losses["cnn-ce seed 0"] == "cross_entropy"
    stored = read_runs(tmp_path / "r")
    assert stored["runs"] == result["runs"] and stored["settings"]["seeds"] == [0, 1]
    assert {"command", "date", "hardware", "torch", "settings"} <= set(stored)
    assert len(stored["runs"]) == 3 * 2 and [r["loss"] for r in stored["runs"][:3]] == [
        "margin", "capsnet", "cross_entropy"]
    sizes = {"val": config.n_val, "clean": config.n_test, "affine@0": config.n_test, "affine@1": config.n_test}
    for r in stored["runs"]:  # every set of every epoch: the items missed, sorted, agreeing with the accuracy
        for e in r["epochs"]:
            assert set(e["misses"]) == set(sizes)
            for k, missed in e["misses"].items():
                assert missed == sorted(set(missed)) and all(0 <= i < sizes[k] for i in missed)
                assert 1 - len(missed) / sizes[k] == pytest.approx(e[k], abs=1e-6)
            assert [i for i, _ in e["wrong"]] == e["misses"]["affine@1"]
    matched = robustness.matched_runs(stored)   # which epoch it picks: test_matching_works_for_any_number_...
    assert len(matched) == 6 and all("misses" in r and "best" not in r for r in matched)
    table = robustness.frames(stored)["runs"]
    assert {"clean", "affine@0", "affine@1"} <= set(table) and table["affine@1"].between(0, 1).all()


def test_ablation_and_multimnist_end_to_end(mnist_sample, tmp_path):
    result = _run("ablation", _tiny("ablation"), data=mnist_sample, out=tmp_path / "a")
    assert [r["variant"] for r in result["runs"]] == ["r1", "r3+recon", "r3-detach"] * 2
    n = _tiny("ablation").n_test
    for r in result["runs"]:  # the items each run misses, at the epoch it reports (the last)
        assert set(r["misses"]) == {"clean", "affine"}
        assert 1 - len(r["misses"]["clean"]) / n == pytest.approx(r["epochs"][-1]["clean"], abs=1e-6)
        assert 100 * len(r["misses"]["clean"]) / n == pytest.approx(r["clean_error"], abs=1e-4)
        assert 1 - len(r["misses"]["affine"]) / n == pytest.approx(r["affine_acc"], abs=1e-6)
        assert all(m == sorted(set(m)) for m in r["misses"].values())
    result = _run("multimnist", _tiny("multimnist"), data=mnist_sample, out=tmp_path / "m")
    record = result["runs"][0]
    assert 0 <= record["top2"] <= 1 and record["error"] == pytest.approx(100 * (1 - record["top2"]))
    model = multimnist.load_model(result, tmp_path / "m")
    assert isinstance(model, PairCapsNet)
    (tmp_path / "m" / record["weights"]).write_bytes(b"corrupt")
    with pytest.raises(ValueError, match="sha256"):
        multimnist.load_model(result, tmp_path / "m")


def test_an_interrupted_run_keeps_its_finished_runs(mnist_sample, tmp_path, monkeypatch):
    out = tmp_path / "r"
    real, calls = robustness.train_epochs, []

    def second_call_interrupted(*args, **kwargs):
        calls.append(kwargs["desc"])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    monkeypatch.setattr(robustness, "train_epochs", second_call_interrupted)
    with pytest.raises(KeyboardInterrupt):
        _run("robustness", _tiny("robustness"), data=mnist_sample, out=out)
    stored = read_runs(out)
    assert [(r["model"], r["seed"]) for r in stored["runs"]] == [("cnn", 0)]
    assert robustness.matched_runs(stored) == []                          # nothing to compare yet


def test_ablation_stored_run_is_on_the_papers_setting(mnist_sample):
    long = ablation.PRESETS["long"]
    assert (long.canvas, long.max_shift) == (28, 2)  # Table 1: 28x28 digits shifted by up to 2 pixels
    assert all((p.canvas, p.max_shift) == (40, 6) for name, p in ablation.PRESETS.items() if name != "long")
    config = dataclasses.replace(ablation.PRESETS["smoke"], variants=("r3+recon",), canvas=28, max_shift=2)
    result = _run("ablation", config, data=mnist_sample)
    run = result["runs"][0]
    assert 0 <= run["affine_acc"] <= 1 and len(run["misses"]["affine"]) == round((1 - run["affine_acc"]) * 40)
    sets = ablation._test_sets(mnist_sample, config, "cpu")
    assert all(x.shape[1:] == (1, 28, 28) for x, _ in sets.values())


def test_out_is_checked_before_training(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        _run("ablation", _tiny("ablation"), out=tmp_path / "missing" / "a")


# ---------------------------------------------------------------- the resume rule, command by command
@pytest.mark.parametrize("command", [c for c in EXPERIMENTS if c != "two-digits"])
def test_every_command_resumes_on_match_and_starts_over_with_fresh(command, tmp_path, capsys, monkeypatch):
    from capsedu.cli import main
    from capsedu.runtime.files import plain
    experiment, seen = EXPERIMENTS[command], []
    code, epochs_field = experiment.code(), experiment.epochs
    monkeypatch.setitem(EXPERIMENTS, command, experiment._replace(code=lambda: code._replace(
        run=lambda config, **kw: seen.append(kw["fresh"]) or {"runs": []})))
    monkeypatch.setattr("capsedu.data.mnist.load_dataset", lambda *a, **k: None)
    config = code.presets["smoke"]
    write_stored({"settings": plain(config), "run": {"seed": 0}}, tmp_path / "seed0.json")
    argv = [command, "--preset", "smoke", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0 and seen == [False]                          # same settings: resumed
    capsys.readouterr()
    assert main([*argv, "--epochs", "7"]) == 1                          # other settings: one line, no run
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{epochs_field}: {getattr(config, epochs_field)} there, 7 here" in err[0]
    assert "pass --fresh to start over" in err[0] and seen == [False]
    assert main([*argv, "--epochs", "7", "--fresh"]) == 0 and seen == [False, True]
    with pytest.raises(SystemExit) as stop:                            # the old flag is gone
        main([*argv, "--resume"])
    assert stop.value.code == 2


