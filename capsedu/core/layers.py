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
from capsedu.core.routing import check_routing_options, dynamic_routing
from capsedu.core.squashing import squash

__all__ = ["PrimaryCapsules", "DenseCapsules", "SharedCapsules"]

# The tutorial's W = randn(...) makes the routed sums s_j so long that the digit
# capsules start saturated near length 1, where the squash is flat and the margin
# loss has little gradient to follow (chapter 5 measures it). A small std trains.
W_INIT_STD = 0.01


def check_feature_maps(x, in_channels: int) -> None:
    """PrimaryCapsules' input: (batch, in_channels, H, W)."""
    if x.dim() != 4 or x.shape[1] != in_channels:
        raise ValueError(f"PrimaryCapsules: expected feature maps (batch, {in_channels}, H, W), got {tuple(x.shape)}")


def check_capsules(u, n_in, in_dim, layer: str) -> None:
    """A routed layer's input: capsules (batch, n_in, in_dim); ``n_in=None`` accepts any number."""
    if not isinstance(u, torch.Tensor):
        raise TypeError(f"{layer}: expected a torch.Tensor, got {type(u).__name__}")
    want = f"(batch, {n_in if n_in else 'n_in'}, {in_dim})"
    if u.dim() != 3 or u.shape[2] != in_dim or (n_in and u.shape[1] != n_in):
        raise ValueError(f"{layer}: expected input capsules of shape {want}, got {tuple(u.shape)}")


class PrimaryCapsules(nn.Module):
    """Conv features (B, C, H, W) -> primary capsules (B, types*H'*W', dim), squashed."""

    def __init__(self, in_channels=256, capsule_types=32, capsule_dim=8, kernel_size=9, stride=2, squash_k=1.0):
        super().__init__()
        check_sizes("PrimaryCapsules", squash_k, in_channels=in_channels, capsule_types=capsule_types,
                    capsule_dim=capsule_dim, kernel_size=kernel_size, stride=stride)
        self.in_channels, self.capsule_types, self.capsule_dim = in_channels, capsule_types, capsule_dim
        self.squash_k = squash_k
        # ONE convolution with types*dim channels (the paper's "32 channels of 8-D
        # capsules"), rather than 8 separate convolutions: same maths, one kernel call.
        self.conv = nn.Conv2d(in_channels, capsule_types * capsule_dim, kernel_size, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_feature_maps(x, self.in_channels)
        y = self.conv(x)                                           # (B, T*D, H, W)
        B, _, H, W = y.shape
        # Channel t*D + d is dimension d of capsule type t; each grid cell of each
        # type is one capsule, so there are T*H*W capsules of D numbers.
        y = y.view(B, self.capsule_types, self.capsule_dim, H, W)  # (B, T, D, H, W)
        y = y.permute(0, 1, 3, 4, 2).reshape(B, -1, self.capsule_dim)  # (B, T*H*W, D)
        return squash(y, dim=-1, k=self.squash_k)


class _RoutedCapsules(nn.Module):
    """Shared by the two routed layers: predictions u_hat, then dynamic routing. Checks every argument."""

    def __init__(self, in_dim, out_capsules, out_dim, iterations, routing, squash_k, **sizes):
        super().__init__()
        check_routing_options(iterations, routing)
        check_sizes(type(self).__name__, squash_k, in_dim=in_dim, out_capsules=out_capsules, out_dim=out_dim, **sizes)
        self.in_dim, self.out_capsules, self.out_dim = in_dim, out_capsules, out_dim
        self.iterations, self.routing, self.squash_k = iterations, routing, squash_k
        # None: the readable dynamic_routing. capsedu.speed.fast.accelerate() puts a fused
        # version of the same maths here (it keeps no history, so history calls bypass it).
        self.fast_routing = None

    def predictions(self, u: torch.Tensor) -> torch.Tensor:  # (B, N_in, N_out, D)
        raise NotImplementedError

    def forward(self, u: torch.Tensor, return_history: bool = False):
        """Input capsules (B, N_in, in_dim) -> output capsules (B, N_out, out_dim) [, history]."""
        return self.route(self.predictions(u), return_history)

    def route(self, u_hat: torch.Tensor, return_history: bool = False):
        """Predictions (B, N_in, N_out, D) -> output capsules (B, N_out, D) [, history]: chapter 3's routing."""
        if self.fast_routing is None or return_history:
            return dynamic_routing(u_hat, self.iterations, self.routing, return_history, self.squash_k)
        return self.fast_routing(u_hat, self.iterations, self.routing, self.squash_k)  # set by speed.fast.accelerate


class DenseCapsules(_RoutedCapsules):
    """One transformation W_ij (out_dim x in_dim) per input/output pair (the paper's DigitCaps)."""

    def __init__(self, in_capsules=1152, in_dim=8, out_capsules=10, out_dim=16,
                 iterations=3, routing="hinton", squash_k=1.0):
        super().__init__(in_dim, out_capsules, out_dim, iterations, routing, squash_k, in_capsules=in_capsules)
        self.in_capsules = in_capsules
        self.weight = nn.Parameter(W_INIT_STD * torch.randn(in_capsules, out_capsules, out_dim, in_dim))

    def predictions(self, u: torch.Tensor) -> torch.Tensor:
        check_capsules(u, self.in_capsules, self.in_dim, "DenseCapsules")
        # u_hat_{j|i} = W_ij u_i for all b, i, j at once; W is never copied per example.
        # Stored as (B, N_out, N_in, D), the order routing works in; returned as the
        # (B, N_in, N_out, D) view that the routing contract names.
        u_hat = torch.einsum("ijde,bie->bjid", self.weight, u).contiguous()
        return u_hat.transpose(1, 2)                                # (B, N_in, N_out, D)


class SharedCapsules(_RoutedCapsules):
    """One transformation W_j per output capsule, shared by all inputs: any N_in works."""

    def __init__(self, in_dim=128, out_capsules=10, out_dim=16, iterations=3, routing="su", squash_k=0.5):
        super().__init__(in_dim, out_capsules, out_dim, iterations, routing, squash_k)
        self.weight = nn.Parameter(W_INIT_STD * torch.randn(out_capsules, out_dim, in_dim))

    def predictions(self, u: torch.Tensor) -> torch.Tensor:
        check_capsules(u, None, self.in_dim, "SharedCapsules")
        u_hat = torch.einsum("jde,bie->bjid", self.weight, u).contiguous()  # stored as in DenseCapsules
        return u_hat.transpose(1, 2)                                # (B, N_in, N_out, D)
