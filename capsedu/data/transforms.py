"""Shifts and affine transformations: the paper's augmentation (chapters 5, 7) and chapter 9's test sets.

``shift_images`` is the one whole-pixel, zero-filled shift behind ``random_shift`` (the paper's
augmentation) and ``pad_and_shift`` (affNIST training: centred on a 40x40 canvas, then shifted);
``random_affine`` makes affNIST-style test digits (rotation, shear, per-axis scale, a translation
that keeps the ink on the canvas, all ranges times ``strength``). Vectorised, no loop over images:
shifts are two gathers, the affine maps one ``affine_grid`` + ``grid_sample`` per batch.
Coordinates are (x, y) pixel offsets from the canvas centre; ``A`` is the 2x2 linear part.
"""
from __future__ import annotations

import math
from typing import Dict, Tuple

import torch
import torch.nn.functional as F

__all__ = ["AFFINE_RANGES", "center_on_canvas", "pad_and_shift", "random_affine", "affine_test_set", "random_shift",
           "shift_images", "draw_ints"]

# The ranges at strength 1 (each is multiplied by ``strength``). They follow what is
# reported for affNIST (Tieleman): rotation up to 20 degrees, shear up to 0.2, scale
# 0.8-1.2 per axis, translation anywhere the digit still fits in the 40x40 box.
AFFINE_RANGES = {"rotation_deg": 20.0, "shear": 0.2, "scale": 0.2, "translation": "any that keeps the ink inside"}
INK = 0.05      # a pixel brighter than this counts as ink when finding the digit's bounding box
MARGIN = 1.0    # pixels kept free at the canvas edge (bilinear sampling spreads ink by up to one)


def _check_images(images, canvas: int, name: str = "images") -> None:
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or not images.is_floating_point():
        got = f"{tuple(images.shape)} {images.dtype}" if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"{name} must be float images of shape (B, C, H, W), got {got}")
    if isinstance(canvas, bool) or not isinstance(canvas, int) or canvas < max(images.shape[-2:]):
        raise ValueError(f"canvas must be an int of at least {max(images.shape[-2:])} (the image size), "
                         f"got {canvas!r}")


def _check_generator(generator) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")


def center_on_canvas(images: torch.Tensor, canvas: int = 40) -> torch.Tensor:
    """Digits (B, C, H, W) in the middle of an empty (B, C, canvas, canvas) canvas."""
    _check_images(images, canvas)
    H, W = images.shape[-2:]
    top, left = (canvas - H) // 2, (canvas - W) // 2
    return F.pad(images, (left, canvas - W - left, top, canvas - H - top))  # (B, C, canvas, canvas)


def pad_and_shift(images: torch.Tensor, canvas: int = 40, max_shift: int = 6, generator=None) -> torch.Tensor:
    """Each digit centred on a canvas, then shifted by its own random offset in [-max_shift, max_shift]
    per axis (drawn as one (B, 2) tensor of (x, y) pairs; ``random_shift`` draws (2, B) as (dy, dx)).

    With 28x28 digits, ``canvas=40`` and ``max_shift=6`` every 28x28 box lies wholly inside:
    the paper's "MNIST digit placed randomly on a black background of 40x40 pixels".
    """
    _check_images(images, canvas)
    _check_generator(generator)
    if isinstance(max_shift, bool) or not isinstance(max_shift, int) or not 0 <= max_shift < canvas:
        raise ValueError(f"max_shift must be an int in [0, {canvas - 1}], got {max_shift!r}")
    x = center_on_canvas(images, canvas)                            # (B, C, canvas, canvas)
    offsets = draw_ints(-max_shift, max_shift + 1, (len(x), 2), generator, x.device)  # (B, 2) whole pixels (x, y)
    return shift_images(x, offsets[:, 1], offsets[:, 0])             # (B, C, canvas, canvas)


def _uniform(n: int, cols: int, generator, device) -> torch.Tensor:
    """U(-1, 1) of shape (n, cols), drawn on the generator's device (reproducible), moved to ``device``."""
    gen_device = generator.device if generator is not None else device
    return (torch.rand(n, cols, generator=generator, device=gen_device) * 2 - 1).to(device)


def _ink_box(x: torch.Tensor) -> torch.Tensor:
    """Per image, the ink's bounding box as pixel-edge offsets from the centre: (B, 4) x0, x1, y0, y1."""
    B, _, H, W = x.shape
    ink = x.amax(dim=1) > INK                                       # (B, H, W)
    edges = []
    for axis, size in ((1, W), (2, H)):                             # columns hold x, rows hold y
        any_ink = ink.any(dim=axis)                                 # (B, size)
        first = any_ink.float().argmax(dim=1)                       # (B,) first index with ink
        last = size - 1 - any_ink.flip(1).float().argmax(dim=1)     # (B,) last index with ink
        empty = ~any_ink.any(dim=1)                                 # (B,) a blank image: a point at the centre
        centre = (size - 1) / 2
        lo = torch.where(empty, torch.full_like(first, centre + 0.5), first.float()) - centre - 0.5
        hi = torch.where(empty, torch.full_like(first, centre - 0.5), last.float()) - centre + 0.5
        edges += [lo, hi]
    return torch.stack(edges, dim=1)                                # (B, 4)


def random_affine(images: torch.Tensor, strength: float = 1.0, canvas: int = 40,
                  generator=None, return_params: bool = False):
    """affNIST-style transformed digits (B, C, canvas, canvas), each with its own random
    affine map.

    At ``strength`` s in [0, 1]: rotation uniform in +-20s degrees, shear (x += shear *
    y) in +-0.2s, scale of each axis in [1 - 0.2s, 1 + 0.2s], and a translation drawn
    uniformly from the range that keeps the transformed ink box at least one pixel
    inside the canvas, times s. s = 0 returns the digits centred on the canvas,
    unchanged. With ``return_params`` also a dict of (B,) tensors: rotation_deg, shear,
    scale_x, scale_y, shift_x, shift_y (pixels)."""
    if (isinstance(strength, bool) or not isinstance(strength, (int, float))
            or not 0 <= strength <= 1):
        raise ValueError(f"strength must be a number in [0, 1], got {strength!r}")
    _check_generator(generator)
    x = center_on_canvas(images, canvas)  # (B, C, canvas, canvas)
    B, device = x.shape[0], x.device
    u = _uniform(B, 6, generator, device)  # (B, 6): one draw per parameter
    angle = u[:, 0] * math.radians(AFFINE_RANGES["rotation_deg"]) * strength  # (B,)
    shear = u[:, 1] * AFFINE_RANGES["shear"] * strength  # (B,)
    scale = 1 + u[:, 2:4] * AFFINE_RANGES["scale"] * strength  # (B, 2): x and y
    cos, sin = angle.cos(), angle.sin()
    zero, one = torch.zeros_like(angle), torch.ones_like(angle)
    rotate = torch.stack([cos, -sin, sin, cos], dim=1).view(B, 2, 2)  # (B, 2, 2)
    shear_m = torch.stack([one, shear, zero, one], dim=1).view(B, 2, 2)  # (B, 2, 2)
    # (B, 2, 2): scale, then shear, then rotate
    A = rotate @ shear_m @ torch.diag_embed(scale)

    # Where the ink box's four corners land; then the translations that keep them
    # inside.
    box = _ink_box(x)  # (B, 4)
    # (B, 2, 4) (x, y) per corner
    corners = torch.stack([box[:, [0, 0, 1, 1]], box[:, [2, 3, 2, 3]]], dim=1)
    moved = A @ corners  # (B, 2, 4)
    room = canvas / 2 - MARGIN  # centre to usable edge, pixels
    # (B, 2) allowed shift range per axis
    lo, hi = -room - moved.amin(dim=2), room - moved.amax(dim=2)
    too_big = lo > hi  # cannot fit: centre the box instead
    mid = (lo + hi) / 2
    lo, hi = torch.where(too_big, mid, lo), torch.where(too_big, mid, hi)
    # (B, 2), in [lo, hi] when 0 is
    shift = (lo + (hi - lo) * (u[:, 4:6] + 1) / 2) * strength
    shift = torch.maximum(torch.minimum(shift, hi), lo)  # (B, 2)

    # affine_grid maps OUTPUT coordinates to INPUT ones: p_in = A^-1 (p_out - t), in
    # units of half the canvas (align_corners=False: offsets from the centre times 2 /
    # canvas).
    inverse = torch.linalg.inv(A)  # (B, 2, 2)
    offset = -(inverse @ shift.unsqueeze(-1)) * (2 / canvas)  # (B, 2, 1)
    theta = torch.cat([inverse, offset], dim=2).to(x.dtype)  # (B, 2, 3)
    # (B, canvas, canvas, 2)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    # (B, C, canvas, canvas)
    out = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros",
                        align_corners=False)
    if not return_params:
        return out
    params: Dict[str, torch.Tensor] = {
        "rotation_deg": torch.rad2deg(angle), "shear": shear,
        "scale_x": scale[:, 0], "scale_y": scale[:, 1],
        "shift_x": shift[:, 0], "shift_y": shift[:, 1]}
    return out, params


def affine_test_set(x: torch.Tensor, y: torch.Tensor, strength: float = 1.0, canvas: int = 40,
                    seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """(images (N, 1, canvas, canvas), labels (N,)): every test digit transformed once, drawn from ``seed``.

    The generator lives on the CPU, so the same seed gives the same set on any device.
    """
    _check_images(x, canvas, "x")
    if not isinstance(y, torch.Tensor) or y.shape != (len(x),):
        raise ValueError(f"y must be a tensor of {len(x)} labels, got {getattr(y, 'shape', type(y))}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    generator = torch.Generator().manual_seed(seed)
    return random_affine(x, strength, canvas, generator), y.clone()


# ---------------------------------------------------------------- augmentation
def random_shift(x, max_shift=2, generator=None):
    """Shift each image of x (B,C,H,W) by its own random (dy, dx) in [-max_shift, max_shift], zero padded."""
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"x must be a tensor of shape (B, C, H, W), got {getattr(x, 'shape', type(x))}")
    B, C, H, W = x.shape
    m = max_shift
    if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < min(H, W):
        raise ValueError(f"max_shift must be an int in [0, {min(H, W) - 1}], got {m!r}")
    dy, dx = draw_ints(-m, m + 1, (2, B), generator, x.device)  # (B,) each
    return shift_images(x, dy, dx)  # (B, C, H, W)


def shift_images(x: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor) -> torch.Tensor:
    """x (B, C, H, W) with image b moved down by dy[b] and right by dx[b] whole pixels (negative: up, left).

    Output pixel (i, j) is input pixel (i - dy, j - dx), or 0 where that lies outside the image:
    exact copies of pixels (two gathers), the same shift for every channel. dy, dx: integer (B,).
    """
    B, C, H, W = x.shape
    rows = torch.arange(H, device=x.device) - dy.to(x.device)[:, None]  # (B, H) source row of each row
    cols = torch.arange(W, device=x.device) - dx.to(x.device)[:, None]  # (B, W) source column of each column
    out = x.gather(2, rows.clamp(0, H - 1)[:, None, :, None].expand(B, C, H, W))   # (B, C, H, W)
    out = out.gather(3, cols.clamp(0, W - 1)[:, None, None, :].expand(B, C, H, W))  # (B, C, H, W)
    outside = ((rows < 0) | (rows >= H))[:, None, :, None] | ((cols < 0) | (cols >= W))[:, None, None, :]
    return out.masked_fill(outside, 0)  # (B, C, H, W)


def draw_ints(low, high, size, generator, device):
    """torch.randint on the generator's device (reproducible), moved to `device`."""
    gen_device = generator.device if generator is not None else device
    return torch.randint(low, high, size, generator=generator, device=gen_device).to(device)
