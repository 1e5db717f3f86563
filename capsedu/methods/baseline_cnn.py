"""The convolutional baseline of Sabour et al. (2017), for chapter 9.

- ``BaselineConfig``: three 5x5 convolutions (256, 256, 128 channels, stride 1, "same"
  padding), two dense layers (328, 192) with dropout, then 10 class scores; as in the paper.
- ``BaselineCNN``: that network, optionally with 2x2 max pooling after chosen convolutions.
  Without pooling on 28x28 digits it is the paper's 35.4M-parameter MNIST baseline; the
  affNIST comparison used "a CNN of similar size" to CapsNet "with MaxPooling and DropOut",
  which ``BaselineConfig.affnist()`` builds: the same layers, pooling after the first two
  convolutions, 6.7M parameters on a 40x40 canvas (CapsNet there: 11.2M without its decoder).
- By default the scores are sigmoids in (0, 1), trained with the margin loss like CapsNet's
  lengths (``capsedu.training.loop.fit(loss="margin")``), so the two models differ in architecture
  only: Gu, Tresp & Hu (CVPR 2021)'s "enhanced" ConvNet, not the paper's baseline. With
  ``logits=True`` the last layer's outputs are returned as they are (no sigmoid), for softmax
  cross-entropy (``fit(loss="cross_entropy")``): the paper's own training of its baseline. The
  option adds or removes no weight, and both draw the same initial weights from the same seed.
  Weights start with He initialisation (PyTorch's default leaves this deep ReLU stack's
  sigmoids stuck near 0.5 for the first hundreds of steps).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Tuple

import torch
from torch import nn

__all__ = ["BaselineConfig", "BaselineCNN"]


def _positive_ints(name, values, allow_empty=False):
    if not isinstance(values, tuple) or (not values and not allow_empty) or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
        raise ValueError(f"{name} must be a tuple of positive ints, got {values!r}")


@dataclass(frozen=True)
class BaselineConfig:
    """The paper's baseline CNN; change fields for the smaller versions the CPU presets train."""
    image_size: Tuple[int, int] = (28, 28)
    in_channels: int = 1
    channels: Tuple[int, ...] = (256, 256, 128)
    kernel: int = 5
    pool_after: Tuple[int, ...] = ()     # 1-based indices of the convolutions followed by 2x2 max pooling
    hidden: Tuple[int, ...] = (328, 192)
    dropout: float = 0.5
    num_classes: int = 10
    logits: bool = False                 # True: raw class scores for cross-entropy (no sigmoid)

    def __post_init__(self):
        if isinstance(self.image_size, int):
            object.__setattr__(self, "image_size", (self.image_size, self.image_size))
        _positive_ints("image_size", tuple(self.image_size))
        _positive_ints("channels", self.channels)
        _positive_ints("hidden", self.hidden, allow_empty=True)
        _positive_ints("pool_after", self.pool_after, allow_empty=True)
        for name in ("in_channels", "kernel", "num_classes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.kernel % 2 == 0:
            raise ValueError(f"kernel must be odd (for 'same' padding), got {self.kernel}")
        if any(p > len(self.channels) for p in self.pool_after):
            raise ValueError(f"pool_after holds convolution numbers 1..{len(self.channels)}, got {self.pool_after}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be a number in [0, 1), got {self.dropout!r}")
        if not isinstance(self.logits, bool):
            raise ValueError(f"logits must be True or False, got {self.logits!r}")
        if min(self.feature_grid) < 1:
            raise ValueError(f"image_size {self.image_size} is too small for {len(self.pool_after)} poolings")

    @classmethod
    def affnist(cls, image_size=40, **changes) -> "BaselineConfig":
        """The paper's layers with 2x2 max pooling after convolutions 1 and 2 (the affNIST baseline)."""
        return replace(cls(image_size=image_size, pool_after=(1, 2)), **changes)

    @property
    def feature_grid(self) -> Tuple[int, int]:
        """Height and width after the convolutions ('same' padding) and the poolings."""
        h, w = self.image_size
        for _ in self.pool_after:
            h, w = h // 2, w // 2
        return h, w


class BaselineCNN(nn.Module):
    """Convolutions (ReLU, optional pooling) -> dense layers (ReLU, dropout) -> 10 sigmoid scores
    (``logits=True``: the 10 scores before the sigmoid)."""

    def __init__(self, config: BaselineConfig = None, **changes):
        super().__init__()
        self.config = c = replace(config or BaselineConfig(), **changes)
        layers, width = [], c.in_channels
        for k, out in enumerate(c.channels, start=1):
            layers += [nn.Conv2d(width, out, c.kernel, padding=c.kernel // 2), nn.ReLU(inplace=True)]
            if k in c.pool_after:
                layers.append(nn.MaxPool2d(2))
            width = out
        self.features = nn.Sequential(*layers)
        h, w = c.feature_grid
        sizes = [width * h * w, *c.hidden]
        head = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            head += [nn.Linear(a, b), nn.ReLU(inplace=True), nn.Dropout(c.dropout)]
        last = [] if c.logits else [nn.Sigmoid()]                  # after every weight: the same layer numbers
        self.head = nn.Sequential(*head, nn.Linear(sizes[-1], c.num_classes), *last)
        for m in self.modules():  # He initialisation: PyTorch's default shrinks the signal through ReLU layers
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.config
        want = (c.in_channels, *c.image_size)
        if not isinstance(x, torch.Tensor) or x.dim() != 4 or tuple(x.shape[1:]) != want:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"BaselineCNN expects images of shape (batch, {', '.join(map(str, want))}), got {got}")
        f = self.features(x)                                        # (B, 128, H', W')
        return self.head(f.flatten(1))                              # (B, 10) scores in (0, 1), or logits
