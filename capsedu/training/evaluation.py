"""How well a trained model does, in eval mode and without augmentation.

- ``predict_lengths``: class scores (capsule lengths for CapsNet) for a set of images, in batches.
- ``evaluate``: accuracy and margin loss over a labelled set; multi-hot labels count as right
  when the top-k scores are exactly the k targets.
"""
from __future__ import annotations

from typing import Dict

import torch
import torch.nn.functional as F

from capsedu.core.checks import check_count, check_images
from capsedu.core.losses import check_targets, margin_loss
from capsedu.runtime.device import autocast, resolve_amp, resolve_device

__all__ = ["evaluate", "predict_lengths", "count_correct", "float_targets"]


# ---------------------------------------------------------------- scores and accuracy
def _scores(out) -> torch.Tensor:
    """Class scores (B, C) from a model output: CapsNet's (caps, lengths, recon) or plain scores."""
    return out[1] if isinstance(out, (tuple, list)) else out


def count_correct(scores: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Number of right answers: argmax for integer labels; for multi-hot, the top-k set equals the targets."""
    if not y.is_floating_point():
        return (scores.argmax(dim=1) == y).sum()
    k = y.sum(dim=1).round().long().clamp(min=1)                        # (B,) digits per image
    kth = scores.float().sort(dim=1, descending=True).values.gather(1, (k - 1)[:, None])  # (B, 1)
    return ((scores.float() >= kth) == (y > 0.5)).all(dim=1).sum()


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
