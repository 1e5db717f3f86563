"""Squash, the capsules' non-linearity, and the other length maps chapter 2 compares.

- ``squash``: v = |s|^2 / (k + |s|^2) * s / |s|; k = 1 is the paper's, k = 0.5 Su Jianlin's.
- ``safe_norm``: a capsule's length, with a finite gradient at s = 0.
- ``NORM_COMPRESSIONS``, ``compress``: other maps from a length to a length in [0, 1).

Sums of squares are taken in float32 even under bf16/fp16 autocast: float16's largest number,
65,504, is the square of a length of 256, and bfloat16 keeps 8 bits of a sum of 16 squares.
"""
from __future__ import annotations

from typing import Callable, Dict

import torch

__all__ = ["squash", "safe_norm", "compress", "NORM_COMPRESSIONS"]


def at_least_float32(s: torch.Tensor) -> torch.Tensor:
    return s.to(torch.promote_types(s.dtype, torch.float32))


def squash(s: torch.Tensor, dim: int = -1, k: float = 1.0,
           eps: float = 1e-8) -> torch.Tensor:
    """v = |s|^2 / (k + |s|^2) * s / |s|, computed as s |s| / (k + |s|^2), so that
    s = 0 maps to 0.

    ``eps`` keeps the gradient finite at s = 0. In float32 the result is exact to
    rounding (relative error below 1e-6) for 1e-5 < |s| < 1e18; above |s| of about 4,000
    the length is 1 to within one float32 step, and |s|^2 overflows above 1.8e19."""
    x = at_least_float32(s)
    n2 = x.pow(2).sum(dim=dim, keepdim=True)  # |s|^2
    n = torch.sqrt(n2 + eps * eps)            # |s|
    return (x * n / (k + n2)).to(s.dtype)


def safe_norm(s: torch.Tensor, dim: int = -1, keepdim: bool = False,
              eps: float = 1e-8) -> torch.Tensor:
    """The length sqrt(|s|^2 + eps), summed in float32: finite value and gradient
    at s = 0."""
    n2 = at_least_float32(s).pow(2).sum(dim=dim, keepdim=keepdim)
    return torch.sqrt(n2 + eps).to(s.dtype)


# Each maps a length |s| >= 0 to a new length in [0, 1).
NORM_COMPRESSIONS: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "paper": lambda n: n * n / (1.0 + n * n),        # Sabour et al.: |x|^2 / (1 + |x|^2)
    "su": lambda n: n * n / (0.5 + n * n),           # Su's k = 0.5: boosts short vectors
    "tanh": torch.tanh,                              # tanh |x|
    "exp": lambda n: 1.0 - torch.exp(-n),            # 1 - e^{-|x|}
    "rational": lambda n: n / (1.0 + n),             # |x| / (1 + |x|)
}


def compress(s: torch.Tensor, name: str = "paper", dim: int = -1, eps: float = 1e-8) -> torch.Tensor:
    """Rescale s along ``dim`` so its length becomes NORM_COMPRESSIONS[name](|s|); direction kept."""
    if name not in NORM_COMPRESSIONS:
        raise ValueError(f"unknown norm compression {name!r}; expected one of {sorted(NORM_COMPRESSIONS)}")
    n = torch.sqrt(at_least_float32(s).pow(2).sum(dim=dim, keepdim=True) + eps)
    return s * (NORM_COMPRESSIONS[name](n) / n).to(s.dtype)
