"""The two ~270k-parameter networks of Su Jianlin's two-digit experiment: the same convolutions, two heads.

- ``ConvStack``: Su's feature extractor.
- ``PoolingClassifier``: global average pooling and a dense layer (the CNN baseline).
- ``CapsuleClassifier``: every grid cell a capsule, routed to ten 16-D digit capsules.
- ``keras_init_``: Glorot-uniform weights and zero biases, as in Su's Keras script.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from capsedu.core.checks import check_count
from capsedu.core.layers import SharedCapsules
from capsedu.core.squashing import safe_norm

__all__ = ["ConvStack", "PoolingClassifier", "CapsuleClassifier", "keras_init_"]


class ConvStack(nn.Module):
    """Su's feature extractor: conv64-conv64-avgpool2-conv128-conv128 (3x3, ReLU), any image size."""

    def __init__(self, in_channels: int = 1, width: int = 64):
        super().__init__()
        check_count(in_channels, "ConvStack: in_channels")
        check_count(width, "ConvStack: width")
        self.out_channels = 2 * width
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, width, 3), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3), nn.ReLU(inplace=True),
            nn.AvgPool2d(2),
            nn.Conv2d(width, 2 * width, 3), nn.ReLU(inplace=True),
            nn.Conv2d(2 * width, 2 * width, 3), nn.ReLU(inplace=True),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or min(x.shape[-2:]) < 12:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"expected images of shape (batch, channels, H, W) with H, W >= 12, got {got}")
        return self.net(x)                                          # (B, 128, H', W')


class PoolingClassifier(nn.Module):
    """ConvStack -> global average pooling -> dense 128 (ReLU) -> 10 sigmoids."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, hidden: int = 128):
        super().__init__()
        check_count(num_classes, "PoolingClassifier: num_classes")
        check_count(hidden, "PoolingClassifier: hidden")
        self.features = ConvStack(in_channels)
        self.head = nn.Sequential(nn.Linear(self.features.out_channels, hidden), nn.ReLU(inplace=True),
                                  nn.Linear(hidden, num_classes), nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.features(x).mean(dim=(2, 3))                  # (B, 128)
        return self.head(pooled)                                    # (B, 10) scores in (0, 1)


class CapsuleClassifier(nn.Module):
    """ConvStack -> each grid cell a 128-D capsule -> SharedCapsules (10 x 16-D) -> lengths."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, capsule_dim: int = 16,
                 iterations: int = 3, routing: str = "su", squash_k: float = 0.5):
        super().__init__()
        check_count(num_classes, "CapsuleClassifier: num_classes")
        self.features = ConvStack(in_channels)
        self.capsules = SharedCapsules(self.features.out_channels, num_classes, capsule_dim,
                                       iterations, routing, squash_k)

    def forward(self, x: torch.Tensor, return_history: bool = False):
        f = self.features(x)                                        # (B, 128, H', W')
        u = f.flatten(2).transpose(1, 2)                            # (B, H'*W', 128): 64 for 28x28
        out = self.capsules(u, return_history)
        v, history = out if return_history else (out, None)
        lengths = safe_norm(v, dim=-1)                              # (B, 10) scores in [0, 1)
        return (lengths, history) if return_history else lengths


# ---------------------------------------------------------------- models and test sets
@torch.no_grad()
def keras_init_(model: nn.Module) -> nn.Module:
    """Re-initialise in place as Keras does by default: Glorot-uniform weights, zero biases."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, SharedCapsules):  # Su's W is a (1, in_dim, n_out * out_dim) conv1d kernel
            n_out, out_dim, in_dim = m.weight.shape
            bound = math.sqrt(6.0 / (in_dim + n_out * out_dim))
            m.weight.uniform_(-bound, bound)
    return model
