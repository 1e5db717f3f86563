"""Efficient-CapsNet for MNIST (Mazzia, Salvetti & Chiaberge, 2021).

- Four convolutions (32@5x5, 64@3x3, 64@3x3, 128@3x3 stride 2), each ReLU then batch norm:
  28x28 -> 24 -> 22 -> 20 -> 9x9 feature maps.
- ``DepthwisePrimaryCapsules``: a 9x9 depthwise convolution turns the 128 maps into 16
  primary capsules of 8-D.
- ``SelfAttentionCapsules``: 10 digit capsules of 16-D, routed in one step by self-attention.
- 161,824 trainable parameters, the count of their MNIST model (the batch-norm running
  statistics are buffers, not parameters; the optional decoder is not part of it).
"""
from __future__ import annotations

import torch
from torch import nn

from capsedu.core.squashing import safe_norm
from capsedu.methods.attention import (
    DepthwisePrimaryCapsules,
    SelfAttentionCapsules,
)

__all__ = ["EfficientCapsNet", "formula_count"]


def _conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1) -> nn.Sequential:
    conv = nn.Conv2d(c_in, c_out, kernel, stride)
    nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")       # Keras's he_normal, as theirs
    nn.init.zeros_(conv.bias)
    # Keras's defaults: momentum 0.99 (PyTorch counts 1 - 0.99), eps 1e-3
    return nn.Sequential(conv, nn.ReLU(inplace=True), nn.BatchNorm2d(c_out, eps=1e-3, momentum=0.01))


class EfficientCapsNet(nn.Module):
    """Images (B, 1, 28, 28) -> digit-capsule lengths (B, 10); ``capsules()`` gives more."""

    def __init__(self, num_classes: int = 10, in_channels: int = 1):
        super().__init__()
        self.num_classes = num_classes
        self.features = nn.Sequential(
            _conv_bn(in_channels, 32, 5), _conv_bn(32, 64, 3), _conv_bn(64, 64, 3), _conv_bn(64, 128, 3, 2))
        self.primary = DepthwisePrimaryCapsules(128, 9, 8)
        self.digits = SelfAttentionCapsules(16, 8, num_classes, 16)
        self.in_channels = in_channels

    def _check(self, x) -> None:
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or tuple(x.shape[1:]) != (self.in_channels, 28, 28):
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"EfficientCapsNet expects images (batch, {self.in_channels}, 28, 28), got {got}")

    def primary_capsules(self, x: torch.Tensor) -> torch.Tensor:
        """Images -> the 16 primary capsules (B, 16, 8)."""
        self._check(x)
        f = self.features(x)                                        # (B, 128, 9, 9)
        return self.primary(f)                                      # (B, 16, 8)

    def capsules(self, x: torch.Tensor, return_coupling: bool = False):
        """Images -> digit capsules (B, 10, 16) [, coupling c (B, 16, 10) including the priors]."""
        return self.digits(self.primary_capsules(x), return_coupling)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.capsules(x)                                        # (B, 10, 16)
        return safe_norm(v, dim=-1)                                 # (B, 10) scores in [0, 1)


def formula_count() -> int:
    """161,824 from the layer sizes alone: convolutions + batch-norm scales and shifts + capsules."""
    convs = [(1, 32, 5), (32, 64, 3), (64, 64, 3), (64, 128, 3)]
    conv = sum(k * k * a * b + b for a, b, k in convs)              # weights + biases
    norm = sum(2 * b for _, b, _ in convs)                          # gamma and beta per channel
    depthwise = 128 * 9 * 9 + 128
    fc = 16 * 10 * 8 * 16 + 16 * 10                                 # W_ij and the priors b_ij
    return conv + norm + depthwise + fc

