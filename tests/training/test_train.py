"""capsedu.training.loop and the CLI: learning, exact resume, safe checkpoints, NaN detection, exit codes.

Everything runs on the CPU in well under a minute: tiny CapsNets, a few hundred digits.
"""
from dataclasses import fields
import inspect
import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
import cli_helpers
from cli_helpers import TINY, subset
from torch import nn

import capsedu.training.loop
from capsedu.core.capsnet import CapsNet
from capsedu.runtime.checkpoints import CheckpointError, load_checkpoint
from capsedu.training.evaluation import evaluate
from capsedu.training.config import TrainConfig
from capsedu.training.loop import fit

SMALL = dict(conv_channels=16, primary_types=8, primary_dim=8, digit_dim=8, decoder_hidden=(32,))
FAST = dict(device="cpu", progress=False)


def tiny_capsnet(**kw):
    torch.manual_seed(0)
    return CapsNet(**{**TINY, **kw})


@pytest.fixture(scope="module")
def digits(mnist_sample):
    return subset(mnist_sample, 600, 300)


@pytest.fixture
def noise():
    return cli_helpers.noise(48, 16)


# ---------------------------------------------------------------- learning
def test_capsnet_learns_digits(digits):
    torch.manual_seed(0)
    model = CapsNet(**SMALL)
    h = fit(model, digits, epochs=2, batch_size=32, lr=3e-3, shift=1, **FAST)
    first, last = h[0], h[-1]
    assert last["loss"] < 0.6 * first["loss"]
    assert last["loss"] == pytest.approx(last["margin"] + last["recon"])
    assert last["test_acc"] > 0.5                      # chance is 0.1
    assert last["steps"] == 2 * math.ceil(600 / 32)
    # the history's test accuracy is what evaluate measures on the same images
    assert evaluate(model, digits.x_test, digits.y_test)["accuracy"] == pytest.approx(last["test_acc"])
    record = json.loads(json.dumps(h.as_dict()))["epochs"][-1]
    assert set(record) == {"epoch", "steps", "loss", "margin", "recon", "train_acc", "test_acc",
                           "images_per_s", "seconds", "lr"}
    assert h["epoch"] == [1, 2]


def test_margin_loss_model_with_one_hot_targets(digits):
    """A model that returns scores, trained on float (N, 10) targets instead of integer labels."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 10), nn.Sigmoid())
    hot = SimpleNamespace(x_train=digits.x_train, y_train=nn.functional.one_hot(digits.y_train, 10).float(),
                          x_test=digits.x_test, y_test=digits.y_test)
    h = fit(model, hot, epochs=2, batch_size=50, lr=1e-2, loss="margin", shift=0, **FAST)
    assert h[-1]["loss"] < h[0]["loss"] and h[-1]["test_acc"] > 0.5 and h[-1]["recon"] == 0.0
    with pytest.raises(TypeError, match="try loss='margin'"):
        fit(model, hot, epochs=1, **FAST)                # loss="capsnet" needs CapsNet's triple


def test_lr_decays_in_a_staircase_and_windowed_readback_agrees(noise, monkeypatch):
    kw = dict(epochs=3, batch_size=16, lr=1e-2, lr_decay=0.5, decay_steps=4, shift=0, **FAST)
    h = fit(tiny_capsnet(), noise, **kw)
    assert h["steps"] == [3, 6, 9]
    assert h["lr"] == pytest.approx([1e-2, 5e-3, 2.5e-3])  # 0.5 ** (steps // 4)
    monkeypatch.setitem(capsedu.training.loop.SYNC_EVERY, "cpu", 2)  # as on a GPU: read back every 2 steps
    h2 = fit(tiny_capsnet(), noise, **kw)
    for key in ("loss", "margin", "recon", "train_acc", "test_acc"):
        assert h2[key] == h[key], key


# ---------------------------------------------------------------- checkpoints
def test_resume_is_bit_exact(noise, tmp_path):
    """2 epochs at once == 1 epoch, a new process-like restart, then the 2nd epoch."""
    a, b = str(tmp_path / "a.pt"), str(tmp_path / "b.pt")
    whole = tiny_capsnet()
    h_whole = fit(whole, noise, epochs=2, batch_size=16, checkpoint=a, **FAST)
    fit(tiny_capsnet(), noise, epochs=1, batch_size=16, checkpoint=b, **FAST)
    torch.manual_seed(123)                              # a different global RNG: must not matter
    resumed = tiny_capsnet(routing="hinton")
    h_resumed = fit(resumed, noise, epochs=2, batch_size=16, checkpoint=b, **FAST)
    for (name, p), q in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(p, q), name
    assert [e["loss"] for e in h_whole.epochs] == [e["loss"] for e in h_resumed.epochs]
    assert sorted(os.listdir(tmp_path)) == ["a.pt", "b.pt"]   # no .tmp left behind

    # a finished run returns its stored history and weights without training
    again = tiny_capsnet()
    h_again = fit(again, noise, epochs=2, batch_size=16, checkpoint=b, **FAST)
    assert h_again.epochs == h_resumed.epochs
    assert torch.equal(again.conv1.weight, resumed.conv1.weight)
    # other settings than the stored run's are refused, naming the difference
    with pytest.raises(CheckpointError, match="batch_size"):
        fit(tiny_capsnet(), noise, epochs=3, batch_size=8, checkpoint=b, **FAST)


def test_every_same_run_setting_is_checked_on_resume(noise, tmp_path):
    """No TrainConfig field marked same_run can be left out of the resume check: change each in turn."""
    path = str(tmp_path / "ckpt.pt")
    base = TrainConfig(epochs=1, batch_size=16, checkpoint=path, **FAST)
    fit(tiny_capsnet(), noise, base)
    for f in fields(TrainConfig):
        value = getattr(base, f.name)
        if not f.metadata["same_run"]:
            continue
        other = next(c for c in f.metadata["choices"] if c != value) if "choices" in f.metadata else \
            value + 1 if f.type == "int" else value / 2
        with pytest.raises(CheckpointError, match=f"{f.name}: "):
            fit(tiny_capsnet(), noise, base, epochs=2, **{f.name: other})


def test_fit_takes_one_config_and_overrides(noise):
    params = inspect.signature(fit).parameters.values()
    assert len([p for p in params if p.kind != p.VAR_KEYWORD]) <= 4
    with pytest.raises(TypeError, match="unknown setting.*learning_rate"):
        fit(tiny_capsnet(), noise, epochs=1, learning_rate=1e-3, **FAST)
    with pytest.raises(TypeError, match="config must be a TrainConfig"):
        fit(tiny_capsnet(), noise, {"epochs": 1})
    config = TrainConfig(epochs=1, batch_size=16, lr=3e-3, **FAST)
    assert fit(tiny_capsnet(), noise, config, batch_size=24).meta["batch_size"] == 24   # the override wins
    assert config.batch_size == 16                                                     # unchanged


def test_unreadable_checkpoints_raise_one_clear_error(noise, tmp_path):
    path = tmp_path / "ckpt.pt"
    fit(tiny_capsnet(), noise, epochs=1, batch_size=16, checkpoint=str(path), **FAST)
    blob = path.read_bytes()
    for bad in (blob[: len(blob) // 2], b"not a checkpoint"):
        path.write_bytes(bad)
        with pytest.raises(CheckpointError, match=r"ckpt\.pt.*delete") as info:
            fit(tiny_capsnet(), noise, epochs=2, batch_size=16, checkpoint=str(path), **FAST)
        assert info.value.__cause__ is None and info.value.__suppress_context__
    torch.save({"weights": torch.zeros(3)}, path)       # readable, but not ours
    with pytest.raises(CheckpointError, match="not a capsedu checkpoint"):
        load_checkpoint(str(path))


# ---------------------------------------------------------------- non-finite loss
class NaNAfter(nn.Module):
    """Linear scores that turn NaN from the `n`-th forward call on."""

    def __init__(self, n):
        super().__init__()
        self.n, self.calls, self.linear = n, 0, nn.Linear(784, 10)

    def forward(self, x):
        self.calls += self.training  # evaluation calls do not count
        scores = torch.sigmoid(self.linear(x.flatten(1)))
        return scores * float("nan") if self.calls >= self.n else scores


@pytest.mark.parametrize("sync_every", [1, 3])
def test_nan_loss_names_epoch_and_step(noise, monkeypatch, sync_every):
    """Also when losses are read back in windows of several steps, as on a GPU."""
    monkeypatch.setitem(capsedu.training.loop.SYNC_EVERY, "cpu", sync_every)
    # 48 images in batches of 12: step 10 is the second batch of epoch 3
    with pytest.raises(FloatingPointError, match=r"epoch 3, step 10 \(batch 2 of 4\)"):
        fit(NaNAfter(10), noise, epochs=4, batch_size=12, loss="margin", shift=0, **FAST)
    model = tiny_capsnet()
    with torch.no_grad():
        model.conv1.weight[0, 0, 0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="epoch 1, step 1"):
        fit(model, noise, epochs=1, batch_size=16, **FAST)


def test_bad_arguments_are_named(noise):
    with pytest.raises(ValueError, match="epochs"):
        fit(tiny_capsnet(), noise, epochs=0, **FAST)
    with pytest.raises(ValueError, match="amp"):
        fit(tiny_capsnet(), noise, epochs=1, amp="fp8", **FAST)
    with pytest.raises(TypeError, match="x_train"):
        fit(tiny_capsnet(), SimpleNamespace(), epochs=1, **FAST)


# ---------------------------------------------------------------- command line
def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "capsedu", *args], capture_output=True, text=True, timeout=120)


def test_cli_help_and_bad_arguments():
    top, train = run_cli("--help"), run_cli("train", "--help")
    assert top.returncode == 0 and all(c in top.stdout for c in ("train", "evaluate", "info"))
    assert train.returncode == 0 and "--epochs" in train.stdout and "--fresh" in train.stdout
    for f in fields(TrainConfig):  # the options are TrainConfig's fields (those with a help line)
        assert f.metadata["help"] is None or f"--{f.name.replace('_', '-')} " in train.stdout, f.name
    assert "--no-resume" not in train.stdout
    for bad in (["train", "--epochs", "0"], ["train", "--batch-size", "-5"], ["train", "--routing", "em"], []):
        r = run_cli(*bad)
        assert r.returncode == 2, bad
        assert len(r.stderr.strip().splitlines()) == 1 and "error" in r.stderr, r.stderr
