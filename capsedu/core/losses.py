"""The paper's two training losses: the margin loss on capsule lengths, and the reconstruction loss.

``targets`` may be integer labels (B,) or multi-hot (B, C), so several digits can be present at once.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from capsedu.core.checks import check_number, check_tensor

__all__ = ["check_targets", "as_multi_hot", "margin_loss", "reconstruction_loss", "check_margin_args",
           "check_reconstruction_args"]


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
    The argument checks are ``check_margin_args`` (and ``check_targets``), below.
    """
    check_margin_args(lengths, m_pos, m_neg, lam)
    t = as_multi_hot(targets, *lengths.shape, lengths.device)
    v = lengths.float()
    present = t * F.relu(m_pos - v).pow(2)
    absent = lam * (1.0 - t) * F.relu(v - m_neg).pow(2)
    return (present + absent).sum(dim=1).mean()


def reconstruction_loss(reconstructions: torch.Tensor, images: torch.Tensor, scale: float = 0.0005) -> torch.Tensor:
    """scale * sum of squared pixel errors per image, averaged over the batch (the paper's 0.0005 x SSE).

    The argument checks are ``check_reconstruction_args``, below.
    """
    check_reconstruction_args(reconstructions, images, scale)
    diff = reconstructions.float().flatten(1) - images.float().flatten(1)
    return scale * diff.pow(2).sum(dim=1).mean()


def check_margin_args(lengths, m_pos, m_neg, lam) -> None:
    """``lengths`` a float (batch, classes) tensor; the margins and ``lam`` finite numbers >= 0."""
    check_tensor(lengths, "lengths")
    if lengths.dim() != 2 or 0 in lengths.shape:
        raise ValueError(f"lengths must have shape (batch, classes), both at least 1, got {tuple(lengths.shape)}")
    for value, name in ((m_pos, "m_pos"), (m_neg, "m_neg"), (lam, "lam")):
        check_number(value, f"margin_loss: {name}", allow_zero=True)


def check_reconstruction_args(reconstructions, images, scale) -> None:
    """Two float batches of at least one image, the same number of pixels each; ``scale`` finite, >= 0."""
    check_tensor(reconstructions, "reconstructions")
    check_tensor(images, "images")
    check_number(scale, "reconstruction_loss: scale", allow_zero=True)
    if reconstructions.dim() < 2 or images.dim() < 2 or len(images) == 0:
        raise ValueError(f"reconstructions and images must be batches of at least one image, got shapes "
                         f"{tuple(reconstructions.shape)} and {tuple(images.shape)}")
    if reconstructions.shape[0] != images.shape[0] or reconstructions[0].numel() != images[0].numel():
        raise ValueError(
            f"reconstructions {tuple(reconstructions.shape)} and images {tuple(images.shape)} "
            "must hold the same batch of the same number of pixels"
        )
