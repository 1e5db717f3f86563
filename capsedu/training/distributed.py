"""Training across processes: ``torchrun --nproc_per_node N -m capsedu train ...``.

Every process holds the whole training set and the same random generator, so each draws the
same shuffled order and shifts for the global batch and keeps its contiguous share of it.
DistributedDataParallel averages the processes' gradients; weighting process r's mean loss by
N n_r / n makes that average the gradient of the global batch's mean loss, even for a last
batch that does not split evenly. A checkpoint holds nothing that depends on N, so a run may
resume with another number of processes; only rank 0 writes it.
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
    """Whether this process writes files and prints (rank 0, or no process group)."""
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def start_from_env(device: torch.device) -> torch.device:
    """Join torchrun's process group (WORLD_SIZE > 1): gloo on CPU, NCCL on ``cuda:LOCAL_RANK``;
    return this process's device (``device`` unchanged outside torchrun)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or dist.is_initialized():
        return device
    if device.type == "cuda":
        local, gpus = int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count()
        if local >= gpus:
            raise RuntimeError(f"process {local} of {world} has no GPU of its own ({gpus} visible); "
                               f"use --nproc_per_node {gpus} or fewer")
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
        """(images, labels, targets) of this rank's share, and the share n_r / n."""
        n = len(xb)
        lo, hi = self.rank * n // self.world, (self.rank + 1) * n // self.world
        return xb[lo:hi], yb[lo:hi], tb[lo:hi], (hi - lo) / n

    def reduce(self, records: torch.Tensor) -> torch.Tensor:
        """Share-weighted losses and correct counts summed over the ranks: the global batch's."""
        dist.all_reduce(records)
        return records


def data_parallel(run) -> Tuple[object, Optional[Shard]]:
    """``(net, shard)`` for ``run``: DistributedDataParallel and this rank's ``Shard`` inside a
    process group of several processes; else ``(run.net, None)``."""
    world = world_size()
    if world == 1:
        return run.net, None
    batch, n = run.history.meta["batch_size"], len(run.x_train)
    if batch % world:
        raise ValueError(f"--batch-size {batch} does not split over {world} processes; the global batch "
                         f"stays {batch} images, so choose a multiple of {world}")
    if 0 < n % batch < world:
        raise ValueError(f"the last batch of an epoch has {n % batch} image(s), fewer than the {world} "
                         f"processes; use a training set size (--limit) that leaves at least {world}")
    ddp = torch.nn.parallel.DistributedDataParallel(
        run.model, device_ids=[run.device.index] if run.device.type == "cuda" else None)
    run.history.meta["processes"] = world  # informative only: resuming with another N is the same run
    return (torch.compile(ddp) if run.history.meta["compile"] else ddp), Shard(dist.get_rank(), world)
