"""Stored runs you can trust: one format (version, schema, checksum), the shipped runs intact and equal to
the files they were migrated from, every argument checked before anything is created, Ctrl-C at any moment
exits 130, damaged files are one line naming them, and the chapters' reader never stops on one.

Resuming and the grid: ``tests/experiments/test_runs.py``. Tiny configs, mostly in-process.
"""
import dataclasses
import hashlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from cli_helpers import child, run, snapshot

from capsedu import cli
from capsedu.experiments import multimnist
from capsedu.experiments.shared.runs import RunFolder
from capsedu.runtime import results
from capsedu.runtime.files import write_atomic
from capsedu.runtime.lock import LockError, OutputLock
from capsedu.runtime.stored import FORMAT, StoredRunError, checksum, read_runs, read_stored, seal, write_stored

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {"seeds": [0, 1], "epochs": 1}
HEADER = {"command": "python -m capsedu x", "date": "2026-01-01T00:00:00+00:00", "settings": SETTINGS}
# the commit whose results/ held one file per experiment, before they were split one per run
MIGRATED_FROM = "2c49e5b"


def stored(run=None, **extra):
    return {**HEADER, "run": {"model": "cnn", "seed": 0, "acc": 0.5} if run is None else run, **extra}


# ---------------------------------------------------------------- the format
def test_the_checksum_is_the_sha256_of_the_sorted_content_without_it(tmp_path):
    path = tmp_path / "r.json"
    sealed = write_stored(stored(), path)
    assert sealed["format"] == FORMAT == 1
    body = json.dumps({k: v for k, v in sealed.items() if k != "checksum"}, sort_keys=True).encode()
    assert sealed["checksum"] == "sha256:" + hashlib.sha256(body).hexdigest() == checksum(sealed)
    assert read_stored(path, require_checksum=True) == sealed
    assert seal(sealed) == sealed  # sealing twice changes nothing


# sealed again, so only the schema can catch them
SCHEMA = {"run missing": {**HEADER}, "run not a record": stored(run=[{"a": 1}]),
          "seed a string": stored(run={"model": "cnn", "seed": "0"}), "seed negative": stored(run={"model": "cnn", "seed": -1}),
          "name not a string": stored(run={"model": 3, "seed": 0}), "settings missing": {"run": {"seed": 0}},
          "date a number": stored(date=5), "newer format": {**stored(), "format": 99}}
DAMAGES = ["truncated", "a digit changed", "not utf-8", "a folder", "a list", *SCHEMA]


def _damage(path: Path, how: str):
    text = json.dumps(seal(stored()), indent=2)
    if how in SCHEMA:
        return path.write_text(json.dumps(SCHEMA[how] if how == "newer format" else seal(SCHEMA[how])))
    {"truncated": lambda: path.write_text(text[: len(text) // 2]), "a folder": path.mkdir,
     "a digit changed": lambda: path.write_text(text.replace('"acc": 0.5', '"acc": 0.6')),
     "not utf-8": lambda: path.write_bytes(b"\xff\xfe" + text.encode()), "a list": lambda: path.write_text("[]")}[how]()


def test_an_unsealed_file_is_refused_where_it_is_shown_and_says_how_to_remake_it(tmp_path):
    path = tmp_path / "pooling-seed0.json"
    path.write_text(json.dumps({"settings": SETTINGS, "run": {"model": "pooling", "seed": 0}}))
    assert read_stored(path, resuming=True)["run"]["seed"] == 0          # resuming keeps it as a run done
    with pytest.raises(StoredRunError) as err:
        read_stored(path, require_checksum=True)
    line = str(err.value)
    assert len(line.splitlines()) == 1 and str(path) in line and "no checksum" in line and "--fresh" in line


def test_the_cli_names_a_damaged_file_and_runs_nothing(tmp_path, capsys):
    _damage(tmp_path / "seed0.json", "seed a string")
    before = snapshot(tmp_path)
    code, _, err = run(capsys, "multimnist", "--preset", "smoke", "--out", str(tmp_path), "--no-progress")
    assert code == 1 and len(err) == 1 and str(tmp_path / "seed0.json") in err[0] and "seed is '0'" in err[0], err
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------- the readers
@pytest.fixture
def results_here(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    (tmp_path / "x").mkdir()
    return tmp_path


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_file_is_one_line_naming_it_on_resume_and_the_chapters_fall_back(results_here, how):
    write_stored(stored(run={"model": "cnn", "seed": 1, "acc": 0.5}), results_here / "x" / "cnn-seed1.json")
    path = results_here / "x" / "cnn-seed0.json"
    _damage(path, how)
    for read in (lambda: RunFolder(results_here / "x", {**HEADER}), lambda: results.stored_run("x")):
        with pytest.raises(StoredRunError) as err:
            read()
        assert len(str(err.value).splitlines()) == 1 and str(path) in str(err.value), err.value
        assert not isinstance(err.value.__cause__, (KeyError, AttributeError))
    data, note = results.stored_or_preview("x")
    assert data is None and len(note.splitlines()) == 1 and "cnn-seed0.json" in note and "live preview" in note


def test_stored_run_none_only_when_absent_and_the_helper_checks_what_the_chapter_reads(results_here):
    assert results.stored_run("absent") is None
    assert "is not there" in results.stored_or_preview("absent")[1]
    assert results.stored_run("x") is None and "is not there" in results.stored_or_preview("x")[1]   # empty
    write_stored(stored(), results_here / "x" / "cnn-seed0.json")
    write_stored(stored(run={"model": "cnn", "seed": 1}, settings={**SETTINGS, "epochs": 2}),
                 results_here / "x" / "cnn-seed1.json")
    assert "other settings (epochs: 2 there, 1 here)" in results.stored_or_preview("x")[1]   # a mixed folder
    (results_here / "x" / "cnn-seed1.json").unlink()
    data, note = results.stored_or_preview("x", check=lambda d: d["runs"][0]["loss"])
    assert data is None and "lacks what this chapter reads" in note and "KeyError" in note
    data, note = results.stored_or_preview("x", check=lambda d: d["runs"][0]["acc"] + 1)
    assert note is None and data["runs"][0]["acc"] == 0.5


STORED = ["ablation", "robustness", "multimnist", "compare_routing", "tutorial_vs_fixed", "two_digits_long",
          "two_digits_r1", *(f"two_digits_variants/{p.name}" for p in sorted(ROOT.glob("results/two_digits_variants/*")))]


@pytest.mark.parametrize("name", STORED)
def test_every_stored_run_is_sealed_and_equals_the_file_it_was_migrated_from(name):
    data, note = results.stored_or_preview(name)          # every file sealed, one settings
    assert note is None and data["runs"]
    try:
        text = subprocess.run(["git", "show", f"{MIGRATED_FROM}:results/{name}.json"], cwd=ROOT, capture_output=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"no git history with {MIGRATED_FROM} here (an installed package, a shallow clone)")
    old = json.loads(text)
    if "config" in old:                                   # two-digits' keys until 2026-12-03
        old["settings"] = old.pop("config")
    if name == "two_digits_r1":                           # the control's own head name since 2026-12-03
        old = json.loads(json.dumps(old).replace('"capsule-su"', '"capsule-su-r1"').replace(
            "--models capsule-su ", "--models capsule-su-r1 "))
    assert data["runs"] == old["runs"]
    header = {k: v for k, v in old.items() if k not in ("runs", "format", "checksum", "summary", "table", "seconds",
                                                         "written", "started", "resumed", "shards")}
    assert {k: data[k] for k in header} == header
    assert data["migrated_from"]["checksum"] == old["checksum"] and data["migrated_from"]["seconds"] == old["seconds"]


# ---------------------------------------------------------------- one writer at a time
HOLD = """
import sys, time
from capsedu.runtime.lock import OutputLock
lock = OutputLock(sys.argv[1]).acquire()
print("held", flush=True)
sys.stdin.readline()
lock.release()
"""


def test_a_second_writer_is_refused_at_once_in_one_line(tmp_path, capsys):
    out = tmp_path / "m"
    holder = child(HOLD, out)
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        with pytest.raises(LockError, match=r"m is being written by another process \(it holds .*m\.lock\)"):
            OutputLock(out).acquire()
        code, _, err = run(capsys, "train", "--epochs", "1", "--limit", "64", "--source", "sample", "--out", str(out),
                           "--device", "cpu", "--no-progress")
        assert code == 1 and len(err) == 1 and "another process" in err[0] and "another --out" in err[0], err
        assert not out.exists()                      # the folder train created for the run is gone again
    finally:
        holder.communicate("\n", timeout=30)
    with OutputLock(out):                            # free again once its holder is done
        pass


def test_a_lock_file_left_by_a_killed_writer_is_simply_taken(tmp_path):
    out = tmp_path / "m"
    (tmp_path / "m.lock").write_text("left by a writer that was killed")
    with OutputLock(out) as lock:
        assert lock.lock.is_locked
    assert not lock.lock.is_locked


def test_multimnist_never_overwrites_weights_it_did_not_write_and_checks_them(mnist_sample, tmp_path):
    config = dataclasses.replace(multimnist.PRESETS["smoke"], pairs_per_epoch=32, n_test_pairs=16)
    (tmp_path / "multimnist_seed0.pt").write_bytes(b"the user's weights")
    with pytest.raises(ValueError, match="multimnist_seed0.pt exists and no run in .* records it"):
        multimnist.multimnist_experiment(config, out=tmp_path, device="cpu", data=mnist_sample, progress=False)
    assert (tmp_path / "multimnist_seed0.pt").read_bytes() == b"the user's weights"
    (tmp_path / "multimnist_seed0.pt").unlink()
    first = multimnist.multimnist_experiment(config, out=tmp_path, device="cpu", data=mnist_sample, progress=False)
    weights = tmp_path / first["runs"][0]["weights"]
    blob = bytearray(weights.read_bytes())
    blob[len(blob) // 2] ^= 1                            # one flipped bit
    weights.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match=r"multimnist_seed0.pt have sha256 .* the file is damaged"):
        multimnist.multimnist_experiment(config, out=tmp_path, device="cpu", data=mnist_sample, progress=False)
    with pytest.raises(ValueError, match="damaged"):
        multimnist.load_model(first, tmp_path)
    again = multimnist.multimnist_experiment(config, out=tmp_path, fresh=True, device="cpu", data=mnist_sample, progress=False)
    assert multimnist.load_model(again, tmp_path) is not None  # --fresh trained and wrote the weights again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["multimnist_seed0.pt", "seed0.json"]


# ---------------------------------------------------------------- arguments and --out, before anything
@pytest.mark.parametrize("argv, allowed", [
    (["multimnist", "--seeds", str(2**64)], "0 to 2,147,483,647"),
    (["ablation", "--epochs", "1" + "0" * 30], "1 to 100,000"),
    (["robustness", "--threads", "1000000000"], "1 to 1,024"),
    (["two-digits", "--pairs", "1000000000000"], "1 to 100,000"),
    (["two-digits", "--batch-size", "99999999999"], "1 to 1,048,576"),
    (["two-digits", "--lr", "1e400"], "more than 0 to 10"),
    (["train", "--seed", "-3"], "0 to 2,147,483,647"),
])
def test_every_number_has_bounds_and_the_message_says_them(capsys, argv, allowed):
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and f"allowed: {allowed}" in err[0], err


@pytest.mark.parametrize("extra, match", [
    (["--out", "{tmp}/no/newdir/"], "the folder {tmp}/no does not exist"),
    (["--out", "{tmp}/file"], "is a file; expected the folder"),
    (["--out", "{tmp}/no/r.json"], "--out names the folder of the experiment's runs (one JSON file per run), "
                                   "e.g. {tmp}/no/r; got the file name {tmp}/no/r.json"),
    (["--out", ""], "--out '': expected the folder"),
    (["--fresh"], "--fresh starts a stored run over, so it needs --out"),
    (["--out", "/proc/r"], "/proc/r is not writable"),
    (["--out", "{tmp}", "--device", "bogus"], "device must be 'auto', 'cpu', 'cuda' or 'mps', got 'bogus'"),
])
def test_bad_out_and_flags_are_one_line_and_create_nothing(tmp_path, capsys, extra, match):
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    match = match.replace("{tmp}", str(tmp_path))
    (tmp_path / "file").write_text("the user's")
    before = snapshot(tmp_path)
    code, _, err = run(capsys, "multimnist", "--preset", "smoke", "--no-progress", *extra)   # as every experiment
    assert code == 1 and len(err) == 1 and match in err[0] and ".tmp" not in err[0], err
    assert snapshot(tmp_path) == before


def test_train_refuses_an_empty_out(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "train", "--out", "", "--device", "cpu")
    assert code == 1 and len(err) == 1 and "--out ''" in err[0] and list(tmp_path.iterdir()) == []


def test_a_missing_idx_folder_creates_nothing(tmp_path, capsys):
    before = snapshot(tmp_path)
    code, _, err = run(capsys, "two-digits", "--preset", "smoke", "--source", "idx", "--root", str(tmp_path / "idx"),
                       "--out", str(tmp_path), "--device", "cpu", "--no-progress")
    assert code == 1 and len(err) == 1 and "idx" in err[0], err
    assert snapshot(tmp_path) == before


def test_a_failed_write_names_the_file_not_its_temporary(tmp_path):
    with pytest.raises(OSError) as err:
        write_atomic(str(tmp_path / "gone" / "r.json"), lambda f: f.write(b"{}"))
    assert f"cannot write {tmp_path / 'gone' / 'r.json'}:" in str(err.value) and ".tmp" not in str(err.value)


# ---------------------------------------------------------------- Ctrl-C at any moment
def _interrupt_in_data_loading(monkeypatch, swallow=False):
    from capsedu.data import mnist
    real = mnist.load_dataset

    def load(*args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs between bytecodes
                pass
        except KeyboardInterrupt:
            if not swallow:
                raise
        return real(*args, **kwargs)
    monkeypatch.setattr(mnist, "load_dataset", load)
    monkeypatch.setattr("capsedu.experiments.shared.runs.load_dataset", load)


@pytest.mark.parametrize("swallow", [False, True])
def test_ctrl_c_during_start_up_exits_130_even_with_sigint_ignored(tmp_path, capsys, monkeypatch, swallow):
    _interrupt_in_data_loading(monkeypatch, swallow)
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a job started with & by a script inherits it
    try:
        code, out, err = run(capsys, "multimnist", "--preset", "smoke", "--out", str(tmp_path), "--no-progress")
    finally:
        signal.signal(signal.SIGINT, old)
    assert code == 130 and out == "" and "interrupted" in err[-1], err
    names = sorted(p.name for p in tmp_path.iterdir())
    if swallow:   # the swallowed Ctrl-C still ends the run, after the first finished run is kept
        assert names == ["multimnist_seed0.pt", "seed0.json"]
        assert read_runs(tmp_path)["runs"][0]["seed"] == 0
    else:
        assert names == []                           # nothing written


def test_ctrl_c_inside_torchs_import_waits_until_torch_is_in(tmp_path, capsys, monkeypatch):
    """A SIGINT that lands while torch's C++ initialises can abort the process (SIGABRT, 1 in 30 tries of
    ablation's start-up): the command line holds it until the import is done, then exits 130."""
    import importlib
    real, done = importlib.import_module, []

    def import_module(name, *args):
        if name == "torch":
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler would run between bytecodes
                pass
            done.append(name)
        return real(name, *args)
    monkeypatch.setattr(importlib, "import_module", import_module)
    code, out, err = run(capsys, "multimnist", "--preset", "smoke", "--out", str(tmp_path), "--no-progress")
    assert code == 130 and done == ["torch"] and out == "" and "interrupted" in err[-1]
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- evaluate on the wrong file
def test_evaluate_on_a_stored_run_or_weights_says_what_the_file_is(tmp_path, capsys):
    stored_json = tmp_path / "r.json"
    write_stored(stored(), stored_json)
    weights = tmp_path / "w.pt"
    torch.save({"conv.weight": torch.zeros(2)}, weights)
    for path, what in ((stored_json, "stored-run JSON"), (weights, "bare model weights")):
        before = path.read_bytes()
        code, _, err = run(capsys, "evaluate", "--checkpoint", str(path), "--device", "cpu")
        assert code == 1 and len(err) == 1 and what in err[0] and "delete" not in err[0], err
        assert path.read_bytes() == before


def test_to_json_keeps_lists_of_numbers_on_one_line_and_parses_back():
    from capsedu.runtime.files import to_json
    data = {"runs": [{"seed": 0, "misses": {"test": [3, 17, 99], "affine": []}, "curve": [0.5, 0.75]}],
            "wrong": [[1, 7], [4, 2]], "empty": {}, "name": "x", "none": None}
    text = to_json(data)
    assert json.loads(text) == data
    assert '"test": [3, 17, 99]' in text and '"curve": [0.5, 0.75]' in text
    assert len(text.splitlines()) < len(json.dumps(data, indent=2).splitlines())
