"""Chapter 6's equivariance measurement: what a trained CapsNet's capsules do when a digit moves.

- ``transform_digits(images, kind, amount)``: every digit shifted right by ``amount`` pixels,
  rotated anticlockwise by ``amount`` degrees, or scaled by the factor ``amount``, about the
  image centre (one ``affine_grid`` + ``grid_sample``, zero filled; whole-pixel shifts copy pixels
  exactly). Rotations and scalings are resampled at 4x the resolution and averaged back, so that
  every amount, 0 included, softens the strokes alike: interpolating at 28 x 28 blurs a rotated
  digit but not the untransformed one, a difference that first-layer features register as if it
  were part of the transformation.
- ``equivariance_curves(model, images, labels, kind, amounts)``: per amount and digit, the length
  of the capsule of the digit's class and the cosine of its pose to the untransformed pose, and
  the same two for the CapsNet's own conv1 features: globally average-pooled (a pooled CNN
  feature) and unpooled (place-coded maps), plus whether the digit is still classified right,
  and the *drift*: the cosine between the change each amount makes to a vector and the change the
  smallest positive amount makes (a code that moves one way for +t and the opposite way for -t,
  further as |t| grows, gives +1 on one side and -1 on the other).

A cosine of 1 means the vector kept its direction; a length (or norm ratio) of 1 that it kept its size.
"""
from __future__ import annotations

import math
from typing import Dict, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from capsedu.core.squashing import safe_norm
from capsedu.figures.frames import capsnet_images

__all__ = ["KINDS", "SUPERSAMPLE", "transform_digits", "equivariance_curves", "CURVES"]

KINDS = {"shift": "pixels to the right", "rotate": "degrees anticlockwise", "scale": "times the size"}
SUPERSAMPLE = 4     # rotations and scalings are resampled on a grid this many times finer
CURVES = ("length", "cosine", "drift", "correct", "pooled_ratio", "pooled_cosine", "pooled_drift", "map_cosine")


def _theta(kind: str, amount: float, width: int) -> torch.Tensor:
    """The (2, 3) matrix affine_grid wants: output coordinates -> input ones, in units of half the image."""
    if kind == "shift":
        return torch.tensor([[1.0, 0.0, -2.0 * amount / width], [0.0, 1.0, 0.0]])
    if kind == "rotate":        # anticlockwise on screen, where y points down: sample from the clockwise turn
        t = math.radians(amount)
        return torch.tensor([[math.cos(t), -math.sin(t), 0.0], [math.sin(t), math.cos(t), 0.0]])
    return torch.tensor([[1.0 / amount, 0.0, 0.0], [0.0, 1.0 / amount, 0.0]])  # scale: read from closer in


def transform_digits(images: torch.Tensor, kind: str, amount: float) -> torch.Tensor:
    """Images (N, C, H, W) moved by one transformation of ``kind`` (KINDS) and ``amount``; same shape."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {tuple(KINDS)}, got {kind!r}")
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount) \
            or (kind == "scale" and amount <= 0):
        raise ValueError(f"amount must be a finite number{' > 0' if kind == 'scale' else ''}, got {amount!r}")
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or not images.is_floating_point():
        raise ValueError(f"images must be float images (N, C, H, W), got {getattr(images, 'shape', type(images))}")
    theta = _theta(kind, float(amount), images.shape[-1]).to(images)     # (2, 3), independent of resolution
    fine = images if kind == "shift" else F.interpolate(images, scale_factor=SUPERSAMPLE, mode="bilinear",
                                                        align_corners=False)  # (N, C, 4H, 4W)
    grid = F.affine_grid(theta.expand(len(images), 2, 3), list(fine.shape), align_corners=False)
    out = F.grid_sample(fine, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return out if kind == "shift" else F.avg_pool2d(out, SUPERSAMPLE)    # (N, C, H, W)


def _features(model, x: torch.Tensor, labels: torch.Tensor):
    """Digit capsule of each label (B, 16), all lengths (B, 10), conv1 maps (B, 256*20*20), pooled (B, 256)."""
    maps = F.relu(model.conv1(x))                                   # (B, 256, 20, 20)
    digits = model.digits(model.primary(maps))                      # (B, 10, 16)
    own = digits[torch.arange(len(x), device=x.device), labels]     # (B, 16)
    return own, safe_norm(digits, dim=-1), maps.flatten(1), maps.mean(dim=(2, 3))


@torch.no_grad()
def equivariance_curves(model, images: torch.Tensor, labels: torch.Tensor, kind: str, amounts: Sequence[float],
                        batch_size: int = 100) -> Dict[str, np.ndarray]:
    """{curve: (len(amounts), N) array} for the CURVES, each digit compared with its untransformed self.

    The drifts are NaN at the untransformed amount (no change, no direction); ``amounts`` must hold
    one amount above the untransformed one (0 px, 0 degrees, factor 1), the drifts' reference.
    """
    x = capsnet_images(model, images, "equivariance_curves")
    if not isinstance(labels, torch.Tensor) or labels.shape != (len(x),):
        raise ValueError(f"equivariance_curves: labels must be a tensor of {len(x)} class indices")
    amounts = list(amounts)
    if not amounts:
        raise ValueError("equivariance_curves: amounts must hold at least one value")
    neutral = 1.0 if kind == "scale" else 0.0
    above = [a for a in amounts if a > neutral]
    if not above:
        raise ValueError(f"equivariance_curves: amounts must hold a value above {neutral} (the drifts' reference)")
    reference = min(above)
    device = next(model.parameters()).device
    out = {k: [] for k in CURVES}
    for start in range(0, len(x), batch_size):
        xb, yb = x[start:start + batch_size].to(device), labels[start:start + batch_size].to(device)
        seen = {a: _features(model, transform_digits(xb, kind, a), yb) for a in (neutral, reference)}
        own0, _, maps0, pooled0 = seen[neutral]
        own1, _, _, pooled1 = seen[reference]
        rows = {k: [] for k in CURVES}
        for amount in amounts:  # the two seen already are not computed twice
            own, lengths, maps, pooled = seen.get(amount) or _features(model, transform_digits(xb, kind, amount), yb)
            rows["length"].append(safe_norm(own, dim=-1))
            rows["cosine"].append(F.cosine_similarity(own, own0, dim=-1))
            rows["correct"].append((lengths.argmax(dim=1) == yb).float())
            rows["pooled_ratio"].append(safe_norm(pooled, dim=-1) / safe_norm(pooled0, dim=-1))
            rows["pooled_cosine"].append(F.cosine_similarity(pooled, pooled0, dim=-1))
            rows["map_cosine"].append(F.cosine_similarity(maps, maps0, dim=-1))
            for name, now, base, step in (("drift", own, own0, own1), ("pooled_drift", pooled, pooled0, pooled1)):
                drift = F.cosine_similarity(now - base, step - base, dim=-1)
                rows[name].append(drift if amount != neutral else torch.full_like(drift, math.nan))
        for k, v in rows.items():
            out[k].append(torch.stack(v).cpu())                     # (A, B)
    return {k: torch.cat(v, dim=1).numpy() for k, v in out.items()}
