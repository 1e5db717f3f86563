"""An experiment's stored runs, one file per (model, seed) run, and its grid spread over processes.

The end-to-end tests run chapter 9's robustness experiment at its smoke preset with two seeds (6 runs of
a few seconds, seeded: on one CPU thread a rerun gives the same numbers, timing aside) and compare the
folders written by two processes (``--devices``, which starts torchrun, and ``--shard``) with one process's.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import measured, run, snapshot

from capsedu.experiments import robustness
from capsedu.runtime import results
from capsedu.runtime.stored import read_runs, read_stored

ROOT = Path(__file__).resolve().parents[2]
COMMAND = ["robustness", "--preset", "smoke", "--seeds", "0", "1", "--no-progress"]
GRID = [(m, s) for s in (0, 1) for m in robustness.PRESETS["smoke"].models]   # one process's order
FILES = sorted(f"{m}-seed{s}.json" for m, s in GRID)
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def capsedu(*argv, timeout=300):
    return subprocess.run([sys.executable, "-m", "capsedu", *argv], env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def runs_of(folder: Path):
    assert sorted(p.name for p in folder.iterdir()) == FILES     # one sealed file per run, nothing else left
    data = read_runs(folder)
    assert [(r["model"], r["seed"]) for r in data["runs"]] == GRID
    return measured(data["runs"])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One process's run of the command (on one thread): its folder and its printed JSON."""
    out = tmp_path_factory.mktemp("one") / "robustness"
    done = capsedu(*COMMAND, "--out", str(out), "--threads", "1", "--device", "cpu")
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads(done.stdout)


def test_each_run_is_its_own_sealed_file_and_the_folder_reads_back_as_the_result(reference, monkeypatch):
    out, printed = reference
    assert runs_of(out) == measured(printed["runs"])
    one = read_stored(out / "capsnet-seed1.json", require_checksum=True)
    assert one["run"] == printed["runs"][GRID.index(("capsnet", 1))] and one["settings"] == printed["settings"]
    monkeypatch.setattr(results, "results_dir", lambda: out.parent)
    data, note = results.stored_or_preview("robustness")             # what chapter 9 reads: the matched epochs
    columns = ["model", "seed", "epoch", "clean", "affine@1"]
    assert note is None and robustness.frames(data)["runs"][columns].equals(robustness.frames(printed)["runs"][columns])


def test_a_rerun_skips_the_stored_runs_and_trains_a_missing_one(reference, tmp_path, capsys, monkeypatch):
    out = tmp_path / "robustness"
    shutil.copytree(reference[0], out)
    (out / "cnn-seed1.json").unlink()
    trained = []
    real = robustness.make_model
    monkeypatch.setattr(robustness, "make_model", lambda name, config: trained.append(name) or real(name, config))
    code, printed, _ = run(capsys, *COMMAND, "--out", str(out), "--device", "cpu", "--threads", "1")
    assert code == 0 and trained == ["cnn"]
    assert runs_of(out) == runs_of(reference[0])
    code, _, _ = run(capsys, *COMMAND, "--seeds", "0", "1", "2", "--out", str(out), "--device", "cpu")  # a grid grows
    assert code == 0 and trained == ["cnn", *robustness.PRESETS["smoke"].models]


@pytest.mark.parametrize("extra, match", [
    (["--shard", "2/2"], "expected K/N"),
    (["--shard", "0/2"], "needs --out"),
    (["--devices", "cpu,,cpu"], "comma list"),
    (["--devices", "cpu,cpu", "--shard", "0/2", "--out", "{tmp}/r"], "not allowed with argument --devices"),
])
def test_bad_grid_flags_are_one_line_and_create_nothing(tmp_path, capsys, extra, match):
    before = snapshot(tmp_path)
    try:
        code, _, err = run(capsys, *COMMAND, *[a.format(tmp=tmp_path) for a in extra])
    except SystemExit as exit:                                       # argparse: a bad value
        code, err = exit.code, capsys.readouterr().err.strip().splitlines()
    assert code in (1, 2) and len(err) == 1 and match in err[0]
    assert snapshot(tmp_path) == before


def test_two_shards_by_hand_give_the_one_process_runs(reference, tmp_path):
    out = tmp_path / "robustness"
    for k in (0, 1):
        done = capsedu(*COMMAND, "--out", str(out), "--shard", f"{k}/2", "--threads", "1", "--device", "cpu")
        assert done.returncode == 0 and done.stdout == "" and f"share {k}/2" in done.stderr, done.stderr[-3000:]
    assert runs_of(out) == runs_of(reference[0])


def test_devices_start_torchrun_and_print_the_whole_grid(reference, tmp_path):
    out = tmp_path / "robustness"
    shutil.copytree(reference[0], out)          # --fresh: cleared once, before the processes start
    done = capsedu(*COMMAND, "--out", str(out), "--devices", "cpu,cpu", "--threads", "2", "--fresh")
    assert done.returncode == 0, done.stderr[-3000:]
    assert runs_of(out) == runs_of(reference[0])
    printed = json.loads(done.stdout)
    assert measured(printed["runs"]) == runs_of(out)
    assert read_runs(out)["date"] != reference[1]["date"]     # every run trained again
