"""The tutorial code's CapsNet, re-created line for line in behaviour (chapter 11's before/after run).

The PyTorch code printed with the tutorial translation follows higgsfield's Capsule-Network-Tutorial.
This module does what that code does, pitfalls included, so that it can be trained beside
``capsedu.core.CapsNet`` on the same data and budget. The numbers are chapter 11's pitfalls:

1. the routing softmax has no ``dim``: on the (1, 1152, 10, 1) logits PyTorch picks dim 1, the inputs;
2. one set of logits for the whole batch, updated with the batch-mean agreement;
3. the margin loss without its squares;
4. the reconstruction loss is a mean over pixels (``MSELoss``) x 0.0005, against normalised images;
5. the decoder is masked by the predicted class, picked after a softmax over dim 0 (the batch);
6. the squash divides by the length: 0/0 at s = 0 (no epsilon);
7. W ~ N(0, 1);
8. the digit capsules are squashed element by element (the squared norm runs over an axis of size 1);
9. the primary capsules are ``view``ed across positions (a "capsule" is 8 numbers of one feature map).

The tutorial code also trains without shift augmentation and with a constant rate (Adam's
default); ``TUTORIAL_TRAINING`` records those settings. Do not use it for anything but the comparison.
"""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from capsedu.core.squashing import squash

__all__ = ["TutorialCapsNet", "tutorial_squash", "tutorial_routing", "tutorial_margin_loss", "tutorial_pick",
           "tutorial_loss", "TUTORIAL_TRAINING", "MNIST_MEAN", "MNIST_STD"]

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081   # transforms.Normalize((0.1307,), (0.3081,)) in the tutorial code
TUTORIAL_TRAINING = {"optimizer": "Adam, default rate 1e-3, constant", "batch_size": 100, "shift": 0,
                     "inputs": "normalised with MNIST's mean and std"}


def tutorial_squash(s: torch.Tensor) -> torch.Tensor:
    """Pitfall 6: |s|^2 s / ((1 + |s|^2) |s|) over the last axis, undefined at s = 0."""
    squared_norm = (s ** 2).sum(-1, keepdim=True)
    return squared_norm * s / ((1.0 + squared_norm) * torch.sqrt(squared_norm))


def tutorial_routing(u_hat: torch.Tensor, iterations: int = 3, softmax_dim: int = 1,
                     squash_fn=squash):
    """Pitfalls 1 and 2 alone, on predictions (B, N_in, N_out, D): ONE set of logits for
    the batch, raised by the batch-mean agreement, and the softmax over ``softmax_dim``
    (the tutorial's 1, the inputs; 2, the parents, fixes pitfall 1). Like the tutorial,
    it skips the unused last update."""
    b = u_hat.new_zeros(1, *u_hat.shape[1:3])       # (1, N_in, N_out): one per batch
    for r in range(iterations):
        c = torch.softmax(b, dim=softmax_dim)
        v = squash_fn((c.unsqueeze(-1) * u_hat).sum(dim=1))   # (B, N_out, D)
        if r < iterations - 1:
            b = b + (u_hat * v.unsqueeze(1)).sum(-1).mean(0, keepdim=True)  # batch mean
    return v


def tutorial_margin_loss(lengths: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Pitfall 3: the margin loss of lengths (B, 10) without its squares, a hinge."""
    T = F.one_hot(labels, 10).to(lengths.dtype)
    return (T * F.relu(0.9 - lengths) + 0.5 * (1.0 - T) * F.relu(lengths - 0.1)).sum(dim=1).mean()


def tutorial_pick(lengths: torch.Tensor) -> torch.Tensor:
    """Pitfall 5: the class the decoder is masked by, from lengths (B, 10). The tutorial softmaxes the
    (B, 10, 1) lengths without ``dim``: PyTorch then takes dim 0, the batch, before the argmax."""
    return _implicit_softmax(lengths.unsqueeze(-1)).squeeze(-1).argmax(dim=1)


def _implicit_softmax(x: torch.Tensor) -> torch.Tensor:
    """``F.softmax(x)`` without ``dim``, as the tutorial calls it: PyTorch's legacy choice (dim 0 for
    0-, 1- and 3-D tensors, else dim 1), without the deprecation warning it prints every step."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return F.softmax(x, dim=None, _stacklevel=5)


class TutorialCapsNet(nn.Module):
    """Conv 9x9 -> 8 convolutions viewed as 1,152 "capsules" -> routing -> decoder, as the tutorial code."""

    def __init__(self, iterations: int = 3):
        super().__init__()
        self.iterations = iterations
        self.conv1 = nn.Conv2d(1, 256, 9)
        self.primary = nn.ModuleList([nn.Conv2d(256, 32, 9, stride=2) for _ in range(8)])
        self.W = nn.Parameter(torch.randn(1, 1152, 10, 16, 8))                        # pitfall 7
        self.decoder = nn.Sequential(nn.Linear(160, 512), nn.ReLU(), nn.Linear(512, 1024), nn.ReLU(),
                                     nn.Linear(1024, 784), nn.Sigmoid())

    def capsules(self, x: torch.Tensor) -> torch.Tensor:
        """Digit capsules (B, 10, 16, 1) of normalised images (B, 1, 28, 28)."""
        B = x.size(0)
        h = F.relu(self.conv1(x))
        u = torch.stack([conv(h) for conv in self.primary], dim=1)                    # (B, 8, 32, 6, 6)
        u = tutorial_squash(u.view(B, 32 * 6 * 6, -1))                                # pitfall 9
        u = torch.stack([u] * 10, dim=2).unsqueeze(4)                                 # (B, 1152, 10, 8, 1)
        u_hat = torch.matmul(torch.cat([self.W] * B, dim=0), u)                       # (B, 1152, 10, 16, 1)
        b = x.new_zeros(1, 1152, 10, 1)                                               # pitfall 2: one set
        for r in range(self.iterations):
            c = torch.cat([_implicit_softmax(b)] * B, dim=0).unsqueeze(4)             # pitfall 1: over dim 1
            v = tutorial_squash((c * u_hat).sum(dim=1, keepdim=True))                 # pitfall 8: (.., 16, 1)
            if r < self.iterations - 1:
                a = torch.matmul(u_hat.transpose(3, 4), torch.cat([v] * 1152, dim=1))
                b = b + a.squeeze(4).mean(dim=0, keepdim=True)                        # pitfall 2: batch mean
        return v.squeeze(1)

    def forward(self, x: torch.Tensor):
        """(capsules (B, 10, 16, 1), reconstructions (B, 1, 28, 28), one-hot pick (B, 10)) as the tutorial."""
        v = self.capsules(x)
        pick = tutorial_pick(torch.sqrt((v ** 2).sum(2)).squeeze(-1))                 # pitfall 5
        masked = torch.eye(10, device=x.device).index_select(0, pick)
        rec = self.decoder((v * masked[:, :, None, None]).view(x.size(0), -1))
        return v, rec.view(-1, 1, 28, 28), masked


def tutorial_loss(v: torch.Tensor, rec: torch.Tensor, x_normalised: torch.Tensor, labels: torch.Tensor):
    """Pitfalls 3 and 4: hinge margin loss plus 0.0005 x the pixel-mean squared error to normalised images."""
    B = v.size(0)
    lengths = torch.sqrt((v ** 2).sum(dim=2, keepdim=True)).view(B, -1)
    return tutorial_margin_loss(lengths, labels) + 0.0005 * F.mse_loss(rec.view(B, -1), x_normalised.view(B, -1))
