"""Capsule layers.

- ``PrimaryCapsules``: one convolution whose output channels are grouped into capsules.
- ``DenseCapsules``: one W_ij per (input, output) pair, as the paper's DigitCaps.
- ``SharedCapsules``: one W_j per output capsule, shared by every input (Su Jianlin),
  so the layer accepts any number of input capsules.

Einsum axes: ``b`` batch, ``i`` input capsule, ``j`` output capsule,
``d`` output capsule dimension, ``e`` input capsule dimension.
"""
from __future__ import annotations

import torch
from torch import nn

from capsedu.core.checks import check_sizes
from capsedu.core.routing import ROUTING_MODES, dynamic_routing
from capsedu.core.squashing import squash

__all__ = ["PrimaryCapsules", "RoutedCapsules", "DenseCapsules", "SharedCapsules"]

# The tutorial's W = randn(...) makes the routed sums s_j so long that the digit
# capsules start saturated near length 1, where the squash is flat and the margin
# loss gives little gradient (chapter 11, pitfall 7, measures it); a small std trains.
W_INIT_STD = 0.01


class PrimaryCapsules(nn.Module):
    """Conv features (B, C, H, W) -> primary capsules (B, types*H'*W', dim), squashed"""

    def __init__(self, in_channels=256, capsule_types=32, capsule_dim=8, kernel_size=9,
                 stride=2, squash_k=1.0):
        super().__init__()
        check_sizes("PrimaryCapsules", squash_k, in_channels=in_channels, stride=stride,
                    capsule_types=capsule_types, capsule_dim=capsule_dim,
                    kernel_size=kernel_size)
        self.capsule_types, self.capsule_dim = capsule_types, capsule_dim
        self.squash_k = squash_k
        # One convolution with types x dim channels ("32 channels of 8-D capsules").
        channels = capsule_types * capsule_dim
        self.conv = nn.Conv2d(in_channels, channels, kernel_size, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)                                               # (B, T*D, H, W)
        B, _, H, W = y.shape
        y = y.view(B, self.capsule_types, self.capsule_dim, H, W)      # channel t*D + d
        y = y.permute(0, 1, 3, 4, 2).reshape(B, -1, self.capsule_dim)  # (B, T*H*W, D)
        return squash(y, dim=-1, k=self.squash_k)


class RoutedCapsules(nn.Module):
    """Capsules that vote (``predictions``) and are routed: what DenseCapsules and
    SharedCapsules share."""

    def __init__(self, iterations, routing, squash_k, **sizes):
        super().__init__()
        if routing not in ROUTING_MODES:
            raise ValueError(f"unknown routing mode {routing!r} not in {ROUTING_MODES}")
        check_sizes(type(self).__name__, squash_k, iterations=iterations, **sizes)
        self.iterations, self.routing, self.squash_k = iterations, routing, squash_k
        self.fast_routing = None  # engineering: capsedu.speed.fast.accelerate's hook

    def forward(self, u: torch.Tensor, return_history: bool = False):
        """Capsules u (B, N_in, in_dim) -> v (B, N_out, out_dim) [, history]."""
        return self.route(self.predictions(u), return_history)

    def route(self, u_hat: torch.Tensor, return_history: bool = False):
        """Votes (B, N_in, N_out, D) -> v (B, N_out, D) [, history]: chapter 3."""
        if self.fast_routing is not None and not return_history:  # engineering: ch. 8
            return self.fast_routing(u_hat, self.iterations, self.routing, False,
                                     self.squash_k)
        return dynamic_routing(u_hat, self.iterations, self.routing, return_history,
                               self.squash_k)


class DenseCapsules(RoutedCapsules):
    """The paper's DigitCaps: one W_ij (out_dim x in_dim) per pair of input capsule i
    and output capsule j."""

    def __init__(self, in_capsules=1152, in_dim=8, out_capsules=10, out_dim=16,
                 iterations=3, routing="hinton", squash_k=1.0):
        super().__init__(iterations, routing, squash_k, in_capsules=in_capsules,
                         in_dim=in_dim, out_capsules=out_capsules, out_dim=out_dim)
        shape = (in_capsules, out_capsules, out_dim, in_dim)
        self.weight = nn.Parameter(W_INIT_STD * torch.randn(shape))

    def predictions(self, u: torch.Tensor) -> torch.Tensor:
        """Votes u_hat_j|i = W_ij u_i: (B, N_in, in_dim) -> (B, N_in, N_out, D)."""
        # Every example and pair at once (W is never copied per example), stored
        # j-major, the order in which routing sums; the transpose back is a view.
        votes = torch.einsum("ijde,bie->bjid", self.weight, u).contiguous()
        return votes.transpose(1, 2)


class SharedCapsules(RoutedCapsules):
    """One W_j (out_dim x in_dim) per output capsule, shared by all inputs: any N_in."""

    def __init__(self, in_dim=128, out_capsules=10, out_dim=16, iterations=3,
                 routing="su", squash_k=0.5):
        super().__init__(iterations, routing, squash_k, in_dim=in_dim,
                         out_capsules=out_capsules, out_dim=out_dim)
        shape = (out_capsules, out_dim, in_dim)
        self.weight = nn.Parameter(W_INIT_STD * torch.randn(shape))

    def predictions(self, u: torch.Tensor) -> torch.Tensor:
        """Votes u_hat_j|i = W_j u_i (B, N_in, N_out, D), stored as in DenseCapsules."""
        votes = torch.einsum("jde,bie->bjid", self.weight, u).contiguous()
        return votes.transpose(1, 2)
