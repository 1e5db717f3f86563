"""Chapter 3's measurement of routing in a trained CapsNet: how far the coupling moves from uniform.

- ``routing_statistics(model, images, labels, iterations)``: for each iteration count r, per test
  digit, the coupling coefficients c_ij of routing's last (r-th) iteration summarised over the
  1,152 primary capsules i (mean of max_j c_ij, its 99th percentile over i, mean entropy of c_i,
  mean c_i,true class), the mean length of the predictions u_hat_j|i (they set how far one
  agreement moves a logit), and whether the digit is classified right when inference routes for
  r iterations.

Uniform coupling over 10 classes gives max c = c_true = 0.1 and entropy log 10 = 2.303.
"""
from __future__ import annotations

from typing import Dict, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from capsedu.core.routing import dynamic_routing
from capsedu.core.squashing import safe_norm
from capsedu.figures.frames import capsnet_images

__all__ = ["routing_statistics", "SUMMARIES"]

SUMMARIES = ("max_c", "max_c_p99", "entropy", "true_c", "prediction_length", "correct")


def _summaries(c: torch.Tensor, labels: torch.Tensor) -> Dict[str, torch.Tensor]:
    """c (B, N_in, N_out), labels (B,) -> per-digit (B,) summaries over the inputs i."""
    top = c.amax(dim=2)                                             # (B, N_in): max_j c_ij
    entropy = -(c * c.clamp_min(1e-30).log()).sum(dim=2)            # (B, N_in): H(c_i) in nats
    true_c = c.gather(2, labels.view(-1, 1, 1).expand(-1, c.shape[1], 1)).squeeze(2)  # (B, N_in)
    return {"max_c": top.mean(dim=1), "max_c_p99": torch.quantile(top, 0.99, dim=1),
            "entropy": entropy.mean(dim=1), "true_c": true_c.mean(dim=1)}


@torch.no_grad()
def routing_statistics(model, images: torch.Tensor, labels: torch.Tensor, iterations: Sequence[int] = (1, 2, 3, 5),
                       batch_size: int = 100) -> Dict[int, Dict[str, np.ndarray]]:
    """{r: {summary: (N,) array}} for a trained CapsNet routed for r iterations at inference (SUMMARIES).

    The predictions u_hat are computed once per batch and routed for every r with the model's own
    update and squash; "correct" compares the longest digit capsule with the label.
    """
    x = capsnet_images(model, images, "routing_statistics")
    if not isinstance(labels, torch.Tensor) or labels.shape != (len(x),):
        raise ValueError(f"routing_statistics: labels must be a tensor of {len(x)} class indices, "
                         f"got {getattr(labels, 'shape', type(labels).__name__)}")
    rs = list(iterations)
    if not rs or any(isinstance(r, bool) or not isinstance(r, int) or r < 1 for r in rs):
        raise ValueError(f"routing_statistics: iterations must be positive ints, got {iterations!r}")
    layer, device = model.digits, next(model.parameters()).device
    out = {r: {k: [] for k in SUMMARIES} for r in rs}
    for start in range(0, len(x), batch_size):
        xb, yb = x[start:start + batch_size].to(device), labels[start:start + batch_size].to(device)
        primary = model.primary(F.relu(model.conv1(xb)))            # (B, 1152, 8)
        u_hat = layer.predictions(primary)                          # (B, 1152, 10, 16)
        length = safe_norm(u_hat, dim=-1).mean(dim=(1, 2)).cpu()    # (B,)
        for r in rs:
            v, history = dynamic_routing(u_hat, r, layer.routing, True, layer.squash_k)  # (B, 10, 16)
            for k, value in _summaries(history[-1], yb).items():
                out[r][k].append(value.cpu())
            out[r]["prediction_length"].append(length)
            out[r]["correct"].append((safe_norm(v, dim=-1).argmax(dim=1) == yb).cpu())
    return {r: {k: torch.cat(v).numpy() for k, v in d.items()} for r, d in out.items()}
