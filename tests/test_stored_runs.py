"""Stored runs you can trust: one format (version, schema, checksum), one writer at a time, nothing of the
user's deleted or overwritten, every argument checked before anything is created, Ctrl-C at any moment
exits 130, damaged files are one line naming them, and the chapters' reader never stops on one.

One test (or a parametrized group) per class of the probe's findings; tiny configs, mostly in-process.
"""
import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_helpers import run, snapshot

import capsedu
from capsedu import cli
from capsedu.experiments import multimnist
from capsedu.experiments.shared.runs import ResultFile, resumable
from capsedu.runtime import results
from capsedu.runtime.files import write_atomic
from capsedu.runtime.lock import LockError, OutputLock, OwnedFolder
from capsedu.runtime.stored import (
    FORMAT,
    StoredRunError,
    checksum,
    read_stored,
    seal,
    write_stored,
)

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"seeds": [0, 1], "epochs": 1}
HEADER = {"command": "python -m capsedu x", "date": "2026-01-01T00:00:00+00:00", "settings": SETTINGS}


def stored(runs=None, **extra):
    return {**HEADER, "runs": [{"model": "cnn", "seed": 0, "acc": 0.5}] if runs is None else runs, **extra}




@pytest.fixture(scope="module")
def digits():
    from capsedu.data.mnist import load_dataset
    return load_dataset("mnist", source="sample", verbose=False)


# ---------------------------------------------------------------- the format
def test_the_checksum_is_the_sha256_of_the_sorted_content_without_it(tmp_path):
    path = tmp_path / "r.json"
    sealed = write_stored(stored(), path)
    assert sealed["format"] == FORMAT == 1
    body = json.dumps({k: v for k, v in sealed.items() if k != "checksum"}, sort_keys=True).encode()
    assert sealed["checksum"] == "sha256:" + hashlib.sha256(body).hexdigest() == checksum(sealed)
    assert read_stored(path, require_checksum=True) == sealed
    assert seal(sealed) == sealed  # sealing twice changes nothing


def _damage(path: Path, how: str):
    good = seal(stored())
    text = json.dumps(good, indent=2)
    if how == "truncated":
        path.write_text(text[: len(text) // 2])
    elif how == "a digit changed":
        path.write_text(text.replace('"acc": 0.5', '"acc": 0.6'))
    elif how == "not utf-8":
        path.write_bytes(b"\xff\xfe" + text.encode())
    elif how == "a folder":
        path.mkdir()
    elif how == "a list":
        path.write_text("[]")
    else:  # resealed, so only the schema can catch it
        bad = {"runs missing": {**HEADER}, "runs not a list": stored(runs={"a": 1}),
               "seed a string": stored(runs=[{"model": "cnn", "seed": "0"}]),
               "seed negative": stored(runs=[{"model": "cnn", "seed": -1}]),
               "name not a string": stored(runs=[{"model": 3, "seed": 0}]),
               "duplicate": stored(runs=[{"model": "cnn", "seed": 0}, {"model": "cnn", "seed": 0}]),
               "settings missing": {"runs": []}, "date a number": stored(date=5),
               "newer format": {**stored(), "format": 99}}[how]
        path.write_text(json.dumps(bad if how == "newer format" else seal(bad)))


DAMAGES = ["truncated", "a digit changed", "not utf-8", "a folder", "a list", "runs missing", "runs not a list",
           "seed a string", "seed negative", "name not a string", "duplicate", "settings missing", "date a number",
           "newer format"]


@pytest.mark.parametrize("how", [d for d in DAMAGES if d != "a digit changed"])
def test_a_damaged_file_is_one_line_naming_it_on_resume(tmp_path, how):
    path = tmp_path / "r.json"
    _damage(path, how)
    with pytest.raises(StoredRunError) as err:
        resumable(path, SETTINGS)
    line = str(err.value)
    assert len(line.splitlines()) == 1 and str(path) in line and "pass --fresh" in line, line
    assert not isinstance(err.value.__cause__, (KeyError, AttributeError))


def test_an_edited_file_resumes_but_stays_marked_so_no_reader_shows_it_as_measured(tmp_path, capsys):
    path = tmp_path / "r.json"
    _damage(path, "a digit changed")
    result = ResultFile(path, {**HEADER})
    assert result.find(model="cnn", seed=0)["acc"] == 0.6 and "changed after it was written" in capsys.readouterr().err
    result.add({"model": "cnn", "seed": 1}, 1.0)
    result.finish()
    with pytest.raises(StoredRunError, match="was edited after it was written"):
        read_stored(path, require_checksum=True)          # resealed, but the mark is sealed in with it
    ResultFile(path, {**HEADER}, fresh=True).finish()     # --fresh starts over: no mark
    assert "edited" not in read_stored(path, require_checksum=True)


def test_a_legacy_file_without_checksum_resumes_and_is_sealed_by_the_next_save(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(stored()))
    assert resumable(path, SETTINGS)["runs"][0]["seed"] == 0
    with pytest.raises(StoredRunError, match="has no checksum"):
        read_stored(path, require_checksum=True)
    result = ResultFile(path, {**HEADER})
    result.add({"model": "cnn", "seed": 1}, 1.0)
    result.finish()
    assert read_stored(path, require_checksum=True)["format"] == 1


def test_the_cli_names_a_damaged_file_and_runs_nothing(tmp_path, capsys):
    out = tmp_path / "m.json"
    _damage(out, "seed a string")
    before = snapshot(tmp_path)
    code, _, err = run(capsys, "multimnist", "--preset", "smoke", "--out", str(out), "--no-progress")
    assert code == 1 and len(err) == 1 and str(out) in err[0] and "seed is '0'" in err[0], err
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------- the readers
@pytest.fixture
def results_here(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    monkeypatch.setattr(capsedu, "REPO_URL", "file:///nowhere")  # no network fetch for an absent file
    return tmp_path


@pytest.mark.parametrize("how", DAMAGES)
def test_stored_run_raises_one_line_and_the_chapter_helper_falls_back(results_here, how):
    _damage(results_here / "x.json", how)
    with pytest.raises(StoredRunError) as err:
        results.stored_run("x.json")
    assert len(str(err.value).splitlines()) == 1 and "x.json" in str(err.value)
    data, note = results.stored_or_preview("x.json")
    assert data is None and len(note.splitlines()) == 1 and "x.json" in note and "live preview" in note


def test_stored_run_none_only_when_absent_and_the_helper_checks_what_the_chapter_reads(results_here):
    assert results.stored_run("absent.json") is None
    assert "is not there" in results.stored_or_preview("absent.json")[1]
    (results_here / "legacy.json").write_text(json.dumps(stored()))
    assert "no checksum" in results.stored_or_preview("legacy.json")[1]
    write_stored(stored(runs=[]), results_here / "empty.json")
    assert "holds no runs" in results.stored_or_preview("empty.json")[1]
    write_stored(stored(), results_here / "ok.json")
    data, note = results.stored_or_preview("ok.json", check=lambda d: d["summary"]["table"][0])
    assert data is None and "lacks what this chapter reads" in note and "KeyError" in note
    data, note = results.stored_or_preview("ok.json", check=lambda d: d["runs"][0]["acc"] + 1)
    assert note is None and data["runs"][0]["acc"] == 0.5


def test_every_stored_result_of_the_repository_is_sealed_and_intact():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from migrate_results import BUSY
    finally:
        sys.path.pop(0)
    files = [p for p in [*ROOT.glob("results/*.json"), *ROOT.glob("results/two_digits_variants/*.json")]
             if p.name not in BUSY and not p.with_name(p.name + ".lock").exists()]
    assert len(files) >= 5
    for path in files:
        data = read_stored(path, require_checksum=True)
        assert data["format"] == 1 and data["runs"], path


# ---------------------------------------------------------------- one writer at a time
HOLD = """
import sys, time
from capsedu.runtime.lock import OutputLock
lock = OutputLock(sys.argv[1]).acquire()
print("held", flush=True)
sys.stdin.readline()
lock.release()
"""


def test_a_second_writer_is_refused_at_once_naming_the_holder(tmp_path, capsys):
    out = tmp_path / "m.json"
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=ROOT)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(LockError, match=rf"is being written by pid {child.pid} on "):
            OutputLock(out).acquire()
        code, _, err = run(capsys, "multimnist", "--preset", "smoke", "--out", str(out), "--no-progress")
        assert code == 1 and len(err) == 1 and f"pid {child.pid}" in err[0] and "another --out" in err[0], err
        assert not out.exists()
    finally:
        child.communicate("\n", timeout=30)
    assert not (tmp_path / "m.json.lock").exists()  # released on exit
    with OutputLock(out):                            # and free again
        pass


def test_a_stale_lock_is_taken_over_with_a_note(tmp_path, capsys):
    out = tmp_path / "m.json"
    (tmp_path / "m.json.lock").write_text(json.dumps({"pid": 999999, "host": "h", "started": "then"}))
    with OutputLock(out) as lock:
        with OutputLock(out):  # re-entrant in one process (the CLI and the experiment both take it)
            pass
        assert lock.fd is not None
    assert "took over the lock" in capsys.readouterr().err and not (tmp_path / "m.json.lock").exists()


# ---------------------------------------------------------------- only what the run wrote is deleted
def test_the_checkpoint_folder_keeps_the_users_files(tmp_path):
    out = tmp_path / "r.json"
    folder = tmp_path / "r.ckpt"
    folder.mkdir()
    (folder / "mine.txt").write_text("the user's")
    result = ResultFile(out, {**HEADER}, fresh=True)  # fresh clears only the manifest's files: none yet
    ckpt = Path(result.checkpoint("cnn-seed0"))
    ckpt.write_bytes(b"a checkpoint")
    Path(str(ckpt) + ".tmp").write_bytes(b"half")
    result.add({"model": "cnn", "seed": 0}, 1.0)
    result.finish()
    assert sorted(p.name for p in folder.iterdir()) == ["mine.txt"]
    assert (folder / "mine.txt").read_text() == "the user's"
    (folder / "cnn-seed1.pt").write_text("not the run's")  # a fresh run never takes a file it did not write
    again = ResultFile(out, {**HEADER}, fresh=True)
    with pytest.raises(ValueError, match="was not written by this run"):
        again.checkpoint("cnn-seed1")
    again.release()
    assert (folder / "cnn-seed1.pt").read_text() == "not the run's"
    assert OwnedFolder(tmp_path / "nothing.ckpt").clear() == []  # no manifest: not the run's folder


def test_stale_temp_files_go_on_resume(tmp_path):
    out = tmp_path / "r.json"
    write_stored(stored(), out)
    Path(str(out) + ".tmp").write_bytes(b"left by a kill")
    result = ResultFile(out, {**HEADER})
    assert not Path(str(out) + ".tmp").exists() and result.find(model="cnn", seed=0)
    result.release()


def test_multimnist_never_overwrites_weights_it_did_not_write_and_checks_them(digits, tmp_path):
    config = dataclasses.replace(multimnist.PRESETS["smoke"], pairs_per_epoch=32, n_test_pairs=16)
    out = tmp_path / "m.json"
    (tmp_path / "m_seed0.pt").write_bytes(b"the user's weights")
    with pytest.raises(ValueError, match="m_seed0.pt exists and is not recorded in"):
        multimnist.multimnist_experiment(config, out=out, device="cpu", data=digits, progress=False)
    assert (tmp_path / "m_seed0.pt").read_bytes() == b"the user's weights" and not out.exists()
    (tmp_path / "m_seed0.pt").unlink()
    first = multimnist.multimnist_experiment(config, out=out, device="cpu", data=digits, progress=False)
    weights = tmp_path / first["runs"][0]["weights"]
    blob = bytearray(weights.read_bytes())
    blob[len(blob) // 2] ^= 1                            # one flipped bit
    weights.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match=r"m_seed0.pt have sha256 .* the file is damaged"):
        multimnist.multimnist_experiment(config, out=out, device="cpu", data=digits, progress=False)
    with pytest.raises(ValueError, match="damaged"):
        multimnist.load_model(first, tmp_path)
    (tmp_path / "m_seed0.pt.tmp").write_bytes(b"left by a kill")
    again = multimnist.multimnist_experiment(config, out=out, fresh=True, device="cpu", data=digits, progress=False)
    assert multimnist.load_model(again, tmp_path) is not None  # --fresh replaced the weights its JSON recorded
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m_seed0.pt"]


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
    (["--out", "{tmp}/newdir/"], "newdir does not exist; create it first (mkdir -p"),
    (["--out", ""], "--out '': expected a file path"),
    (["--fresh"], "--fresh starts a stored run over, so it needs --out"),
    (["--out", "/proc/r.json"], "/proc/r.json is not writable"),
    (["--out", "{tmp}", "--device", "bogus"], "device must be 'auto', 'cpu', 'cuda' or 'mps', got 'bogus'"),
])
@pytest.mark.parametrize("command", ["multimnist", "two-digits"])
def test_bad_out_and_flags_are_one_line_and_create_nothing(tmp_path, capsys, command, extra, match):
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    before = snapshot(tmp_path)
    code, _, err = run(capsys, command, "--preset", "smoke", "--no-progress", *extra)
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
        assert names == ["multimnist.json", "multimnist_seed0.pt"]
        assert read_stored(tmp_path / "multimnist.json", require_checksum=True)["runs"][0]["seed"] == 0
    else:
        assert names == []                           # nothing written, no lock left


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
    import json

    from capsedu.runtime.files import to_json
    data = {"runs": [{"seed": 0, "misses": {"test": [3, 17, 99], "affine": []}, "curve": [0.5, 0.75]}],
            "wrong": [[1, 7], [4, 2]], "empty": {}, "name": "x", "none": None}
    text = to_json(data)
    assert json.loads(text) == data
    assert '"test": [3, 17, 99]' in text and '"curve": [0.5, 0.75]' in text
    assert len(text.splitlines()) < len(json.dumps(data, indent=2).splitlines())
