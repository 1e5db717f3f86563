"""Input checks for the core: each fails with one line that names what it expected.

The functions the book prints call these first, so that a wrong argument gets a clear
``TypeError``/``ValueError`` instead of a stack trace from deep inside torch.
"""
from __future__ import annotations

import math
import numbers

import torch

__all__ = ["check_tensor", "check_number", "check_count", "check_sizes", "check_images"]


def check_tensor(x, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


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


def check_sizes(owner: str, squash_k, **sizes) -> None:
    """Each of ``sizes`` an int >= 1 and ``squash_k`` a finite number > 0; errors say '{owner}: {name}'."""
    for name, value in sizes.items():
        check_count(value, f"{owner}: {name}")
    check_number(squash_k, f"{owner}: squash_k")


def check_images(x, name: str = "images") -> None:
    """A non-empty float batch (N, C, H, W) with finite pixels (one host sync on a GPU)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of images (N, C, H, W), got {type(x).__name__}")
    if x.dim() != 4 or len(x) == 0 or not x.is_floating_point():
        raise ValueError(f"{name} must be float images (N, C, H, W) with N >= 1, got shape "
                         f"{tuple(x.shape)} dtype {x.dtype}")
    if not torch.compiler.is_compiling() and not torch.isfinite(x).all():
        bad = int((~torch.isfinite(x)).flatten(1).any(dim=1).sum())
        raise ValueError(f"{name}: {bad} of {len(x)} images hold NaN or infinite pixels; expected finite values")
