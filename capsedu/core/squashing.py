"""Squash: the paper's norm compression, and the other length-squashing functions the book compares.

- ``squash``: |s|^2 / (k + |s|^2) * s / |s|, with Su Jianlin's ``k`` knob.
- ``NORM_COMPRESSIONS``, ``compress``: other maps from a length to a length in [0, 1).
- ``safe_norm``: a vector length whose gradient stays finite at zero.

Lengths are computed in float32 even under bf16/fp16 autocast: a sum of
squares is where low precision overflows or underflows first.
"""
from __future__ import annotations

from typing import Callable, Dict

import torch

from capsedu.core.checks import check_number, check_tensor

__all__ = ["squash", "compress", "NORM_COMPRESSIONS", "safe_norm"]


def _squared_norm(s: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum of squares along ``dim`` (keepdim), in float32 at least whatever the input precision."""
    return s.to(torch.promote_types(s.dtype, torch.float32)).pow(2).sum(dim=dim, keepdim=True)


def safe_norm(s: torch.Tensor, dim: int = -1, keepdim: bool = False, eps: float = 1e-8) -> torch.Tensor:
    """Euclidean length sqrt(|s|^2 + eps): finite value and gradient at s = 0."""
    check_tensor(s, "s")
    n = torch.sqrt(_squared_norm(s, dim) + eps).to(s.dtype)
    return n if keepdim else n.squeeze(dim)


def squash(s: torch.Tensor, dim: int = -1, k: float = 1.0, eps: float = 1e-8) -> torch.Tensor:
    """|s|^2 / (k + |s|^2) * s / |s|.  k = 1 is the paper's, k = 0.5 Su Jianlin's variant.

    Computed as s * n / (k + n^2) with n = sqrt(|s|^2 + eps^2): no division by |s|, so
    s = 0 maps to 0 with a finite gradient (``eps`` only keeps that gradient finite; it
    changes lengths above 1e-4 by less than one part in 1e8). Exact for huge and tiny
    vectors alike, in float32 at least: n is measured on s / max|s_i|, and n / (k + n^2)
    is evaluated as 1 / (n + k / n) above n = 1, so nothing overflows. The output length is
    capped one unit of the input's precision below 1, so it is < 1 even after rounding.
    """
    check_tensor(s, "s")
    if not torch.compiler.is_compiling():  # compiled callers (capsedu.speed.fast) pass k as a traced number
        check_number(k, "squash: k")
        check_number(eps, "squash: eps")
    x = s.to(torch.promote_types(s.dtype, torch.float32))
    m = x.abs().amax(dim=dim, keepdim=True).clamp(min=eps)          # max(max|s_i|, eps) > 0
    t = x / m                                                       # entries in [-1, 1]
    r = torch.sqrt(t.pow(2).sum(dim=dim, keepdim=True) + (eps / m) ** 2)  # n / m, in [1, sqrt(D + 1)]
    n = m * r                                                       # may be inf beyond the dtype's range
    big = n > 1.0
    m_big, m_small = torch.where(big, m, 1.0), torch.where(big, 1.0, m)  # each branch finite, so its gradient too
    n_small = m_small * r
    # q = m n / (k + n^2), so that the output is t * q: above n = 1 as 1 / (r + k / (m n))
    q = torch.where(big, 1.0 / (r + (k / m_big) / (m_big * r)), m_small * n_small / (k + n_small * n_small))
    # output length r q: below 1 by one ulp of s's dtype (rounding to it) and four of x's (this arithmetic)
    cap = (1.0 - torch.finfo(s.dtype).eps - 4 * torch.finfo(x.dtype).eps) / r
    return (t * torch.minimum(q, cap)).to(s.dtype)


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
    check_tensor(s, "s")
    if name not in NORM_COMPRESSIONS:
        raise ValueError(f"unknown norm compression {name!r}; expected one of {sorted(NORM_COMPRESSIONS)}")
    n = torch.sqrt(_squared_norm(s, dim) + eps)
    return s * (NORM_COMPRESSIONS[name](n) / n).to(s.dtype)
