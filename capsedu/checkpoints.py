"""Floor 5: the checkpoints that ``train.fit`` writes and resumes from.

A checkpoint is one ``torch.save`` file (read back with ``weights_only=True``): the model,
optimizer, scheduler and scaler states, the random generators, the history so far, and
the run's settings, so that resuming can refuse a checkpoint from a different run.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import asdict, is_dataclass
from typing import Dict

import torch

__all__ = ["CHECKPOINT_FORMAT", "RESUME_KEYS", "CheckpointError", "load_checkpoint"]

CHECKPOINT_FORMAT = 1
# Settings a resumed run must share with the run that wrote the checkpoint.
RESUME_KEYS = ("batch_size", "lr", "lr_decay", "decay_steps", "seed", "shift", "loss", "margin_lam",
               "recon_weight", "n_train", "dataset", "model", "model_config")


class CheckpointError(RuntimeError):
    """A checkpoint file is unreadable, corrupt, or belongs to a different run."""


def _plain(value):
    """Tuples -> lists, dataclasses -> dicts: what torch.load(weights_only=True) and json both read."""
    if is_dataclass(value):
        value = asdict(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def _save_atomic(obj, path: str) -> None:
    """torch.save to path + ".tmp" in the same folder, fsync, then rename: a crash leaves the old file."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: str) -> Dict:
    """Read a checkpoint written by ``fit`` (weights_only, onto the CPU); one clear error if it cannot."""
    hint = f"delete {path} (or choose another path) to start fresh"
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path} not found") from None
    except Exception as err:  # truncated zip, pickle, foreign object: all mean "unreadable"
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()] or [type(err).__name__]
        reason = next((ln for ln in lines if "Unpickler error" in ln), lines[0])[:160]
        raise CheckpointError(f"checkpoint {path} is unreadable or corrupt ({reason}); {hint}") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not a capsedu checkpoint (format {CHECKPOINT_FORMAT}); {hint}")
    return ckpt


def _restore(ckpt, path, model, optimizer, scheduler, scaler, generator, meta) -> None:
    """Put a checkpoint's state back into this run's objects, after checking it is the same run."""
    hint = f"delete {path} or use another checkpoint path to start fresh"
    old = ckpt["meta"]
    diff = [f"{k}: {old.get(k)!r} -> {meta.get(k)!r}" for k in RESUME_KEYS if old.get(k) != meta.get(k)]
    if diff:
        raise CheckpointError(f"checkpoint {path} comes from a different run ({'; '.join(diff)}); {hint}")
    try:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        if scaler is not None and ckpt.get("scaler"):
            scaler.load_state_dict(ckpt["scaler"])
    except (RuntimeError, KeyError, ValueError) as err:
        raise CheckpointError(f"checkpoint {path} does not fit this model ({str(err)[:160]}); {hint}") from None
    torch.set_rng_state(ckpt["rng_cpu"])
    if torch.cuda.is_available() and ckpt.get("rng_cuda") is not None:
        torch.cuda.set_rng_state(ckpt["rng_cuda"])
    if ckpt["generator_device"] == generator.device.type:
        generator.set_state(ckpt["generator"])
    else:  # a CPU generator's state cannot seed a CUDA one: carry on, reproducible but not bit-exact
        warnings.warn(f"checkpoint {path} was written on {ckpt['generator_device']}; resuming on "
                      f"{generator.device.type} reseeds the shuffling, so the run is not bit-exact")
        generator.manual_seed(meta["seed"] + ckpt["epoch"])
