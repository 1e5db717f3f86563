"""CapsNet, the paper's network.

- ``CapsNetConfig``: the paper's MNIST hyperparameters in one place.
- ``CapsNet``: conv 256@9x9 -> 32x8-D primary capsules -> 10x16-D digit capsules
  (dynamic routing) -> ``Decoder`` (512-1024-784, sigmoid), Sabour et al. (2017).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from capsedu.core.checks import as_multi_hot, check_images, check_sizes
from capsedu.core.layers import DenseCapsules, PrimaryCapsules
from capsedu.core.routing import ROUTING_MODES
from capsedu.core.squashing import safe_norm

__all__ = ["CapsNetConfig", "CapsNet", "Decoder"]

MAX_PARAMETERS = 1_000_000_000  # about 4 GB of float32 weights: more is a typo, not an allocation to try


def _conv_out(size: int, kernel: int, stride: int = 1) -> int:
    return (size - kernel) // stride + 1


@dataclass(frozen=True)
class CapsNetConfig:
    """Sabour et al. (2017), MNIST. Change any field to get a variant."""
    image_size: Tuple[int, int] = (28, 28)
    in_channels: int = 1
    conv_channels: int = 256
    conv_kernel: int = 9
    primary_types: int = 32
    primary_dim: int = 8
    primary_kernel: int = 9
    primary_stride: int = 2
    num_classes: int = 10
    digit_dim: int = 16
    iterations: int = 3
    routing: str = "hinton"
    squash_k: float = 1.0
    decoder_hidden: Tuple[int, ...] = (512, 1024)

    def __post_init__(self):
        """Every field checked once, here, so a bad value fails at construction with its name."""
        size = self.image_size
        object.__setattr__(self, "image_size", tuple(size) if isinstance(size, (tuple, list)) else (size, size))
        object.__setattr__(self, "decoder_hidden", tuple(self.decoder_hidden))  # lists from JSON back to tuples
        if self.routing not in ROUTING_MODES:
            raise ValueError(f"CapsNetConfig: unknown routing mode {self.routing!r}; expected one of {ROUTING_MODES}")
        if len(self.image_size) != 2:
            raise ValueError(f"CapsNetConfig: image_size must be (height, width), got {self.image_size!r}")
        check_sizes("CapsNetConfig", self.squash_k, **{f.name: getattr(self, f.name) for f in fields(self)
                                                       if f.name not in ("routing", "squash_k")})
        if min(self.primary_grid) < 1:
            raise ValueError(f"CapsNetConfig: image_size {self.image_size} is too small for a "
                             f"{self.conv_kernel}x{self.conv_kernel} and a {self.primary_kernel}x"
                             f"{self.primary_kernel} convolution")
        if self.parameter_count > MAX_PARAMETERS:
            raise ValueError(f"CapsNetConfig: these sizes make {self.parameter_count:,} parameters, more than "
                             f"the {MAX_PARAMETERS:,} capsedu builds (the paper's CapsNet has 8,215,568)")

    @property
    def parameter_count(self) -> int:
        """Trainable parameters of ``CapsNet(self)``, from the sizes alone (8,215,568 for the paper)."""
        conv = self.in_channels * self.conv_channels * self.conv_kernel ** 2 + self.conv_channels
        primary_out = self.primary_types * self.primary_dim
        primary = self.conv_channels * primary_out * self.primary_kernel ** 2 + primary_out
        digits = self.num_primary * self.num_classes * self.digit_dim * self.primary_dim
        sizes = [self.num_classes * self.digit_dim, *self.decoder_hidden,
                 self.in_channels * self.image_size[0] * self.image_size[1]]
        decoder = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
        return conv + primary + digits + decoder

    @property
    def primary_grid(self) -> Tuple[int, int]:
        """Height and width of the primary-capsule grid (6 x 6 for the paper)."""
        h, w = (_conv_out(s, self.conv_kernel) for s in self.image_size)
        return _conv_out(h, self.primary_kernel, self.primary_stride), _conv_out(w, self.primary_kernel, self.primary_stride)

    @property
    def num_primary(self) -> int:
        """Number of primary capsules: 32 * 6 * 6 = 1,152 for the paper."""
        h, w = self.primary_grid
        return self.primary_types * h * w


class Decoder(nn.Module):
    """Masked digit capsules (B, C, D) -> images (B, *out_shape), pixels in (0, 1)."""

    def __init__(self, num_classes=10, capsule_dim=16,
                 hidden: Sequence[int] = (512, 1024), out_shape=(1, 28, 28)):
        super().__init__()
        self.num_classes, self.out_shape = num_classes, tuple(out_shape)
        sizes = [num_classes * capsule_dim, *hidden]
        layers = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU(inplace=True)]
        layers += [nn.Linear(sizes[-1], math.prod(self.out_shape)), nn.Sigmoid()]
        self.net = nn.Sequential(*layers)

    def forward(self, capsules: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Keep the capsules selected by ``mask`` (B, C), zero the rest, and decode."""
        masked = capsules * mask.to(capsules.dtype).unsqueeze(-1)  # (B, C, D)
        return self.net(masked.flatten(1)).view(-1, *self.out_shape)


class CapsNet(nn.Module):
    """The paper's CapsNet: ``forward(x, labels=None)`` -> (digit capsules, lengths,
    reconstructions)."""

    def __init__(self, config: Optional[CapsNetConfig] = None, **overrides):
        super().__init__()
        if config is not None and not isinstance(config, CapsNetConfig):
            raise TypeError("CapsNet: config must be a CapsNetConfig or None (options "
                            f"go by keyword: CapsNet(routing='su')), got {config!r}")
        config = config or CapsNetConfig()
        unknown = set(overrides) - {f.name for f in fields(CapsNetConfig)}
        if unknown:
            raise TypeError(f"CapsNet: unknown option(s) {sorted(unknown)}; "
                            "see CapsNetConfig")
        self.config = c = replace(config, **overrides)     # checked by CapsNetConfig
        self.conv1 = nn.Conv2d(c.in_channels, c.conv_channels, c.conv_kernel)
        self.primary = PrimaryCapsules(c.conv_channels, c.primary_types, c.primary_dim,
                                       c.primary_kernel, c.primary_stride, c.squash_k)
        self.digits = DenseCapsules(c.num_primary, c.primary_dim, c.num_classes,
                                    c.digit_dim, c.iterations, c.routing, c.squash_k)
        self.decoder = Decoder(c.num_classes, c.digit_dim, c.decoder_hidden,
                               (c.in_channels, *c.image_size))

    def capsules(self, x: torch.Tensor, return_history: bool = False):
        """Images (B, C, H, W) -> digit capsules (B, 10, 16) [, routing history]."""
        c = self.config
        check_images(x, "CapsNet: images", (c.in_channels, *c.image_size))
        if not torch.is_autocast_enabled(x.device.type):  # engineering: dtypes
            x = x.to(self.conv1.weight.dtype)    # e.g. float64 images, float32 model
        features = F.relu(self.conv1(x))             # (B, 256, 20, 20)
        primary = self.primary(features)             # (B, 1152, 8)
        return self.digits(primary, return_history)  # (B, 10, 16)

    def forward(self, x: torch.Tensor, labels: Optional[torch.Tensor] = None):
        """Images -> (digit capsules (B, 10, 16), their lengths (B, 10),
        reconstructions (B, 1, 28, 28))."""
        digit = self.capsules(x)            # (B, 10, 16)
        lengths = safe_norm(digit, dim=-1)  # |v_j|: (B, 10)
        if labels is None:  # inference: the decoder sees the longest capsule
            mask = F.one_hot(lengths.argmax(dim=1), self.config.num_classes)
        else:               # training: the true class(es), never the prediction
            mask = as_multi_hot(labels, x.shape[0], self.config.num_classes, x.device)
        return digit, lengths, self.decoder(digit, mask)
