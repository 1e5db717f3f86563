"""Chapter 6's equivariance measurement: what a trained CapsNet's capsules do when a digit moves.

- ``transform_digits(images, kind, amount)``: every digit shifted right by ``amount`` pixels,
  rotated anticlockwise by ``amount`` degrees, or scaled by the factor ``amount``, about the
  image centre (one ``affine_grid`` + ``grid_sample``, zero filled; whole-pixel shifts copy pixels
  exactly). Rotations and scalings are resampled at 4x the resolution and averaged back, so that
  every amount, 0 included, softens the strokes alike: interpolating at 28 x 28 blurs a rotated
  digit but not the untransformed one, a difference that first-layer features register as if it
  were part of the transformation.
- ``equivariance_curves(model, images, labels, kind, amounts, cnn=None)``: per amount and
  digit, the length of the capsule of the digit's class and the cosine of its pose to the
  untransformed pose, the cosine of the CapsNet's own conv1 maps (place-coded features) to
  theirs, whether the digit is still classified right, and the *drift*: the cosine between the
  change each amount makes to a vector and the change the smallest positive amount makes (a code
  that moves one way for +t and the opposite way for -t, further as |t| grows, gives +1 on one
  side and -1 on the other). With ``cnn``, a trained ``BaselineCNN``, the same for its last
  hidden layer (the features its classifier reads: norm ratio, cosine, drift) and whether it
  still classifies the digit right.

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

__all__ = ["KINDS", "SUPERSAMPLE", "transform_digits", "equivariance_curves", "CURVES", "CNN_CURVES"]

KINDS = {"shift": "pixels to the right", "rotate": "degrees anticlockwise", "scale": "times the size"}
SUPERSAMPLE = 4     # rotations and scalings are resampled on a grid this many times finer
CURVES = ("length", "cosine", "drift", "correct", "map_cosine")
CNN_CURVES = ("cnn_ratio", "cnn_cosine", "cnn_drift", "cnn_correct")  # with a trained CNN


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


def _features(model, cnn, x: torch.Tensor, labels: torch.Tensor):
    """{vector: (B, D)} compared across amounts (the digit capsule of each label, conv1's maps,
    the CNN's last hidden layer) and {curve: (B,)} of right classifications."""
    maps = F.relu(model.conv1(x))                                   # (B, 256, 20, 20)
    digits = model.digits(model.primary(maps))                      # (B, 10, 16)
    vectors = {"capsule": digits[torch.arange(len(x), device=x.device), labels],
               "map": maps.flatten(1)}
    right = {"correct": safe_norm(digits, dim=-1).argmax(dim=1) == labels}
    if cnn is not None:
        last = max(i for i, layer in enumerate(cnn.head) if isinstance(layer, torch.nn.Linear))
        vectors["cnn"] = cnn.head[:last](cnn.features(x).flatten(1))  # (B, hidden[-1])
        right["cnn_correct"] = cnn.head[last:](vectors["cnn"]).argmax(dim=1) == labels
    return vectors, right


@torch.no_grad()
def equivariance_curves(model, images: torch.Tensor, labels: torch.Tensor, kind: str, amounts: Sequence[float],
                        batch_size: int = 100, cnn=None) -> Dict[str, np.ndarray]:
    """{curve: (len(amounts), N) array} for the CURVES (and CNN_CURVES with ``cnn``, a trained
    ``BaselineCNN`` in eval mode), each digit compared with its untransformed self.

    The drifts are NaN at the untransformed amount (no change, no direction); ``amounts`` must hold
    one amount above the untransformed one (0 px, 0 degrees, factor 1), the drifts' reference.
    """
    x = capsnet_images(model, images, "equivariance_curves")
    if not isinstance(labels, torch.Tensor) or labels.shape != (len(x),):
        raise ValueError(f"equivariance_curves: labels must be a tensor of {len(x)} class indices")
    if cnn is not None and (cnn.training or tuple(cnn.config.image_size) != tuple(x.shape[-2:])):
        raise ValueError("equivariance_curves: cnn must be a BaselineCNN for the same image size, in eval mode")
    amounts = list(amounts)
    if not amounts:
        raise ValueError("equivariance_curves: amounts must hold at least one value")
    neutral = 1.0 if kind == "scale" else 0.0
    above = [a for a in amounts if a > neutral]
    if not above:
        raise ValueError(f"equivariance_curves: amounts must hold a value above {neutral} (the drifts' reference)")
    reference = min(above)
    device = next(model.parameters()).device
    names = CURVES + (CNN_CURVES if cnn is not None else ())
    out = {k: [] for k in names}
    for start in range(0, len(x), batch_size):
        xb, yb = x[start:start + batch_size].to(device), labels[start:start + batch_size].to(device)
        seen = {a: _features(model, cnn, transform_digits(xb, kind, a), yb) for a in (neutral, reference)}
        (base, _), (step, _) = seen[neutral], seen[reference]
        rows = {k: [] for k in names}
        for amount in amounts:  # the two seen already are not computed twice
            now, right = seen.get(amount) or _features(model, cnn, transform_digits(xb, kind, amount), yb)
            for name, hits in right.items():
                rows[name].append(hits.float())
            rows["length"].append(safe_norm(now["capsule"], dim=-1))
            rows["map_cosine"].append(F.cosine_similarity(now["map"], base["map"], dim=-1))
            for vector, prefix in (("capsule", ""), ("cnn", "cnn_")):
                if vector not in now:
                    continue
                if prefix:
                    rows[prefix + "ratio"].append(safe_norm(now[vector], dim=-1) / safe_norm(base[vector], dim=-1))
                rows[prefix + "cosine"].append(F.cosine_similarity(now[vector], base[vector], dim=-1))
                drift = F.cosine_similarity(now[vector] - base[vector], step[vector] - base[vector], dim=-1)
                rows[prefix + "drift"].append(drift if amount != neutral else torch.full_like(drift, math.nan))
        for k, v in rows.items():
            out[k].append(torch.stack(v).cpu())                     # (A, B)
    return {k: torch.cat(v, dim=1).numpy() for k, v in out.items()}
