"""Floor 1: the pointwise pieces of a capsule network.

- ``squash``: the paper's norm compression, with Su Jianlin's ``k`` knob.
- ``NORM_COMPRESSIONS``: the other length-squashing functions the book compares.
- ``safe_norm``: a vector length whose gradient stays finite at zero.
- ``margin_loss`` and ``reconstruction_loss``: the paper's two training losses.
- ``check_number``, ``check_count``, ``check_targets``, ``check_images``: the checks every
  public entry point runs on its input, each failing with one line that names what it expected.

Lengths are computed in float32 even under bf16/fp16 autocast: a sum of
squares is where low precision overflows or underflows first.
"""
from __future__ import annotations

import math
import numbers
from typing import Callable, Dict

import torch
import torch.nn.functional as F

__all__ = ["squash", "compress", "as_multi_hot", "NORM_COMPRESSIONS", "safe_norm", "margin_loss", "reconstruction_loss",
           "check_number", "check_count", "check_targets", "check_images"]


def _check_tensor(x, name: str) -> None:
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


def _squared_norm(s: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum of squares along ``dim`` (keepdim), in float32 at least whatever the input precision."""
    return s.to(torch.promote_types(s.dtype, torch.float32)).pow(2).sum(dim=dim, keepdim=True)


def safe_norm(s: torch.Tensor, dim: int = -1, keepdim: bool = False, eps: float = 1e-8) -> torch.Tensor:
    """Euclidean length sqrt(|s|^2 + eps): finite value and gradient at s = 0."""
    _check_tensor(s, "s")
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
    _check_tensor(s, "s")
    if not torch.compiler.is_compiling():  # compiled callers (capsedu.fast) pass k as a traced number
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
    _check_tensor(s, "s")
    if name not in NORM_COMPRESSIONS:
        raise ValueError(f"unknown norm compression {name!r}; expected one of {sorted(NORM_COMPRESSIONS)}")
    n = torch.sqrt(_squared_norm(s, dim) + eps)
    return s * (NORM_COMPRESSIONS[name](n) / n).to(s.dtype)


def check_targets(targets, batch: int, classes: int, name: str = "targets", values: bool = True) -> None:
    """Integer labels (B,) in [0, C) or multi-hot floats (B, C) of 0s and 1s; one clear error otherwise.

    ``values=False`` checks only type and shape (no host sync: for per-step calls on a GPU).
    """
    want = (f"integer labels of shape ({batch},) in [0, {classes - 1}] "
            f"or multi-hot 0/1 floats of shape ({batch}, {classes})")
    if not isinstance(targets, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of {want}, got {type(targets).__name__}")
    if targets.dtype == torch.bool or targets.is_complex():
        raise TypeError(f"{name} must be {want}, got dtype {targets.dtype}")
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
    """Integer labels (B,) or multi-hot/one-hot (B, C) -> float (B, C).

    Values are checked where that costs no GPU sync (on the CPU); ``fit`` and ``evaluate``
    check whole label sets once, up front, on every device.
    """
    check_targets(targets, batch, classes, values=getattr(targets, "device", None) == torch.device("cpu"))
    if targets.is_floating_point():
        return targets.to(device=device, dtype=torch.float32)
    return F.one_hot(targets.to(device).long(), classes).float()


def margin_loss(lengths: torch.Tensor, targets: torch.Tensor, m_pos: float = 0.9,
                m_neg: float = 0.1, lam: float = 0.5) -> torch.Tensor:
    """Sabour et al. eq. (4): sum_k T_k max(0, m+ - |v_k|)^2 + lam (1 - T_k) max(0, |v_k| - m-)^2.

    Summed over classes, averaged over the batch. ``targets``: integer labels (B,) or
    multi-hot (B, C), so several digits may be present at once. ``lam`` down-weights
    the absent classes so that early training does not shrink every capsule.
    """
    _check_tensor(lengths, "lengths")
    if lengths.dim() != 2 or 0 in lengths.shape:
        raise ValueError(f"lengths must have shape (batch, classes), both at least 1, got {tuple(lengths.shape)}")
    for value, name in ((m_pos, "m_pos"), (m_neg, "m_neg"), (lam, "lam")):
        check_number(value, f"margin_loss: {name}", allow_zero=True)
    t = as_multi_hot(targets, *lengths.shape, lengths.device)
    v = lengths.float()
    present = t * F.relu(m_pos - v).pow(2)
    absent = lam * (1.0 - t) * F.relu(v - m_neg).pow(2)
    return (present + absent).sum(dim=1).mean()


def reconstruction_loss(reconstructions: torch.Tensor, images: torch.Tensor, scale: float = 0.0005) -> torch.Tensor:
    """scale * sum of squared pixel errors per image, averaged over the batch (the paper's 0.0005 x SSE)."""
    _check_tensor(reconstructions, "reconstructions")
    _check_tensor(images, "images")
    check_number(scale, "reconstruction_loss: scale", allow_zero=True)
    if reconstructions.dim() < 2 or images.dim() < 2 or len(images) == 0:
        raise ValueError(f"reconstructions and images must be batches of at least one image, got shapes "
                         f"{tuple(reconstructions.shape)} and {tuple(images.shape)}")
    if reconstructions.shape[0] != images.shape[0] or reconstructions[0].numel() != images[0].numel():
        raise ValueError(
            f"reconstructions {tuple(reconstructions.shape)} and images {tuple(images.shape)} "
            "must hold the same batch of the same number of pixels"
        )
    diff = reconstructions.float().flatten(1) - images.float().flatten(1)
    return scale * diff.pow(2).sum(dim=1).mean()


