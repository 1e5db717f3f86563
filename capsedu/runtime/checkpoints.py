"""The checkpoints that ``capsedu.training.loop.fit`` writes and resumes from.

One ``torch.save`` dict (read back with ``weights_only=True``): model, optimizer, scheduler and
scaler states, the random generators, the history and the run's settings (so that resuming
refuses another run's file). torch.load checks no CRC, so ``load_checkpoint`` tests every zip
record's CRC-32 first: one flipped bit is refused, not loaded. Each problem is one
``CheckpointError`` line naming the file.
"""
from __future__ import annotations

import os
import warnings
import zipfile
from typing import Dict

import torch

from capsedu.runtime.files import write_atomic

__all__ = ["CHECKPOINT_FORMAT", "REQUIRED_KEYS", "CheckpointError", "load_checkpoint", "lay_out_like_parameters",
           "check_integrity", "save_atomic", "restore"]

CHECKPOINT_FORMAT = 1
# What fit writes and resuming reads, with the type each must have.
REQUIRED_KEYS = {"epoch": int, "meta": dict, "history": list, "model": dict, "optimizer": dict,
                 "scheduler": dict, "rng_cpu": torch.Tensor, "generator": torch.Tensor, "generator_device": str}


class CheckpointError(RuntimeError):
    """A checkpoint file is unreadable, corrupt, or belongs to a different run."""


def save_atomic(obj, path: str) -> None:
    """``torch.save(obj)`` to ``path`` through ``write_atomic``."""
    write_atomic(path, lambda f: torch.save(obj, f))


# ---------------------------------------------------------------- reading
def _fresh_start_hint(path: str) -> str:
    return f"delete the file {path} (or choose another checkpoint path) to start fresh"


def check_integrity(path: str, what: str = "checkpoint") -> None:
    """Every record of the torch zip file at ``path`` matches its stored CRC-32; else one clear error."""
    # torch.load checks no CRC: 60 of 60 single-bit flips in a small CapsNet's file loaded without error
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, EOFError, ValueError, NotImplementedError) as err:
        raise CheckpointError(f"{what} {path} is corrupt or not a torch file ({str(err)[:120]})") from None
    if bad is not None:
        raise CheckpointError(f"{what} {path} is damaged: its record {bad!r} fails the CRC-32 check")


def _what_it_is(path: str) -> str:
    """What a file that is not a checkpoint holds, in words (for ``evaluate``), or ''."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except OSError:
        return ""
    if head.lstrip()[:1] in (b"{", b"["):
        import json
        try:
            data = json.loads(head)
        except ValueError:
            return "it looks like a JSON file (not a checkpoint)"
        if isinstance(data, dict) and "run" in data:
            return "it is a stored-run JSON (an experiment's results), not a checkpoint"
        return "it is a JSON file, not a checkpoint"
    return ""


def load_checkpoint(path: str, resuming: bool = True) -> Dict:
    """Read a checkpoint written by ``fit`` (weights_only, onto the CPU); one clear error if it cannot.

    ``resuming`` (fit's use): the error says how to start fresh; else (``evaluate``) it says what the
    file is instead, and advises nothing about deleting it."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise CheckpointError(f"checkpoint {path} is a folder; expected a checkpoint file "
                              f"(e.g. {os.path.join(path, 'checkpoint.pt')})")
    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint {path} not found")
    hint = _fresh_start_hint(path) if resuming else "expected a checkpoint.pt written by python -m capsedu train"
    if not resuming and _what_it_is(path):
        raise CheckpointError(f"{path}: {_what_it_is(path)}; {hint}")
    try:
        check_integrity(path)
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except CheckpointError as err:
        raise CheckpointError(f"{err}; {hint}") from None
    except Exception as err:  # pickle, foreign object, unreadable file: all mean "unreadable"
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()] or [type(err).__name__]
        reason = next((ln for ln in lines if "Unpickler error" in ln), lines[0])[:160]
        raise CheckpointError(f"checkpoint {path} is unreadable or corrupt ({reason}); {hint}") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        weights = isinstance(ckpt, dict) and ckpt and all(isinstance(v, torch.Tensor) for v in ckpt.values())
        what = " (it holds bare model weights, a state dict, such as a stored run's weights file)" if weights else ""
        raise CheckpointError(f"{path} is not a capsedu checkpoint (format {CHECKPOINT_FORMAT}){what}; {hint}")
    missing = [k for k in REQUIRED_KEYS if k not in ckpt]
    wrong = [f"{k} is a {type(ckpt[k]).__name__}, expected {t.__name__}" for k, t in REQUIRED_KEYS.items()
             if k in ckpt and (not isinstance(ckpt[k], t) or isinstance(ckpt[k], bool))]
    if missing or wrong:
        problem = f"lacks {', '.join(missing)}" if missing else "; ".join(wrong)
        raise CheckpointError(f"checkpoint {path} is incomplete: it {problem}" if missing
                              else f"checkpoint {path} is malformed: {problem}")
    if ckpt["epoch"] < 1 or not all(isinstance(v, torch.Tensor) for v in ckpt["model"].values()):
        raise CheckpointError(f"checkpoint {path} is malformed: expected epoch >= 1 and a model state of tensors")
    return ckpt


def lay_out_like_parameters(optimizer) -> None:
    """Give each optimizer state tensor its parameter's strides. A checkpoint written by the fast
    path (W in its own layout) may resume on the readable model, or the reverse, and torch's fused
    Adam reads state laid out unlike its parameter wrongly (2e-2 off after one step at lr 1e-2)."""
    for p, state in optimizer.state.items():
        for k, v in state.items():
            if torch.is_tensor(v) and v.shape == p.shape and v.stride() != p.stride():
                state[k] = torch.empty_like(p, dtype=v.dtype).copy_(v)


def restore(ckpt, path, model, optimizer, scheduler, scaler, generator, meta, same_run) -> None:
    """Put a checkpoint's state back into this run's objects, after checking that its ``meta``
    agrees with this run's on every key of ``same_run``."""
    hint = _fresh_start_hint(path)
    old = ckpt["meta"]
    diff = [f"{k}: {old.get(k)!r} -> {meta.get(k)!r}" for k in same_run if old.get(k) != meta.get(k)]
    if diff:
        raise CheckpointError(f"checkpoint {path} comes from a different run ({'; '.join(diff)}); {hint}")
    try:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        lay_out_like_parameters(optimizer)
        scheduler.load_state_dict(ckpt["scheduler"])
        if scaler is not None and ckpt.get("scaler"):
            scaler.load_state_dict(ckpt["scaler"])
        torch.set_rng_state(ckpt["rng_cpu"])
        if torch.cuda.is_available() and ckpt.get("rng_cuda") is not None:
            torch.cuda.set_rng_state(ckpt["rng_cuda"])
        if ckpt["generator_device"] == generator.device.type:
            generator.set_state(ckpt["generator"])
        else:  # a CPU generator's state cannot seed a CUDA one: carry on, reproducible but not bit-exact
            warnings.warn(f"checkpoint {path} was written on {ckpt['generator_device']}; resuming on "
                          f"{generator.device.type} reseeds the shuffling, so the run is not bit-exact")
            generator.manual_seed(meta["seed"] + ckpt["epoch"])
    except (RuntimeError, KeyError, ValueError, TypeError) as err:
        raise CheckpointError(f"checkpoint {path} does not fit this model ({' '.join(str(err).split())[:160]}); "
                              f"{hint}") from None
