"""A small matrix-capsule network with EM routing (Hinton, Sabour & Frosst, 2018).

- ``conv1``, the stem: 5x5 convolution, stride 2, ``A`` channels, ReLU (28x28 -> 12x12), the
  paper's; or (``stem="su"``) chapter 7's conv stack, the trunk of dynamic routing's network
  (four 3x3 convolutions and an average pool, ``A`` = 128 channels out, 28x28 -> 8x8).
- ``PrimaryMatrixCapsules``: a 1x1 convolution gives each grid cell ``B`` capsules, each a
  4x4 pose matrix and a sigmoid activation.
- ``ConvMatrixCapsules``: every KxK window of input capsules votes (``V_ij = M_i W_ij``) for
  the output capsule types at that position; EM routing per position (12x12 -> 5x5 for
  K = 3, stride 2).
- ``ClassMatrixCapsules``: one W per (input type, class), shared over positions, plus the
  paper's *coordinate addition* (the scaled position of a capsule is added to its vote);
  the class activations are the scores.

Einsum axes: ``n`` batch (times positions), ``i`` input capsule, ``j`` output capsule,
``p q r`` rows and columns of 4x4 matrices, ``x y`` grid position, ``t`` capsule type.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from capsedu.core.heads import ConvStack
from capsedu.methods.em import FINAL_LAMBDA, em_routing

__all__ = ["MatrixCapsNetConfig", "PAPER_CONFIG", "STEMS", "MatrixCapsNet", "PrimaryMatrixCapsules",
           "ConvMatrixCapsules", "ClassMatrixCapsules"]

W_STD = 2.0
STEMS = ("conv", "su")  # the paper's one 5x5 convolution; chapter 7's conv stack (ConvStack, width A / 2)


@dataclass(frozen=True)
class MatrixCapsNetConfig:
    """A = channels into the primary capsules, B = primary capsule types, conv_caps = ((types, kernel,
    stride), ...); stem: one of ``STEMS`` ("su": A / 2 is the conv stack's width, 64 for A = 128)."""
    A: int = 32
    B: int = 8
    conv_caps: Tuple[Tuple[int, int, int], ...] = ((8, 3, 2),)
    num_classes: int = 10
    iterations: int = 3
    final_lambda: float = FINAL_LAMBDA
    image_size: int = 28
    stem: str = "conv"


# The paper's network (A = B = C = D = 32, K = 3; strides 2 then 1), here with 10 classes.
PAPER_CONFIG = MatrixCapsNetConfig(A=32, B=32, conv_caps=((32, 3, 2), (32, 3, 1)))


class _Routed(nn.Module):
    """The learned betas of one routed layer and its call of ``em_routing``."""

    def __init__(self, out_types: int, iterations: int, final_lambda: float):
        super().__init__()
        self.beta_u = nn.Parameter(torch.zeros(out_types))          # one per output capsule type
        self.beta_a = nn.Parameter(torch.zeros(out_types))
        self.iterations, self.final_lambda = iterations, final_lambda

    def route(self, votes: torch.Tensor, a: torch.Tensor, return_history: bool = False):
        """votes (n, N_in, N_out, 16), a (n, N_in) -> poses (n, N_out, 16), a (n, N_out) [, history]."""
        return em_routing(votes, a, self.beta_u, self.beta_a, self.iterations, self.final_lambda, return_history)


class PrimaryMatrixCapsules(nn.Module):
    """Features (b, C, H, W) -> poses (b, H, W, T, 16) and activations (b, H, W, T)."""

    def __init__(self, in_channels: int, types: int):
        super().__init__()
        self.types = types
        self.pose = nn.Conv2d(in_channels, types * 16, 1)
        self.activation = nn.Conv2d(in_channels, types, 1)

    def forward(self, f: torch.Tensor):
        b, _, H, W = f.shape
        poses = self.pose(f).view(b, self.types, 16, H, W).permute(0, 3, 4, 1, 2)  # (b, H, W, T, 16)
        a = torch.sigmoid(self.activation(f)).permute(0, 2, 3, 1)   # (b, H, W, T)
        return poses, a


class ConvMatrixCapsules(_Routed):
    """Capsule grid (b, H, W, T_in, 16) -> (b, H', W', T_out, 16): KxK windows, EM routing per window."""

    def __init__(self, in_types: int, out_types: int, kernel: int = 3, stride: int = 2,
                 iterations: int = 3, final_lambda: float = FINAL_LAMBDA):
        super().__init__(out_types, iterations, final_lambda)
        self.in_types, self.out_types, self.kernel, self.stride = in_types, out_types, kernel, stride
        self.weight = nn.Parameter(W_STD * torch.randn(kernel * kernel * in_types, out_types, 4, 4))

    def votes(self, poses: torch.Tensor, a: torch.Tensor):
        """-> votes (b*H'*W', K*K*T_in, T_out, 16), activations (b*H'*W', K*K*T_in), (H', W')."""
        b, H, W, T, _ = poses.shape
        K, s = self.kernel, self.stride
        cols = F.unfold(poses.permute(0, 3, 4, 1, 2).reshape(b, T * 16, H, W), K, stride=s)  # (b, T*16*K*K, L)
        L = cols.shape[-1]
        Ho, Wo = (H - K) // s + 1, (W - K) // s + 1
        M = cols.view(b, T, 16, K * K, L).permute(0, 4, 3, 1, 2).reshape(b * L, K * K * T, 4, 4)  # (n, N_in, 4, 4)
        acts = F.unfold(a.permute(0, 3, 1, 2), K, stride=s)         # (b, T*K*K, L)
        acts = acts.view(b, T, K * K, L).permute(0, 3, 2, 1).reshape(b * L, K * K * T)  # (n, N_in)
        V = torch.einsum("nipq,ijqr->nijpr", M, self.weight)        # V_ij = M_i W_ij: (n, N_in, T_out, 4, 4)
        return V.flatten(-2), acts, (Ho, Wo)                         # (n, N_in, T_out, 16)

    def forward(self, poses: torch.Tensor, a: torch.Tensor):
        b = poses.shape[0]
        V, acts, (Ho, Wo) = self.votes(poses, a)
        mu, a_out = self.route(V, acts)                             # (n, T_out, 16), (n, T_out)
        return mu.view(b, Ho, Wo, self.out_types, 16), a_out.view(b, Ho, Wo, self.out_types)


class ClassMatrixCapsules(_Routed):
    """Capsule grid (b, H, W, T, 16) -> class poses (b, C, 16) and activations (b, C)."""

    def __init__(self, in_types: int, classes: int = 10, iterations: int = 3, final_lambda: float = FINAL_LAMBDA):
        super().__init__(classes, iterations, final_lambda)
        self.in_types, self.classes = in_types, classes
        self.weight = nn.Parameter(W_STD * torch.randn(in_types, classes, 4, 4))

    def votes(self, poses: torch.Tensor, a: torch.Tensor):
        """-> votes (b, H*W*T, C, 16) with coordinate addition, activations
        (b, H*W*T)."""
        b, H, W, T, _ = poses.shape
        M = poses.view(b, H, W, T, 4, 4)
        # (b, H, W, T, C, 4, 4)
        V = torch.einsum("bxytpq,tjqr->bxytjpr", M, self.weight)
        # centres, scaled to (0, 1)
        rows = (torch.arange(H, device=V.device, dtype=V.dtype) + 0.5) / H
        cols = (torch.arange(W, device=V.device, dtype=V.dtype) + 0.5) / W
        shift = torch.zeros(H, W, 4, 4, device=V.device, dtype=V.dtype)
        shift[:, :, 0, 3] = rows.view(H, 1)      # first two entries of the last column
        shift[:, :, 1, 3] = cols.view(1, W)
        V = V + shift.view(1, H, W, 1, 1, 4, 4)  # coordinate addition
        return V.reshape(b, H * W * T, self.classes, 16), a.reshape(b, H * W * T)

    def forward(self, poses: torch.Tensor, a: torch.Tensor, return_history: bool = False):
        V, acts = self.votes(poses, a)                              # (b, N_in, C, 16), (b, N_in)
        return self.route(V, acts, return_history)


class MatrixCapsNet(nn.Module):
    """Images (b, 1, 28, 28) -> class activations (b, C) in (0, 1), the scores."""

    def __init__(self, config: MatrixCapsNetConfig = MatrixCapsNetConfig(), **overrides):
        super().__init__()
        self.config = c = replace(config, **overrides)
        if c.image_size < 9 or not c.conv_caps:
            raise ValueError(f"MatrixCapsNet needs image_size >= 9 and at least one conv_caps layer, got {c}")
        if c.stem not in STEMS or (c.stem == "su" and (c.A % 2 or c.image_size < 12)):
            raise ValueError(f"MatrixCapsNet: stem must be one of {STEMS} ('su' needs an even A and "
                             f"image_size >= 12), got {c}")
        self.conv1 = nn.Conv2d(1, c.A, 5, stride=2) if c.stem == "conv" else ConvStack(1, c.A // 2)  # the stem
        self.primary = PrimaryMatrixCapsules(c.A, c.B)
        types, layers = c.B, []
        for out_types, kernel, stride in c.conv_caps:
            layers.append(ConvMatrixCapsules(types, out_types, kernel, stride, c.iterations, c.final_lambda))
            types = out_types
        self.conv_caps = nn.ModuleList(layers)
        self.class_caps = ClassMatrixCapsules(types, c.num_classes, c.iterations, c.final_lambda)

    def _check(self, x) -> None:
        n = self.config.image_size
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or tuple(x.shape[1:]) != (1, n, n):
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"MatrixCapsNet expects images (batch, 1, {n}, {n}), got {got}")

    def grid(self, x: torch.Tensor):
        """Images -> the last convolutional capsule grid: poses (b, H, W, T, 16), activations (b, H, W, T)."""
        self._check(x)
        poses, a = self.primary(F.relu(self.conv1(x)))              # (b, 12, 12, B, 16), (b, 12, 12, B) ("su": 8x8)
        for layer in self.conv_caps:
            poses, a = layer(poses, a)                              # (b, 5, 5, C, 16), (b, 5, 5, C)
        return poses, a

    def capsules(self, x: torch.Tensor, return_history: bool = False):
        """Images -> class poses (b, C, 16), activations (b, C) [, R history of the class layer]."""
        return self.class_caps(*self.grid(x), return_history)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.capsules(x)[1]                                  # (b, C)

    def routing_inputs(self, x: torch.Tensor) -> List[Tuple[_Routed, torch.Tensor, torch.Tensor]]:
        """(layer, votes, activations) of every routed layer for images x (for timing routing alone)."""
        self._check(x)
        out = []
        with torch.no_grad():
            poses, a = self.primary(F.relu(self.conv1(x)))
            for layer in self.conv_caps:
                V, acts, _ = layer.votes(poses, a)
                out.append((layer, V, acts))
                poses, a = layer(poses, a)
            out.append((self.class_caps, *self.class_caps.votes(poses, a)))
        return out
