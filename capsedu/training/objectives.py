"""The losses ``fit`` trains with besides the paper's: softmax cross-entropy and the spread loss.

- ``"capsnet"`` and ``"margin"``: the paper's margin loss (``capsedu.core.losses``), with or without
  the reconstruction term.
- ``"cross_entropy"``: softmax cross-entropy on logits, as the paper trains its baseline CNN.
- ``"spread"``: Hinton, Sabour & Frosst (2018)'s loss for EM routing,
  sum_{i != t} max(0, m - (a_t - a_i))^2, its margin m growing linearly from 0.2 to 0.9 over training.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["cross_entropy_loss", "spread_loss", "spread_margin"]

SPREAD_MARGINS = (0.2, 0.9)  # the margin at the start and at the end of training


def _one_class(targets: torch.Tensor, loss: str) -> None:
    if not torch.compiler.is_compiling() and (targets.sum(dim=1) != 1).any():
        raise ValueError(f"loss={loss!r} needs exactly one class per image (one-hot targets), not multi-hot")


def cross_entropy_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Softmax cross-entropy of logits (B, C) against one-hot targets (B, C), averaged over the batch."""
    _one_class(targets, "cross_entropy")
    return F.cross_entropy(logits.float(), targets.argmax(dim=1))


def spread_margin(progress: float, margins=SPREAD_MARGINS) -> float:
    """The spread loss's margin after ``progress`` (0 to 1) of training: linear from 0.2 to 0.9."""
    start, end = margins
    return start + (end - start) * min(1.0, max(0.0, float(progress)))


def spread_loss(activations: torch.Tensor, targets: torch.Tensor, margin: float) -> torch.Tensor:
    """sum over wrong classes i of max(0, m - (a_t - a_i))^2, averaged over the batch (targets one-hot)."""
    _one_class(targets, "spread")
    a = activations.float()
    a_true = (a * targets).sum(dim=1, keepdim=True)                   # (B, 1)
    return ((1.0 - targets) * F.relu(margin - (a_true - a)).pow(2)).sum(dim=1).mean()
