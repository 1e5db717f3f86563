"""How well a trained model does, in eval mode and without augmentation.

- ``predict_lengths``: class scores (capsule lengths for CapsNet) for a set of images, in batches.
- ``evaluate``: accuracy and margin loss over a labelled set; multi-hot labels count as right
  when the top-k scores are exactly the k targets.
- ``set_hits``, ``set_border``: that rule image by image, arguments checked (strict: a tie at the
  border of the top-k is a miss); ``count_correct`` counts with the same rule, unchecked.
"""
from __future__ import annotations

import math
from typing import Dict, Tuple

import torch
import torch.nn.functional as F

from capsedu.core.checks import check_count, check_finite, check_images, check_targets
from capsedu.core.losses import margin_loss
from capsedu.runtime.device import autocast, resolve_amp, resolve_device

__all__ = ["evaluate", "predict_lengths", "count_correct", "set_hits", "set_border", "float_targets"]


# ---------------------------------------------------------------- scores and accuracy
def _scores(out) -> torch.Tensor:
    """Class scores (B, C) from a model output: CapsNet's (caps, lengths, recon) or plain scores."""
    return out[1] if isinstance(out, (tuple, list)) else out


def count_correct(scores: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Number of right answers, as a tensor (no host sync, no checks). Integer labels: argmax (a tie
    goes to the lower class, as ``argmax`` picks it); multi-hot: the rows that ``set_hits`` counts
    (and a miss for a row with no true class or a NaN score, which ``set_hits`` rejects)."""
    if not y.is_floating_point():
        return (scores.argmax(dim=1) == y).sum()
    t = y > 0.5                                                         # (B, C) the true classes
    lowest_true, highest_false = _border(scores.float(), t)             # (B,) each
    return ((lowest_true > highest_false) & t.any(dim=1)).sum()         # a row with no true class: a miss


def set_hits(scores: torch.Tensor, targets: torch.Tensor, threshold=None) -> torch.Tensor:
    """Bool (N,): the classes marked in ``targets`` (N, C) are exactly the top-k of ``scores`` (N, C).

    A hit needs every true class to score *strictly* higher than every other class, so a
    tie at the border of the top-k (the k-th and (k+1)-th scores equal) is a miss: the
    top-k set would be ambiguous. Ties among the true classes do not matter. With
    ``threshold``, the lowest true score (then the k-th highest score) must also be > threshold.
    """
    lowest_true, highest_false = set_border(scores, targets)
    hits = lowest_true > highest_false
    return hits if threshold is None else hits & (lowest_true > threshold)


def set_border(scores: torch.Tensor, targets: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(lowest true score, highest false score), each (N,) float32, after checking the arguments."""
    if not isinstance(scores, torch.Tensor) or scores.dim() != 2 or not scores.is_floating_point():
        raise ValueError(f"scores must be a float tensor (N, C), got {getattr(scores, 'shape', type(scores))}")
    if not isinstance(targets, torch.Tensor) or targets.shape != scores.shape:
        raise ValueError(f"targets must be a multi-hot tensor of shape {tuple(scores.shape)}, "
                         f"got {getattr(targets, 'shape', type(targets))}")
    t = targets.to(scores.device) > 0.5                                 # (N, C) bool
    k = t.sum(dim=1)
    if not ((targets == 0) | (targets == 1)).all() or (k == 0).any() or (k == t.shape[1]).any():
        raise ValueError("targets must be 0/1 with at least one true and one false class per row")
    if not torch.isfinite(scores).all():
        raise ValueError("scores contain NaN or inf")
    return _border(scores.float(), t)


def _border(s: torch.Tensor, t: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(min of s over t, max of s over ~t), each (N,): +inf and -inf for an empty side."""
    return s.masked_fill(~t, math.inf).amin(dim=1), s.masked_fill(t, -math.inf).amax(dim=1)


def float_targets(y: torch.Tensor, classes: int) -> torch.Tensor:
    """Float (N, C) targets: one-hot once up front, so no step has to check labels (a GPU sync)."""
    return y.float() if y.is_floating_point() else F.one_hot(y.long(), classes).float()


# ---------------------------------------------------------------- evaluation
@torch.no_grad()
def predict_lengths(model, x: torch.Tensor, batch_size: int = 500, device="auto", amp="off") -> torch.Tensor:
    """Class scores (N, C) (capsule lengths for CapsNet), eval mode, float32, on the model's device.

    ``device="auto"`` keeps the model where it is; any other device moves it there.
    """
    check_images(x, "x")
    check_finite(x, "x")
    check_count(batch_size, "batch_size")
    if device == "auto":
        device = next(model.parameters()).device
    else:
        device = resolve_device(device)
        model.to(device)
    amp, was_training = resolve_amp(amp, device), model.training
    model.eval()
    try:
        with autocast(amp, device):
            outs = [_scores(model(x[i:i + batch_size].to(device))).float() for i in range(0, len(x), batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(outs)


def evaluate(model, x: torch.Tensor, y: torch.Tensor, batch_size: int = 500, device="auto", amp="off") -> Dict:
    """dict(accuracy, margin_loss, count) over (x, y), eval mode, no augmentation."""
    if len(x) != len(y) or len(x) == 0:
        raise ValueError(f"evaluate needs as many labels as images (and at least one), got {len(x)} and {len(y)}")
    scores = predict_lengths(model, x, batch_size, device, amp)           # (N, C)
    check_targets(y, len(x), scores.shape[1], "y")
    y = y.to(scores.device)
    return {"accuracy": count_correct(scores, y).item() / len(y),
            "margin_loss": margin_loss(scores, float_targets(y, scores.shape[1])).item(),
            "count": len(y)}
