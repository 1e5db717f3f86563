"""Training across processes: ``torchrun --nproc_per_node N -m capsedu train ...``.

The rule that makes N processes train the same run as one: every process holds the whole
training set and the same random generator, so each draws the same shuffled order and the
same shifts for the whole global batch; process r then keeps its contiguous share of that
batch. Its loss is weighted by its share of the batch (n_r / n), and the gradients are
summed across processes (not averaged, DistributedDataParallel's default), so the summed
gradient is exactly the gradient of the global batch's mean loss, even for a last batch
that does not split evenly. The weights then differ from a single process's only by the
order of the floating-point additions. A checkpoint holds nothing that depends on N, so a
run may resume with another number of processes; only rank 0 writes it.

- ``start_from_env(device)``: joins the process group torchrun describes (gloo on CPU, NCCL
  on CUDA, one GPU per process); a plain ``python`` run stays one process.
- ``data_parallel(run)``: used by ``start_run``; the DDP wrapper and the ``Shard`` of this rank,
  or ``(run.net, None)`` outside a process group.
- ``is_main()``: whether this process writes files and prints (rank 0, or no group).
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

import torch
import torch.distributed as dist

__all__ = ["start_from_env", "data_parallel", "is_main", "world_size", "stop", "Shard"]


def world_size() -> int:
    """The number of processes training together (1 outside torchrun)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main() -> bool:
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def start_from_env(device: torch.device) -> torch.device:
    """Join torchrun's process group (WORLD_SIZE > 1 in the environment); return this process's
    device: ``cuda:LOCAL_RANK`` on CUDA, else ``device`` unchanged."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or dist.is_initialized():
        return device
    if device.type == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if local >= torch.cuda.device_count():
            raise RuntimeError(f"process {local} of {world} has no GPU of its own ({torch.cuda.device_count()} "
                               f"visible); use --nproc_per_node {torch.cuda.device_count()} or fewer")
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    elif device.type != "cpu":
        raise ValueError(f"torchrun training runs on CPU (gloo) or CUDA (NCCL); got --device {device}")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return device


def stop() -> None:
    """Wait for every process (rank 0 writes the last files), then leave the process group."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


class Shard:
    """This rank's contiguous share of each global batch, and the sum of the per-step records."""

    def __init__(self, rank: int, world: int):
        self.rank, self.world = rank, world

    def __call__(self, xb, yb, tb):
        """(images, labels, targets) of this rank's share, and the share n_r / n as the loss weight."""
        n = len(xb)
        lo, hi = self.rank * n // self.world, (self.rank + 1) * n // self.world
        return xb[lo:hi], yb[lo:hi], tb[lo:hi], (hi - lo) / n

    def reduce(self, records: torch.Tensor) -> torch.Tensor:
        """Weighted losses and correct counts summed over the ranks: the global batch's numbers."""
        dist.all_reduce(records)
        return records


def _sum_gradients(state, bucket):
    """A DDP communication hook: the gradients summed (the losses are already weighted by share)."""
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])


def data_parallel(run) -> Tuple[object, Optional[Shard]]:
    """``(net, shard)`` for ``run``: a DistributedDataParallel wrapper summing gradients and this
    rank's ``Shard`` inside a process group of several processes; else ``(run.net, None)``."""
    world = world_size()
    if world == 1:
        return run.net, None
    batch, n = run.history.meta["batch_size"], len(run.x_train)
    if batch % world:
        raise ValueError(f"--batch-size {batch} does not split over {world} processes; the global batch "
                         f"stays {batch} images, so choose a multiple of {world} (per process: batch / {world})")
    if 0 < n % batch < world:
        raise ValueError(f"the last batch of an epoch has {n % batch} image(s), fewer than the {world} processes; "
                         f"use a training set size (--limit) that leaves at least {world}")
    ddp = torch.nn.parallel.DistributedDataParallel(
        run.model, device_ids=[run.device.index] if run.device.type == "cuda" else None)
    ddp.register_comm_hook(None, _sum_gradients)
    net = torch.compile(ddp) if run.history.meta["compile"] else ddp
    run.history.meta["processes"] = world  # informative only: resuming with another N is the same run
    return net, Shard(dist.get_rank(), world)

