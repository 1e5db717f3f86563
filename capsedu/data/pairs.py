"""Images of two digits: distinct pairs, stacked side by side or on top of each other, or overlaid.

Used by Su's two-digit experiment (chapter 7) and the paper's MultiMNIST (chapter 9).
"""
from __future__ import annotations

import torch

from capsedu.data.transforms import center_on_canvas, draw_ints, pad_and_shift, random_shift

__all__ = ["distinct_pairs", "two_digit_pairs", "overlapping_pairs"]




# ---------------------------------------------------------------- two-digit composites
def distinct_pairs(x, y, n, generator):
    """Indices (i, j) of n random pairs whose labels differ; resample j until they do."""
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"x must be a tensor of shape (N, C, H, W), got {getattr(x, 'shape', type(x))}")
    if not isinstance(y, torch.Tensor) or y.shape != (len(x),) or y.dtype.is_floating_point:
        raise ValueError(f"y must be integer labels of shape ({len(x)},), got {getattr(y, 'shape', type(y))}")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if len(y) == 0 or y.min() < 0 or y.max() > 9 or y.unique().numel() < 2:
        raise ValueError("y must hold labels 0-9 of at least two different classes")
    i = draw_ints(0, len(x), (n,), generator, x.device)
    j = draw_ints(0, len(x), (n,), generator, x.device)
    same = y[i] == y[j]
    while same.any():  # each round redraws all clashing pairs at once
        j[same] = draw_ints(0, len(x), (int(same.sum()),), generator, x.device)
        same = y[i] == y[j]
    targets = torch.zeros(n, 10, device=x.device)
    targets[torch.arange(n, device=x.device), y[i]] = 1.0
    targets[torch.arange(n, device=x.device), y[j]] = 1.0  # (n, 10), exactly two ones
    return i, j, targets


def two_digit_pairs(x, y, n, layout="vertical", generator=None):
    """n pairs of distinct-class digits: vertical (n,C,2H,W), as in Su's script, or horizontal (n,C,H,2W)."""
    if layout not in ("vertical", "horizontal"):
        raise ValueError(f"layout must be 'vertical' or 'horizontal', got {layout!r}")
    i, j, targets = distinct_pairs(x, y, n, generator)
    images = torch.cat([x[i], x[j]], dim=2 if layout == "vertical" else 3)  # (n,C,2H,W) or (n,C,H,2W)
    return images, targets


def overlapping_pairs(x, y, n, canvas=36, max_shift=4, generator=None, separate=False):
    """n MultiMNIST-style images: two distinct-class digits, each centred on a canvas x canvas canvas and
    shifted by up to max_shift px, combined as clamp(a + b, max=1) (add and clip, as in Sabour et al.'s code).

    Returns (images, targets (n, 10) multi-hot). images: (n, C, canvas, canvas), the overlay; with
    ``separate`` (chapter 9's MultiMNIST, whose decoder redraws each digit) (n, 3C, canvas, canvas):
    the overlay, then the lower-class digit and the higher-class digit alone. The two draw their
    shifts as the chapters' stored runs did: the overlay alone as ``random_shift`` does, the digits
    in class order as ``pad_and_shift`` does; so one seed gives other shifts in the two settings.
    """
    i, j, targets = distinct_pairs(x, y, n, generator)               # (n,), (n,), (n, 10)
    if separate:
        swap = y[i] > y[j]
        i, j = torch.where(swap, j, i), torch.where(swap, i, j)        # (n,) each: lower class first
        a = pad_and_shift(x[i], canvas, max_shift, generator)        # (n, C, canvas, canvas)
        b = pad_and_shift(x[j], canvas, max_shift, generator)        # (n, C, canvas, canvas)
    else:
        a = random_shift(center_on_canvas(x[i], canvas), max_shift, generator)  # (n, C, canvas, canvas)
        b = random_shift(center_on_canvas(x[j], canvas), max_shift, generator)  # (n, C, canvas, canvas)
    overlay = (a + b).clamp(max=1.0)                                 # (n, C, canvas, canvas)
    return (torch.cat([overlay, a, b], dim=1) if separate else overlay), targets
