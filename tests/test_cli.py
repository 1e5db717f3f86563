"""The CLI given bad arguments, bad paths and bad checkpoints: exit code 1 or 2 with one line on stderr
that names what was expected, and every checkpoint, result and folder as it was before."""
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from cli_helpers import run, snapshot, tiny_cli_capsnet

import capsedu.data.mnist
import capsedu.training.loop
from capsedu import cli
from capsedu.runtime.checkpoints import save_atomic

TRAIN = ["train", "--source", "sample", "--limit", "32", "--epochs", "1", "--batch-size", "16",
         "--device", "cpu", "--no-progress"]


@pytest.fixture(autouse=True)
def tiny_capsnet(monkeypatch):
    tiny_cli_capsnet(monkeypatch)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished one-epoch run of the CLI: its folder holds checkpoint.pt and metrics.json."""
    with pytest.MonkeyPatch.context() as patch:
        tiny_cli_capsnet(patch)
        out = tmp_path_factory.mktemp("run") / "run"
        assert cli.main([*TRAIN, "--out", str(out)]) == 0
    return out


def test_train_records_refuses_other_settings_and_evaluate_reads_it(trained, capsys, tmp_path):
    metrics = json.loads((trained / "metrics.json").read_text())
    assert metrics["dataset"]["train"] == 32 and len(metrics["epochs"]) == 1
    assert metrics["final_test_accuracy"] == metrics["epochs"][-1]["test_acc"]
    code, out, _ = run(capsys, "evaluate", "--checkpoint", str(trained / "checkpoint.pt"), "--limit", "100",
                       "--device", "cpu")
    result = json.loads(out)
    assert code == 0 and result["count"] == 100 and result["source"] == "sample" and 0 <= result["accuracy"] <= 1
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    code, _, err = run(capsys, *TRAIN, "--limit", "64", "--out", str(out))     # not the stored run
    assert code == 1 and len(err) == 1 and "n_train" in err[0] and "checkpoint" in err[0], err
    assert "pass --fresh to start over" in err[0]          # what --fresh does: test_fresh_replaces_the_checkpoint_...
    assert run(capsys, *TRAIN, "--out", str(out))[0] == 0    # the same command again: resumed (all done)


@pytest.mark.parametrize("extra, match", [
    (["--device", "tpu"], "device must be 'auto', 'cpu', 'cuda' or 'mps', got 'tpu'"),
    (["--source", "idx"], r"source='idx' for mnist needs root="),
    (["--source", "idx", "--root", "/nonexistent/idx"], "IDX folder /nonexistent/idx not found"),
    (["--limit", "0"], r"expected an integer, got '0' \(allowed: 1 to 1,000,000,000\)"),
])
def test_fresh_with_bad_arguments_keeps_the_checkpoint(trained, capsys, extra, match):
    before = snapshot(trained)
    try:
        code, _, err = run(capsys, *TRAIN, "--out", str(trained), "--fresh", *extra)
    except SystemExit as exit:                                           # argparse: exit 2
        code, err = exit.code, capsys.readouterr().err.strip().splitlines()
    assert code in (1, 2) and len(err) == 1 and re.search(match, err[0]), err
    assert snapshot(trained) == before                                   # nothing removed or rewritten


def test_fresh_replaces_the_checkpoint_only_with_a_new_one(trained, capsys, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes((trained / "checkpoint.pt").read_bytes())
    code, stdout, _ = run(capsys, *TRAIN, "--out", str(out), "--fresh", "--seed", "3")  # another run's settings
    assert code == 0 and "replaced after the first new epoch" in stdout
    assert torch.load(out / "checkpoint.pt", weights_only=True)["meta"]["seed"] == 3
    assert sorted(os.listdir(out)) == ["checkpoint.pt", "metrics.json"]


def test_out_paths_are_checked_before_anything_runs(capsys, tmp_path):
    a_file = tmp_path / "results.txt"
    a_file.write_text("keep me")
    blocked = tmp_path / "blocked"
    (blocked / "metrics.json").mkdir(parents=True)
    cases = [(a_file, r"--out .*results\.txt is a file; expected a folder"),
             (blocked, r"metrics\.json is a folder; expected the file metrics\.json"),
             (Path("/proc/capsedu-out"), r"cannot write into /proc"),
             (a_file / "sub", r"cannot write into .*results\.txt")]
    for out, match in cases:
        code, _, err = run(capsys, *TRAIN, "--out", str(out))
        assert code == 1 and len(err) == 1 and re.search(match, err[0]), err
        assert "delete" not in err[0]
    assert a_file.read_text() == "keep me" and snapshot(blocked) == {"metrics.json": None}


def test_a_failed_train_leaves_no_empty_folder(capsys, tmp_path, monkeypatch):
    for argv in (["--device", "bogus"], ["--source", "idx", "--root", str(tmp_path / "none")]):
        code, _, err = run(capsys, *TRAIN, "--out", str(tmp_path / "new" / "run"), *argv)
        assert code == 1 and len(err) == 1
        assert not (tmp_path / "new").exists()

    def diverge(*args, **kwargs):
        raise FloatingPointError("loss is nan at epoch 1, step 1")
    monkeypatch.setattr(capsedu.training.loop, "fit", diverge)                 # fails after the folders were made
    code, _, err = run(capsys, *TRAIN, "--out", str(tmp_path / "new" / "run"))
    assert code == 1 and "loss is nan" in err[0] and sorted(os.listdir(tmp_path)) == []


@pytest.mark.parametrize("key", ["model", "meta", "epoch", "rng_cpu"])
def test_evaluate_and_resume_name_a_missing_key(trained, capsys, tmp_path, key):
    state = torch.load(trained / "checkpoint.pt", weights_only=True)
    del state[key]
    out = tmp_path / "run"
    out.mkdir()
    save_atomic(state, str(out / "checkpoint.pt"))
    for argv in (["evaluate", "--checkpoint", str(out / "checkpoint.pt"), "--limit", "10"],
                 [*TRAIN, "--epochs", "2", "--out", str(out)]):
        code, _, err = run(capsys, *argv)
        assert code == 1 and len(err) == 1 and f"is incomplete: it lacks {key}" in err[0], err


def test_evaluate_refuses_folders_and_damaged_files(trained, capsys, tmp_path):
    code, _, err = run(capsys, "evaluate", "--checkpoint", str(trained))
    assert code == 1 and "is a folder; expected a checkpoint file" in err[0] and "delete" not in err[0]
    blob = bytearray((trained / "checkpoint.pt").read_bytes())
    blob[len(blob) // 2] ^= 0x40
    (tmp_path / "flipped.pt").write_bytes(bytes(blob))
    code, _, err = run(capsys, "evaluate", "--checkpoint", str(tmp_path / "flipped.pt"))
    assert code == 1 and len(err) == 1 and "flipped.pt" in err[0] and ("CRC-32" in err[0] or "corrupt" in err[0])
    # an absurd stored config (evaluate builds with capsnet_from_state): test_checkpoints' configs test


def test_info_reports_a_sample_that_fails_its_checksum(capsys, monkeypatch):
    code, out, _ = run(capsys, "info")
    assert code == 0 and json.loads(out)["data"]["sample"] is True
    monkeypatch.setattr(capsedu.data.mnist, "SAMPLE_SHA256", "0" * 64)
    code, out, _ = run(capsys, "info")
    assert code == 0 and json.loads(out)["data"]["sample"] is False


def test_glue_hands_myst_plain_python_numbers(monkeypatch):
    """numpy 2 writes np.float64(0.5) as its repr, which the book's {glue:text}`x:.3f` cannot format."""
    import myst_nb
    import numpy as np

    import capsedu
    seen = {}
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=True: seen.update({name: value}))
    capsedu.glue_all({"f": np.float64(0.5), "i": np.int64(3), "s": "text", "a": np.arange(2)})
    assert type(seen["f"]) is float and type(seen["i"]) is int and seen["s"] == "text"
    assert isinstance(seen["a"], np.ndarray)
