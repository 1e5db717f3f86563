"""Self-attention routing (Mazzia, Salvetti & Chiaberge, Efficient-CapsNet, 2021).

Indices: ``i`` input capsule, ``k`` another input capsule, ``j`` output capsule, ``d`` dimension.

- ``efficient_squash``: ``(1 - e^{-|s|}) s / |s|``, steeper than the paper's near 0 and
  closer to 1 for long vectors (the ``"exp"`` compression of ``capsedu.core.squashing``).
- ``self_attention_routing``: one step, no iterations. Input ``i`` agrees with output ``j``
  as much as its prediction agrees with the *other* inputs' predictions for ``j``:
  ``A_ij = sum_k <u_hat_j|i, u_hat_j|k> / sqrt(D)``; ``c_ij = softmax_j(A_ij) + b_ij``
  with a learned prior ``b_ij``; ``s_j = sum_i c_ij u_hat_j|i``; ``v_j = squash(s_j)``.
- ``DepthwisePrimaryCapsules``: a depthwise convolution whose kernel covers the whole
  feature map, so each channel gives one number and every D channels one capsule.
- ``SelfAttentionCapsules``: one W_ij per input/output pair, then self-attention routing
  (their ``FCCaps``).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from capsedu.core.squashing import compress

__all__ = ["efficient_squash", "self_attention_routing", "DepthwisePrimaryCapsules", "SelfAttentionCapsules"]


def efficient_squash(s: torch.Tensor, dim: int = -1, eps: float = 1e-8) -> torch.Tensor:
    """Efficient-CapsNet's squash (1 - e^{-|s|}) s/|s|; finite value and gradient at s = 0."""
    return compress(s, "exp", dim=dim, eps=eps)


def self_attention_routing(u_hat: torch.Tensor, bias=None,
                           return_coupling: bool = False):
    """Route predictions ``u_hat`` (B, N_in, N_out, D) in one step to ``v``
    (B, N_out, D).

    ``bias``: None or the priors b_ij, a tensor broadcastable to (N_in, N_out). Returns
    ``v``, or ``(v, c)`` with the coupling ``c`` (B, N_in, N_out) that was used;
    ``c - bias`` sums to 1 over the outputs for every input."""
    tensor = isinstance(u_hat, torch.Tensor)
    if not tensor or u_hat.dim() != 4 or not u_hat.is_floating_point():
        got = tuple(u_hat.shape) if tensor else type(u_hat).__name__
        raise ValueError("u_hat must be a float tensor of shape "
                         f"(batch, n_in, n_out, dim), got {got}")
    D = u_hat.shape[-1]
    # sum_k <u_j|i, u_j|k> = <u_j|i, sum_k u_j|k>: the N_in x N_in attention matrix is
    # never built.
    total = u_hat.sum(dim=1, keepdim=True)  # sum_k u_hat_j|k: (B, 1, N_out, D)
    agreement = (u_hat * total).sum(dim=-1) / math.sqrt(D)  # A_ij: (B, N_in, N_out)
    c = torch.softmax(agreement, dim=2)  # over output capsules j
    if bias is not None:
        c = c + bias  # learned priors b_ij
    # s_j = sum_i c_ij u_hat_j|i: (B, N_out, D)
    s = torch.einsum("bij,bijd->bjd", c, u_hat)
    v = efficient_squash(s)  # (B, N_out, D)
    return (v, c) if return_coupling else v


class DepthwisePrimaryCapsules(nn.Module):
    """Feature maps (B, C, K, K) -> (B, C / D, D) capsules: one K x K filter per channel (no mixing)."""

    def __init__(self, channels: int = 128, kernel_size: int = 9, capsule_dim: int = 8):
        super().__init__()
        if channels % capsule_dim:
            raise ValueError(f"channels ({channels}) must be a multiple of capsule_dim ({capsule_dim})")
        self.channels, self.kernel_size, self.capsule_dim = channels, kernel_size, capsule_dim
        self.conv = nn.Conv2d(channels, channels, kernel_size, groups=channels)   # depthwise

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        want = (self.channels, self.kernel_size, self.kernel_size)
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or tuple(x.shape[1:]) != want:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"DepthwisePrimaryCapsules: expected feature maps (batch, {', '.join(map(str, want))}), "
                             f"got {got}")
        y = self.conv(x)                                            # (B, C, 1, 1)
        y = y.view(x.shape[0], -1, self.capsule_dim)                # channels n*D .. n*D+D-1: (B, C/D, D)
        return efficient_squash(y)


class SelfAttentionCapsules(nn.Module):
    """Input capsules (B, N_in, in_dim) -> (B, N_out, out_dim) by W_ij and self-attention routing."""

    def __init__(self, in_capsules: int = 16, in_dim: int = 8, out_capsules: int = 10, out_dim: int = 16):
        super().__init__()
        self.in_capsules, self.in_dim, self.out_capsules, self.out_dim = in_capsules, in_dim, out_capsules, out_dim
        # Keras's he_normal on their (N_out, N_in, in_dim, out_dim) kernel: std sqrt(2 / fan_in),
        # fan_in = N_out * N_in * in_dim.
        std = math.sqrt(2.0 / (out_capsules * in_capsules * in_dim))
        self.weight = nn.Parameter(std * torch.randn(in_capsules, out_capsules, out_dim, in_dim))
        self.bias = nn.Parameter(torch.zeros(in_capsules, out_capsules))  # the priors b_ij, start at 0

    def predictions(self, u: torch.Tensor) -> torch.Tensor:
        """u_hat_j|i = W_ij u_i: (B, N_in, N_out, out_dim)."""
        if not isinstance(u, torch.Tensor) or u.dim() != 3 or tuple(u.shape[1:]) != (self.in_capsules, self.in_dim):
            got = tuple(u.shape) if isinstance(u, torch.Tensor) else type(u).__name__
            raise ValueError(f"SelfAttentionCapsules: expected capsules (batch, {self.in_capsules}, {self.in_dim}), "
                             f"got {got}")
        return torch.einsum("ijde,bie->bijd", self.weight, u)       # (B, N_in, N_out, D)

    def forward(self, u: torch.Tensor, return_coupling: bool = False):
        return self_attention_routing(self.predictions(u), self.bias, return_coupling)
