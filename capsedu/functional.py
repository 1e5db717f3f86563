"""Floor 1: the pointwise pieces of a capsule network.

- ``squash``: the paper's norm compression, with Su Jianlin's ``k`` knob.
- ``NORM_COMPRESSIONS``: the other length-squashing functions the book compares.
- ``safe_norm``: a vector length whose gradient stays finite at zero.
- ``margin_loss`` and ``reconstruction_loss``: the paper's two training losses.

Lengths are computed in float32 even under bf16/fp16 autocast: a sum of
squares is where low precision overflows or underflows first.
"""
from __future__ import annotations

from typing import Callable, Dict

import torch
import torch.nn.functional as F

__all__ = ["squash", "compress", "as_multi_hot", "NORM_COMPRESSIONS", "safe_norm", "margin_loss", "reconstruction_loss"]


def _check_tensor(x, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")


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

    Written as s * |s|^2 / ((k + |s|^2) sqrt(|s|^2 + eps)), so s = 0 maps to 0 with a
    finite (zero) gradient instead of the 0/0 of the naive formula.
    """
    _check_tensor(s, "s")
    if not k > 0:
        raise ValueError(f"squash: k must be positive, got {k}")
    n2 = _squared_norm(s, dim)
    scale = n2 / ((k + n2) * torch.sqrt(n2 + eps))
    return s * scale.to(s.dtype)


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


def as_multi_hot(targets: torch.Tensor, batch: int, classes: int, device) -> torch.Tensor:
    """Integer labels (B,) or multi-hot/one-hot (B, C) -> float (B, C)."""
    if not isinstance(targets, torch.Tensor):
        raise TypeError(f"targets must be a torch.Tensor, got {type(targets).__name__}")
    if targets.dim() == 1 and not targets.is_floating_point():
        if targets.shape[0] != batch:
            raise ValueError(f"expected integer labels of shape ({batch},), got shape {tuple(targets.shape)}")
        if batch and (targets.min() < 0 or targets.max() >= classes):
            raise ValueError(f"labels must lie in [0, {classes - 1}]")
        return F.one_hot(targets.to(device).long(), classes).float()
    if targets.shape == (batch, classes):
        return targets.to(device=device, dtype=torch.float32)
    raise ValueError(
        f"targets must be integer labels of shape ({batch},) or multi-hot of shape ({batch}, {classes}); "
        f"got {tuple(targets.shape)} with dtype {targets.dtype}"
    )


def margin_loss(lengths: torch.Tensor, targets: torch.Tensor, m_pos: float = 0.9,
                m_neg: float = 0.1, lam: float = 0.5) -> torch.Tensor:
    """Sabour et al. eq. (4): sum_k T_k max(0, m+ - |v_k|)^2 + lam (1 - T_k) max(0, |v_k| - m-)^2.

    Summed over classes, averaged over the batch. ``targets``: integer labels (B,) or
    multi-hot (B, C), so several digits may be present at once. ``lam`` down-weights
    the absent classes so that early training does not shrink every capsule.
    """
    _check_tensor(lengths, "lengths")
    if lengths.dim() != 2:
        raise ValueError(f"lengths must have shape (batch, classes), got {tuple(lengths.shape)}")
    t = as_multi_hot(targets, *lengths.shape, lengths.device)
    v = lengths.float()
    present = t * F.relu(m_pos - v).pow(2)
    absent = lam * (1.0 - t) * F.relu(v - m_neg).pow(2)
    return (present + absent).sum(dim=1).mean()


def reconstruction_loss(reconstructions: torch.Tensor, images: torch.Tensor, scale: float = 0.0005) -> torch.Tensor:
    """scale * sum of squared pixel errors per image, averaged over the batch (the paper's 0.0005 x SSE)."""
    _check_tensor(reconstructions, "reconstructions")
    _check_tensor(images, "images")
    if reconstructions.shape[0] != images.shape[0] or reconstructions[0].numel() != images[0].numel():
        raise ValueError(
            f"reconstructions {tuple(reconstructions.shape)} and images {tuple(images.shape)} "
            "must hold the same batch of the same number of pixels"
        )
    diff = reconstructions.float().flatten(1) - images.float().flatten(1)
    return scale * diff.pow(2).sum(dim=1).mean()


