"""How PrimaryCaps turns convolution channels into capsules, drawn from a config.

- ``primary_reshape_figure(config)``: the conv output (T*D channels on an H x W grid), the
  same numbers viewed as T capsule types of D dimensions on that grid, and the T*H*W
  capsules of D numbers that DigitCaps receives; every size is read from ``config``.
"""
from __future__ import annotations

from typing import Optional

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

from capsedu.core.capsnet import CapsNetConfig

__all__ = ["primary_reshape_figure"]

FONT = 16        # 14 pt at the smallest: 10 px once the 14-inch figure fits the column


def _type_colour(t: int, types: int):
    return plt.get_cmap("tab10")(t % 9)  # 9 in turn: neighbours, and types 0, 1, 31, all differ


def _channels(ax, x0, types, dim, side):
    """Left: the channel axis of the conv output, one band of D channels per capsule type."""
    height = 6.0
    for t in range(types):
        ax.add_patch(Rectangle((x0, height - height * (t + 1) / types), 1.2, height / types,
                               fc=_type_colour(t, types), ec="white", lw=0.5))  # type 0 on top, as right
    ax.add_patch(Rectangle((x0, 0), 1.2, height, fill=False, lw=1))
    ax.text(x0 + 0.6, height + 0.35, f"conv output\n{types * dim} channels × {side}×{side}", ha="center",
            va="bottom", fontsize=FONT)
    ax.text(x0 + 1.35, height - height / types / 2, f"channels 0–{dim - 1}: type 0", va="center",
            fontsize=FONT - 1)
    ax.text(x0 + 1.35, height / types / 2, f"channels {types * dim - dim}–{types * dim - 1}: "
            f"type {types - 1}", va="center", fontsize=FONT - 1)


def _types(ax, x0, types, dim, side):
    """Middle: a few capsule types, each an H x W grid whose every cell holds a D-vector."""
    shown = [0, 1, types - 1]
    cell = 0.3
    for row, t in enumerate(shown):
        y0 = 4.2 - row * 2.1 - (0.3 if t == types - 1 else 0.0)  # room for the dots
        for gx in range(side):
            for gy in range(side):
                ax.add_patch(Rectangle((x0 + gx * cell, y0 + gy * cell), cell, cell, facecolor=_type_colour(t, types),
                                       edgecolor="white", lw=0.6))
        ax.text(x0 + side * cell + 0.15, y0 + side * cell / 2, f"type {t}", va="center", fontsize=FONT - 1)
    ax.text(x0 + side * cell / 2, 2.0, "⋮", ha="center", va="center", fontsize=FONT + 2)
    ax.text(x0 + 1.2, 6.35, f"{types} types, each {side}×{side}\ncapsules of {dim}-D", ha="center",
            va="bottom", fontsize=FONT)


def _capsules(ax, x0, types, dim, side):
    """Right: the list of T*H*W capsules, type by type, each a row of D numbers."""
    per_type, height = side * side, 6.0
    for t in range(types):
        ax.add_patch(Rectangle((x0, height - height * (t + 1) / types), 1.6, height / types,
                               fc=_type_colour(t, types), ec="white", lw=0.5))
    for d in range(1, dim):  # the D numbers of every capsule, as columns
        ax.plot([x0 + 1.6 * d / dim] * 2, [0, height], color="white", lw=0.5)
    ax.add_patch(Rectangle((x0, 0), 1.6, height, fill=False, lw=1))
    ax.text(x0 + 0.8, height + 0.35, f"{types * per_type:,} capsules u_i\n(each {dim} numbers)", ha="center",
            va="bottom", fontsize=FONT)
    ax.text(x0 + 1.75, height - height / types / 2, f"i = 0–{per_type - 1}: type 0, row by row",
            va="center", fontsize=FONT - 1)
    ax.text(x0 + 1.75, height / types / 2, f"i = {types * per_type - per_type}–{types * per_type - 1}: "
            f"type {types - 1}", va="center", fontsize=FONT - 1)


def _arrow(ax, x0, x1, label):
    ax.add_patch(FancyArrowPatch((x0, 3.0), (x1, 3.0), arrowstyle="-|>", mutation_scale=16, lw=1.2))
    ax.text((x0 + x1) / 2, 2.8, label, ha="center", va="top", fontsize=FONT - 2, family="monospace")


def primary_reshape_figure(config: Optional[CapsNetConfig] = None, ax=None):
    """Conv channels -> capsule types x dims on the grid -> the flat list of primary capsules."""
    c = config or CapsNetConfig()
    types, dim, side = c.primary_types, c.primary_dim, c.primary_grid[0]
    if ax is None:
        _, ax = plt.subplots(figsize=(14, 4.6))
    _channels(ax, 0.0, types, dim, side)
    _arrow(ax, 4.9, 7.3, f".view(B, {types},\n{dim}, {side}, {side})")
    _types(ax, 7.6, types, dim, side)
    # narrow label, arrow starting clear of the "type 1" label
    _arrow(ax, 11.1, 14.4, f".permute(\n0,1,3,4,2)\n.reshape(B,\n{types * side * side}, {dim})")
    _capsules(ax, 14.7, types, dim, side)
    ax.set(xlim=(-0.2, 21.5), ylim=(-0.3, 7.6))
    ax.axis("off")
    return ax
