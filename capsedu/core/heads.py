"""The two ~270k-parameter networks of Su Jianlin's two-digit experiment: the same convolutions, two heads.

- ``ConvStack``: Su's feature extractor.
- ``PoolingClassifier``: global average pooling and a dense layer (the CNN baseline).
- ``CapsuleClassifier``: every grid cell a capsule, routed to ten 16-D digit capsules.
"""
from __future__ import annotations

import torch
from torch import nn

from capsedu.core.checks import check_sizes
from capsedu.core.layers import SharedCapsules
from capsedu.core.squashing import safe_norm

__all__ = ["ConvStack", "PoolingClassifier", "CapsuleClassifier"]


class ConvStack(nn.Module):
    """Su's feature extractor: conv64-conv64-avgpool2-conv128-conv128 (3x3, ReLU), any image size."""

    def __init__(self, in_channels: int = 1, width: int = 64):
        super().__init__()
        check_sizes("ConvStack", in_channels=in_channels, width=width)
        self.out_channels = 2 * width
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, width, 3), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3), nn.ReLU(inplace=True),
            nn.AvgPool2d(2),
            nn.Conv2d(width, 2 * width, 3), nn.ReLU(inplace=True),
            nn.Conv2d(2 * width, 2 * width, 3), nn.ReLU(inplace=True),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)                                          # (B, 128, H', W')


class PoolingClassifier(nn.Module):
    """ConvStack -> global average pooling -> dense 128 (ReLU) -> 10 sigmoids."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1, hidden: int = 128):
        super().__init__()
        check_sizes("PoolingClassifier", num_classes=num_classes, hidden=hidden)
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
        check_sizes("CapsuleClassifier", num_classes=num_classes)
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
