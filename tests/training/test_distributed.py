"""torchrun: two processes (gloo, CPU) train the same run as one process at the same global batch.

This file is also the worker that torchrun starts: ``torchrun --nproc_per_node 2
tests/training/test_distributed.py FOLDER`` trains a tiny CapsNet on the first 45 sample digits (batch
16: the last batch of 13 splits 6 + 7, so the share weighting is exercised) for one epoch,
keeps that checkpoint aside, resumes for a second epoch, and rank 0 writes the final weights.

Tolerance: the two ranks' averaged gradients equal the global batch's up to float32 rounding
(~1e-7 relative), but Adam's division by sqrt(v) amplifies it where a gradient is near rounding
level (largest single difference 1.4e-4 of the largest movement), so the L2 distance over all
weights is the measure: |w_2proc - w_1proc| <= 1e-4 |w_1proc - w_init| (measured 1.6e-6); another
data order is 0.5 of it, so the tolerance can fail (checked too).
"""
import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from capsedu.core.capsnet import CapsNet, CapsNetConfig
from capsedu.data.mnist import load_dataset
from capsedu.training.distributed import start_from_env, stop
from capsedu.training.loop import fit

TINY = CapsNetConfig(conv_channels=8, primary_types=4, primary_dim=4, digit_dim=6, decoder_hidden=(16, 32))
N_TRAIN, N_TEST, BATCH = 45, 8, 16
TORCHRUN = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")


def tiny_data():
    data = load_dataset("mnist", source="sample", verbose=False)
    return dataclasses.replace(data, x_train=data.x_train[:N_TRAIN], y_train=data.y_train[:N_TRAIN],
                               x_test=data.x_test[:N_TEST], y_test=data.y_test[:N_TEST])


def train(epochs, checkpoint=None, seed=0):
    torch.manual_seed(0)  # the initial weights; `seed` sets the shuffling and the shifts
    model = CapsNet(TINY)
    fit(model, tiny_data(), epochs=epochs, batch_size=BATCH, lr=1e-2, device="cpu", amp="off", seed=seed,
        checkpoint=checkpoint, progress=False)
    return model.state_dict()


def flat(state):
    return torch.cat([v.flatten().double() for v in state.values()])


def distance(a, b, init):
    """|a - b| relative to how far b moved from init (L2 over all weights)."""
    return ((flat(a) - flat(b)).norm() / (flat(b) - flat(init)).norm()).item()


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    """One torchrun of 2 processes: epoch 1 (its checkpoint kept aside), then epoch 2 resumed from it."""
    folder = tmp_path_factory.mktemp("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([TORCHRUN, "--nproc_per_node", "2", "--standalone", __file__, str(folder)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return {"final": torch.load(folder / "weights.pt"), "epoch1": folder / "epoch1.pt"}


@pytest.fixture(scope="module")
def single():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    init = CapsNet(TINY).state_dict()
    return {"init": init, "one": train(2), "other_order": train(2, seed=1)}


def test_two_processes_match_one_at_the_same_global_batch(two_processes, single):
    both, one, init = two_processes["final"], single["one"], single["init"]
    assert (flat(one) - flat(init)).norm() > 1e-2                      # the run trained
    assert distance(both, one, init) <= 1e-4                           # the same run, to float error
    assert distance(single["other_order"], one, init) > 1e-2           # another data order is not


def test_a_two_process_checkpoint_resumes_in_one_process(tmp_path, two_processes, single):
    ckpt = tmp_path / "checkpoint.pt"
    shutil.copy(two_processes["epoch1"], ckpt)
    assert torch.load(ckpt, weights_only=False)["meta"]["processes"] == 2
    resumed = train(2, checkpoint=str(ckpt))                           # epoch 2 in this one process
    assert distance(resumed, single["one"], single["init"]) <= 1e-4


if __name__ == "__main__":  # the worker torchrun starts: python tests/training/test_distributed.py FOLDER
    torch.set_num_threads(1)
    start_from_env(torch.device("cpu"))
    folder = Path(sys.argv[1])
    train(1, checkpoint=str(folder / "checkpoint.pt"))
    torch.distributed.barrier()  # rank 0 has written epoch 1's checkpoint
    if torch.distributed.get_rank() == 0:
        shutil.copy(folder / "checkpoint.pt", folder / "epoch1.pt")
    torch.distributed.barrier()
    state = train(2, checkpoint=str(folder / "checkpoint.pt"))  # resumes at epoch 2, in 2 processes
    if torch.distributed.get_rank() == 0:
        torch.save(state, folder / "weights.pt")
    stop()
