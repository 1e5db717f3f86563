"""Real signals at the worst moment: Ctrl-C (SIGINT) and SIGKILL while a checkpoint is being written.

A child process runs ``python -m capsedu train`` (a tiny CapsNet, 32 digits) with ``torch.save``
paused in the middle of the file until the parent has sent its signal, so the signal lands inside
the zip writer whatever the load of the machine. Ctrl-C must let
the write finish and exit 130 with a complete checkpoint; SIGKILL leaves the old checkpoint and a
``.tmp`` that the next start removes. No ``.tmp`` survives either way.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_helpers import tiny_cli_capsnet

import capsedu.runtime.files as files
from capsedu import cli
from capsedu.runtime.checkpoints import load_checkpoint, save_atomic

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import os, signal, sys, time, torch
# Python's Ctrl-C handler, as in a terminal: a job started with & by a non-interactive shell (CI
# scripts) inherits SIGINT ignored, and Python then installs no handler of its own.
signal.signal(signal.SIGINT, signal.default_int_handler)
import capsedu.core.capsnet as models
real, real_save = models.CapsNet, torch.save
models.CapsNet = lambda config=None, **kw: real(config) if config is not None else real(
    conv_channels=8, primary_types=4, primary_dim=4, digit_dim=8, decoder_hidden=(32,), **kw)
SLOW_EPOCH, MARK = int(sys.argv[1]), sys.argv[2]

class Slow:  # the file torch.save writes to: pauses mid-file in the checkpoint of epoch SLOW_EPOCH
    def __init__(self, f):
        self.f, self.calls = f, 0
    def write(self, b):
        self.calls += 1
        if self.calls == 3:
            open(MARK, "w").close()
            deadline = time.time() + 60  # wait for the parent's signal, however loaded the machine is
            while not os.path.exists(MARK + ".sent") and time.time() < deadline:
                time.sleep(0.01)
        return self.f.write(b)
    def __getattr__(self, name):
        return getattr(self.f, name)

def save(obj, f, **kw):
    slow = isinstance(obj, dict) and obj.get("epoch") == SLOW_EPOCH
    return real_save(obj, Slow(f) if slow else f, **kw)
torch.save = save
from capsedu.cli import main
sys.exit(main(sys.argv[3:]))
"""


def train(tmp_path, out, epochs, slow_epoch, sig):
    """Run the child until it is inside the slow write, send ``sig``, return (exit code, stderr, its pid)."""
    mark = tmp_path / f"writing-{slow_epoch}-{sig}"
    argv = [sys.executable, "-c", CHILD, str(slow_epoch), str(mark), "train", "--source", "sample", "--limit", "32",
            "--epochs", str(epochs), "--batch-size", "16", "--device", "cpu", "--no-progress", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 120
    while not mark.exists() and child.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert mark.exists(), child.communicate()
    child.send_signal(sig)
    Path(f"{mark}.sent").touch()  # the child, paused inside the write until now, carries on (or is dead)
    _, err = child.communicate(timeout=60)
    return child.returncode, err, child.pid


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
def test_ctrl_c_and_sigkill_during_a_checkpoint_write(tmp_path, monkeypatch):
    out = tmp_path / "run"
    # Ctrl-C in the middle of epoch 1's checkpoint: the write completes, then exit 130
    code, err, _ = train(tmp_path, out, epochs=3, slow_epoch=1, sig=signal.SIGINT)
    lines = err.strip().splitlines()
    assert code == 130 and lines[-1].startswith("capsedu train: interrupted"), err
    assert "unexpected pos" not in err and "Traceback" not in err
    assert sorted(os.listdir(out)) == ["checkpoint.pt"]                   # complete, no .tmp
    assert load_checkpoint(str(out / "checkpoint.pt"))["epoch"] == 1
    # SIGKILL in the middle of epoch 2's checkpoint: epoch 1's stays; the half-written .tmp stays too
    code, _, _ = train(tmp_path, out, epochs=3, slow_epoch=2, sig=signal.SIGKILL)
    assert code == -signal.SIGKILL
    left = sorted(os.listdir(out))
    assert left[0] == "checkpoint.pt" and len(left) == 2 and left[1].startswith("checkpoint.pt.") and left[1].endswith(".tmp")
    assert load_checkpoint(str(out / "checkpoint.pt"))["epoch"] == 1
    # the next start (here in this process) removes the stale .tmp and resumes from epoch 1 to the end
    tiny_cli_capsnet(monkeypatch)                                         # the child's model
    assert cli.main(["train", "--source", "sample", "--limit", "32", "--epochs", "2", "--batch-size", "16",
                     "--device", "cpu", "--no-progress", "--out", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["checkpoint.pt", "metrics.json"]
    assert load_checkpoint(str(out / "checkpoint.pt"))["epoch"] == 2


def test_ctrl_c_inside_save_atomic_is_delivered_after_the_file_is_complete(tmp_path, monkeypatch):
    """In this process: a real SIGINT arrives while torch.save runs."""
    # Python's own handler (a library imported by an earlier test may have installed another one)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    real = torch.save

    def interrupted_save(obj, f):
        os.kill(os.getpid(), signal.SIGINT)
        real(obj, f)
    monkeypatch.setattr(torch, "save", interrupted_save)
    path = tmp_path / "state.pt"
    with pytest.raises(KeyboardInterrupt):
        save_atomic({"w": torch.arange(5)}, str(path))
    monkeypatch.undo()
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.arange(5))
    assert os.listdir(tmp_path) == ["state.pt"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is put back
    signal.signal(signal.SIGINT, previous)


def test_an_error_during_a_write_leaves_no_tmp_and_the_old_file(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text("old")

    def fail(f):
        f.write(b"half")
        raise OSError("disk full")
    with pytest.raises(OSError, match="disk full"):
        files.write_atomic(str(path), fail)
    assert os.listdir(tmp_path) == ["metrics.json"] and path.read_text() == "old"
    (tmp_path / "metrics.json.k3x9.tmp").write_text("left by a killed process")
    (tmp_path / "metrics.json.bak").write_text("the user's")
    assert files.remove_stale_tmp(str(path))
    assert sorted(os.listdir(tmp_path)) == ["metrics.json", "metrics.json.bak"]
