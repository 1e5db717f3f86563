"""Floor 4: the networks.

- ``CapsNetConfig``: the paper's MNIST hyperparameters in one place.
- ``CapsNet``: conv 256@9x9 -> 32x8-D primary capsules -> 10x16-D digit capsules
  (dynamic routing) -> ``Decoder`` (512-1024-784, sigmoid), Sabour et al. (2017).
- ``ConvStack``, ``PoolingClassifier``, ``CapsuleClassifier``: the two ~270k-parameter
  models of Su Jianlin's two-digit experiment (same convolutions, different heads).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .functional import as_multi_hot, safe_norm
from .layers import DenseCapsules, PrimaryCapsules, SharedCapsules

__all__ = ["CapsNetConfig", "CapsNet", "Decoder", "ConvStack", "PoolingClassifier", "CapsuleClassifier"]


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
    """Masked digit capsules (B, C, D) -> reconstructed images (B, *out_shape), pixels in (0, 1)."""

    def __init__(self, num_classes=10, capsule_dim=16, hidden: Sequence[int] = (512, 1024), out_shape=(1, 28, 28)):
        super().__init__()
        self.num_classes, self.out_shape = num_classes, tuple(out_shape)
        sizes = [num_classes * capsule_dim, *hidden]
        layers = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU(inplace=True)]
        layers += [nn.Linear(sizes[-1], int(torch.tensor(self.out_shape).prod())), nn.Sigmoid()]
        self.net = nn.Sequential(*layers)

    def forward(self, capsules: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Keep only the capsules selected by ``mask`` (B, C) (zeros elsewhere), then decode."""
        masked = capsules * mask.to(capsules.dtype).unsqueeze(-1)  # (B, C, D)
        return self.net(masked.flatten(1)).view(-1, *self.out_shape)


class CapsNet(nn.Module):
    """The paper's CapsNet; ``forward(x, labels=None)`` -> (digit capsules, lengths, reconstructions)."""

    def __init__(self, config: Optional[CapsNetConfig] = None, **overrides):
        super().__init__()
        config = config or CapsNetConfig()
        unknown = set(overrides) - {f.name for f in fields(CapsNetConfig)}
        if unknown:
            raise TypeError(f"CapsNet: unknown option(s) {sorted(unknown)}; see CapsNetConfig")
        if isinstance(overrides.get("image_size"), int):
            overrides["image_size"] = (overrides["image_size"],) * 2
        self.config = c = replace(config, **overrides)
        if min(c.primary_grid) < 1:
            raise ValueError(f"image_size {c.image_size} is too small for two {c.conv_kernel}x{c.conv_kernel} convolutions")
        self.conv1 = nn.Conv2d(c.in_channels, c.conv_channels, c.conv_kernel)
        self.primary = PrimaryCapsules(c.conv_channels, c.primary_types, c.primary_dim,
                                       c.primary_kernel, c.primary_stride, c.squash_k)
        self.digits = DenseCapsules(c.num_primary, c.primary_dim, c.num_classes, c.digit_dim,
                                    c.iterations, c.routing, c.squash_k)
        self.decoder = Decoder(c.num_classes, c.digit_dim, c.decoder_hidden, (c.in_channels, *c.image_size))

    def _check_images(self, x) -> None:
        c = self.config
        want = (c.in_channels, *c.image_size)
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"CapsNet expects a torch.Tensor of images, got {type(x).__name__}")
        if x.dim() != 4 or tuple(x.shape[1:]) != want:
            raise ValueError(f"CapsNet expects images of shape (batch, {', '.join(map(str, want))}), got {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"CapsNet expects floating-point images in [0, 1], got dtype {x.dtype}")

    def capsules(self, x: torch.Tensor, return_history: bool = False):
        """Images -> digit capsules (B, C, D) [, routing history], without the decoder."""
        self._check_images(x)
        features = F.relu(self.conv1(x))                            # (B, 256, 20, 20)
        primary = self.primary(features)                            # (B, 1152, 8)
        return self.digits(primary, return_history)                 # (B, 10, 16)

    def forward(self, x: torch.Tensor, labels: Optional[torch.Tensor] = None):
        digit = self.capsules(x)                                    # (B, 10, 16)
        lengths = safe_norm(digit, dim=-1)                          # (B, 10)
        if labels is None:  # inference: keep the longest capsule
            mask = F.one_hot(lengths.argmax(dim=1), self.config.num_classes)
        else:               # training: keep the true class(es), never the prediction
            mask = as_multi_hot(labels, x.shape[0], self.config.num_classes, x.device)
        return digit, lengths, self.decoder(digit, mask)            # recon (B, 1, 28, 28)


class ConvStack(nn.Module):
    """Su's feature extractor: conv64-conv64-avgpool2-conv128-conv128 (3x3, ReLU), any image size."""

    def __init__(self, in_channels: int = 1, width: int = 64):
        super().__init__()
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
