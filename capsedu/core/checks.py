"""Argument checks where a user enters capsedu: the public constructors, ``CapsNet.capsules``/``forward``,
``fit`` and ``evaluate``. Each fails with one line that names what it expected; the maths functions
behind them trust their input.
"""
from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F

__all__ = ["check_number", "check_count", "check_sizes", "check_images", "check_finite", "check_targets",
           "as_multi_hot"]


def check_number(value, name: str, allow_zero: bool = False) -> None:
    """A finite real number > 0 (>= 0 with ``allow_zero``); not a bool, not a string."""
    want = f"a finite number {'>=' if allow_zero else '>'} 0"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {want}, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {want}, got {value!r}")


def check_count(value, name: str, minimum: int = 1) -> None:
    """An int (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= {minimum}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def check_sizes(owner: str, squash_k=1.0, **sizes) -> None:
    """Each size an int >= 1 (or a tuple of them) and ``squash_k`` a finite number > 0; errors say '{owner}: {name}'."""
    for name, value in sizes.items():
        for v in value if isinstance(value, tuple) else (value,):
            check_count(v, f"{owner}: {name}")
    check_number(squash_k, f"{owner}: squash_k")


def check_images(x, name: str = "images", shape=None) -> None:
    """A non-empty float batch (N, C, H, W), with (C, H, W) equal to ``shape`` when given."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of images (N, C, H, W), got {type(x).__name__}")
    want = f"(N, {', '.join(map(str, shape))})" if shape else "(N, C, H, W)"
    if x.dim() != 4 or len(x) == 0 or not x.is_floating_point() or (shape and tuple(x.shape[1:]) != tuple(shape)):
        raise ValueError(f"{name} must be float images {want} with N >= 1, got shape {tuple(x.shape)} dtype {x.dtype}")


def check_finite(x: torch.Tensor, name: str = "images") -> None:
    """Every pixel finite (one host sync on a GPU, so ``fit`` and ``evaluate`` call it once per data set)."""
    if not torch.isfinite(x).all():
        bad = int((~torch.isfinite(x)).flatten(1).any(dim=1).sum())
        raise ValueError(f"{name}: {bad} of {len(x)} images hold NaN or infinite pixels; expected finite values")


def check_targets(targets, batch: int, classes: int, name: str = "targets", values: bool = True) -> None:
    """Integer labels (B,) in [0, C) or multi-hot floats (B, C) of 0s and 1s.

    ``values=False`` checks only type and shape (no host sync: for per-step calls on a GPU).
    """
    want = (f"integer labels of shape ({batch},) in [0, {classes - 1}] "
            f"or multi-hot 0/1 floats of shape ({batch}, {classes})")
    if not isinstance(targets, torch.Tensor) or targets.dtype == torch.bool or targets.is_complex():
        raise TypeError(f"{name} must be a torch.Tensor of {want}, got "
                        f"{f'dtype {targets.dtype}' if torch.is_tensor(targets) else type(targets).__name__}")
    if batch == 0:
        raise ValueError(f"{name}: expected at least one example, got an empty batch")
    floating = targets.is_floating_point()
    if tuple(targets.shape) != ((batch, classes) if floating else (batch,)):
        raise ValueError(f"{name} must be {want}; got shape {tuple(targets.shape)} with dtype {targets.dtype}")
    if not values or torch.compiler.is_compiling():
        return
    if floating and not ((targets == 0) | (targets == 1)).all():
        bad = targets[(targets != 0) & (targets != 1)][0].item()
        raise ValueError(f"{name}: multi-hot targets must be 0 or 1, got {bad}")
    if not floating and (targets.min() < 0 or targets.max() >= classes):
        raise ValueError(f"{name}: labels must lie in [0, {classes - 1}], got values from "
                         f"{targets.min().item()} to {targets.max().item()}")


def as_multi_hot(targets: torch.Tensor, batch: int, classes: int, device) -> torch.Tensor:
    """Integer labels (B,) or multi-hot (B, C) -> float (B, C) on ``device``, checked as ``check_targets`` does.

    Values are checked where that costs no GPU sync (on the CPU); ``fit`` and ``evaluate`` check
    whole label sets once, up front, on every device.
    """
    check_targets(targets, batch, classes, values=getattr(targets, "device", None) == torch.device("cpu"))
    if targets.is_floating_point():
        return targets.to(device=device, dtype=torch.float32)
    return F.one_hot(targets.to(device).long(), classes).float()
