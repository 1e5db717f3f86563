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

    Written s * n / (k + n^2) with n = |s|, which never divides by |s|: s = 0 maps to 0.
    ``check_squash_args`` checks the arguments; the numerical guards are the two helpers
    below, ``max_scaled`` (no sum of squares overflows) and ``squash_gain`` (no n^2
    overflows, and the length stays below 1 after rounding).
    """
    check_squash_args(s, k, eps)
    t, m, r = max_scaled(s, dim, eps)                               # s = m t, and n = |s| = m r
    return (t * squash_gain(m, r, k, s.dtype)).to(s.dtype)          # s n / (k + n^2) = t * m n / (k + n^2)


def check_squash_args(s, k, eps) -> None:
    """``s`` a float tensor; ``k`` and ``eps`` finite numbers > 0 (compiled callers pass k as a traced number)."""
    check_tensor(s, "s")
    if not torch.compiler.is_compiling():
        check_number(k, "squash: k")
        check_number(eps, "squash: eps")


def max_scaled(s: torch.Tensor, dim: int, eps: float):
    """(t, m, r) with s = m t, m = max(max_i |s_i|, eps) and m r = sqrt(|s|^2 + eps^2), in float32 at least.

    t's entries lie in [-1, 1] and r in [1, sqrt(D + 1)], so huge and tiny vectors alike are
    measured without overflow or underflow. ``eps`` only keeps the gradient at s = 0 finite;
    it changes lengths above 1e-4 by less than one part in 1e8.
    """
    x = s.to(torch.promote_types(s.dtype, torch.float32))
    m = x.abs().amax(dim=dim, keepdim=True).clamp(min=eps)          # max(max|s_i|, eps) > 0
    t = x / m                                                       # entries in [-1, 1]
    return t, m, torch.sqrt(t.pow(2).sum(dim=dim, keepdim=True) + (eps / m) ** 2)


def squash_gain(m: torch.Tensor, r: torch.Tensor, k: float, dtype: torch.dtype) -> torch.Tensor:
    """m n / (k + n^2) with n = m r (squash's factor on t), finite for every m and capped below length 1.

    Above n = 1 it is evaluated as 1 / (r + k / (m n)), so n^2 never overflows; each branch
    of ``torch.where`` sees only finite numbers, so its gradient is finite too. The output
    length r * gain is capped one ulp of ``dtype`` (rounding to it) and four of m's dtype
    (this arithmetic) below 1, so it is < 1 even after rounding.
    """
    big = m * r > 1.0
    m_big, m_small = torch.where(big, m, 1.0), torch.where(big, 1.0, m)  # each branch finite, so its gradient too
    n_small = m_small * r
    gain = torch.where(big, 1.0 / (r + (k / m_big) / (m_big * r)), m_small * n_small / (k + n_small * n_small))
    return torch.minimum(gain, (1.0 - torch.finfo(dtype).eps - 4 * torch.finfo(m.dtype).eps) / r)


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
