"""Faults as a user meets them (issue 53): each test failed on 72edb23 and passes now.

Tiny runs: MultiMNIST's smoke preset (a second a run), stored runs written by hand.
"""
import shutil
import signal
from pathlib import Path

import pytest
import torch
from cli_helpers import child, run

from capsedu.experiments import multimnist
from capsedu.experiments.shared.runs import RunFolder
from capsedu.runtime import results
from capsedu.runtime.stored import StoredRunError, read_stored, write_stored

SMOKE = ["multimnist", "--preset", "smoke", "--no-progress", "--device", "cpu"]
HEADER = {"command": "python -m capsedu x", "date": "2026-01-01T00:00:00+00:00", "settings": {"seeds": [0, 1]}}


def test_fresh_removes_only_the_files_runs_wrote(tmp_path, capsys):
    (tmp_path / "notes.json").write_text('{"mine": 1}')
    (tmp_path / "mine.ckpt.pt").write_bytes(b"the user's checkpoint")
    write_stored({**HEADER, "run": {"seed": 5}}, tmp_path / "seed5.json")          # a run of other settings
    code, _, err = run(capsys, *SMOKE, "--seeds", "0", "--out", str(tmp_path), "--fresh")
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.ckpt.pt", "multimnist_seed0.pt", "notes.json",
                                                         "seed0.json"]


BUSY = """
import sys
from capsedu import cli
import capsedu.experiments.multimnist as m

def training(*args, **kwargs):   # holds the folder until the parent says so
    print("training", file=sys.__stdout__, flush=True)  # the command sends stdout to stderr
    sys.stdin.readline()
    return {"runs": []}
m.multimnist_experiment = training
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_second_run_into_a_folder_being_written_is_refused_before_training(tmp_path, capsys):
    out = tmp_path / "m"
    first = child(BUSY, *SMOKE, "--seeds", "0", "--out", out)
    try:
        assert first.stdout.readline().strip() == "training", first.stderr.read()
        code, _, err = run(capsys, *SMOKE, "--seeds", "1", "--epochs", "2", "--out", str(out))
        assert code == 1 and len(err) == 1 and "being written by another process" in err[0], err
        assert list(out.iterdir()) == []
    finally:
        first.communicate("\n", timeout=60)
    assert first.returncode == 0


SLOW_WRITE = """
import sys
from capsedu.runtime.files import write_atomic

def write(f):
    f.write(b"first " * 1000)
    print("half", flush=True)
    sys.stdin.readline()         # the parent writes the same file meanwhile
    f.write(b"end")
write_atomic(sys.argv[1], write)
"""


def test_two_processes_writing_one_file_each_write_a_whole_file(tmp_path):
    from capsedu.runtime.files import write_atomic
    path = tmp_path / "seed0.json"
    other = child(SLOW_WRITE, path)
    assert other.stdout.readline().strip() == "half", other.stderr.read()
    write_atomic(str(path), lambda f: f.write(b"second"))
    assert path.read_bytes() == b"second"
    _, err = other.communicate("\n", timeout=60)
    assert other.returncode == 0, err
    assert path.read_bytes() == b"first " * 1000 + b"end" and list(tmp_path.iterdir()) == [path]


@pytest.fixture
def stored_x(tmp_path, monkeypatch):
    """results/x, a folder of two sealed runs, as a chapter reads it."""
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    (tmp_path / "x").mkdir()
    for seed in (0, 1):
        write_stored({**HEADER, "run": {"model": "cnn", "seed": seed, "acc": 0.5}}, tmp_path / "x" / f"cnn-seed{seed}.json")
    assert len(results.stored_run("x")["runs"]) == 2
    return tmp_path / "x"


def refused_naming(folder: Path, name: str):
    """The chapters' reader falls back in one line naming ``name``, and resuming refuses in one line naming it."""
    data, note = results.stored_or_preview("x")
    assert data is None and len(note.splitlines()) == 1 and name in note and "live preview" in note, note
    with pytest.raises(StoredRunError) as err:
        RunFolder(folder, {**HEADER})
    assert name in str(err.value) and len(str(err.value).splitlines()) == 1


@pytest.mark.parametrize("copy", ["cnn-seed0 (1).json",    # copied beside itself: named, not counted twice
                                  "cnn-seed1.json"])       # holding another run's record
def test_a_copied_run_file_is_named(stored_x, copy):
    shutil.copy(stored_x / "cnn-seed0.json", stored_x / copy)
    refused_naming(stored_x, copy)


def test_a_stored_run_missing_a_field_is_one_line_naming_file_and_field(tmp_path, capsys, monkeypatch):
    """Resuming refuses before training; the chapters' reader falls back to the live preview."""
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    out = tmp_path / "multimnist"
    assert run(capsys, *SMOKE, "--seeds", "0", "1", "--out", str(out))[0] == 0
    assert results.stored_or_preview("multimnist")[1] is None
    data = read_stored(out / "seed1.json")
    del data["run"]["error"]
    write_stored(data, out / "seed1.json")                 # sealed again: only the missing field is wrong
    code, _, err = run(capsys, *SMOKE, "--seeds", "0", "1", "2", "--out", str(out))
    assert code == 1 and len(err) == 1 and "seed1.json" in err[0] and "'error'" in err[0], err
    assert not (out / "seed2.json").exists()
    data, note = results.stored_or_preview("multimnist")
    assert data is None and len(note.splitlines()) == 1 and "live preview" in note, note
    assert str(out / "seed1.json") in note and "'error'" in note, note


def test_a_folder_removed_while_training_still_gets_its_run(tmp_path, capsys, monkeypatch):
    out, real = tmp_path / "m", multimnist.train_epochs

    def train_then_remove(*args, **kwargs):
        done = real(*args, **kwargs)
        shutil.rmtree(out)                                   # a cleaned temporary folder, say
        return done
    monkeypatch.setattr(multimnist, "train_epochs", train_then_remove)
    code, _, err = run(capsys, *SMOKE, "--seeds", "0", "--out", str(out), "--no-progress")
    assert code == 0, err
    assert read_stored(out / "seed0.json")["run"]["seed"] == 0


@pytest.mark.parametrize("how", ["torchrun saw the signal", "every process exited 130"])
def test_ctrl_c_to_a_devices_job_is_interrupted(tmp_path, capsys, monkeypatch, how):
    import torch.distributed.run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    def interrupted(argv):
        if how == "torchrun saw the signal":
            raise SignalException("Process 7 got signal: 2", signal.SIGINT)
        failures = {rank: ProcessFailure(rank, 100 + rank, 130, str(tmp_path / "none")) for rank in (0, 1)}
        raise ChildFailedError("capsedu", failures)
    monkeypatch.setattr(torchrun, "main", interrupted)
    code, out, err = run(capsys, *SMOKE, "--devices", "cpu,cpu", "--out", str(tmp_path))
    assert code == 130 and out == "" and "interrupted" in err[-1] and "failed" not in err[-1], err


def test_a_kill_between_multimnist_weights_and_its_run_file_resumes_without_fresh(tmp_path, capsys):
    assert run(capsys, *SMOKE, "--seeds", "0", "--out", str(tmp_path))[0] == 0
    (tmp_path / "seed0.json").unlink()                       # the kill came after the weights, before this
    code, _, err = run(capsys, *SMOKE, "--seeds", "0", "--out", str(tmp_path))
    assert code == 0, err
    record = read_stored(tmp_path / "seed0.json")["run"]
    assert multimnist.load_model({"runs": [record], "settings": read_stored(tmp_path / "seed0.json")["settings"]},
                                 tmp_path) is not None       # its weights, written again, pass their sha256
    state = torch.load(tmp_path / "multimnist_seed0.pt", weights_only=True)
    assert all(v.dtype == torch.float16 for v in state.values())


def test_ctrl_c_after_torchrun_returned_reaches_the_command(tmp_path, capsys, monkeypatch):
    """torchrun's agent leaves its own SIGINT handler installed; the launcher puts the command's back."""
    import torch.distributed.run as torchrun
    seen = []

    def agent(argv):
        seen.append(signal.getsignal(signal.SIGINT))
        signal.signal(signal.SIGINT, lambda *a: None)
    monkeypatch.setattr(torchrun, "main", agent)
    monkeypatch.setattr(multimnist, "multimnist_experiment",
                        lambda *a, **k: seen.append(signal.getsignal(signal.SIGINT)) or {"runs": []})
    code, _, err = run(capsys, *SMOKE, "--devices", "cpu,cpu", "--out", str(tmp_path))
    assert code == 0 and len(seen) == 2 and seen[1] is seen[0], err
