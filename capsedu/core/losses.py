"""The paper's two training losses: the margin loss on capsule lengths, and the reconstruction loss.

``targets`` may be integer labels (B,) or multi-hot (B, C), so several digits can be present at once.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from capsedu.core.checks import as_multi_hot

__all__ = ["margin_loss", "reconstruction_loss"]


def margin_loss(lengths: torch.Tensor, targets: torch.Tensor, m_pos: float = 0.9,
                m_neg: float = 0.1, lam: float = 0.5) -> torch.Tensor:
    """Sabour et al. eq. (4):
    sum_k T_k max(0, m+ - |v_k|)^2 + lam (1 - T_k) max(0, |v_k| - m-)^2.

    Summed over the classes k, averaged over the batch. ``lam`` down-weights the absent
    classes, so that early training does not shrink every capsule."""
    t = as_multi_hot(targets, *lengths.shape, lengths.device)  # T_k: is digit k there?
    v = lengths.float()                                        # |v_k|: (B, C)
    present = t * F.relu(m_pos - v).pow(2)
    absent = lam * (1.0 - t) * F.relu(v - m_neg).pow(2)
    return (present + absent).sum(dim=1).mean()


def reconstruction_loss(reconstructions: torch.Tensor, images: torch.Tensor,
                        scale: float = 0.0005) -> torch.Tensor:
    """scale x the sum of squared pixel errors per image, averaged over the batch."""
    diff = reconstructions.float().flatten(1) - images.float().flatten(1)
    return scale * diff.pow(2).sum(dim=1).mean()
