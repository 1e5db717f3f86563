"""The book's two diagrams, drawn from the code so that they follow it.

- ``architecture_figure(config)``: CapsNet as boxes, conv -> primary capsules -> digit capsules
  -> decoder, each with its output shape and its parameter count, both read from a model built
  from ``config`` (change the config and the figure changes with it).
- ``neuron_vs_capsule_figure()``: a neuron's scalar output beside a capsule's vector output.
"""
from __future__ import annotations

import textwrap
from typing import Optional

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from capsedu.core.capsnet import CapsNet, CapsNetConfig
from capsedu.core.params import count_parameters

__all__ = ["architecture_stages", "architecture_figure", "neuron_vs_capsule_figure"]


def architecture_stages(config: Optional[CapsNetConfig] = None):
    """[(stage name, what it computes, output shape, parameters)] of ``CapsNet(config)``."""
    config = config or CapsNetConfig()
    model = CapsNet(config)
    c = model.config
    (h, w), (ph, pw) = c.image_size, c.primary_grid
    conv_h, conv_w = h - c.conv_kernel + 1, w - c.conv_kernel + 1
    return [
        ("input", "image", f"{c.in_channels}×{h}×{w}", 0),
        ("Conv1", f"{c.conv_kernel}×{c.conv_kernel} conv, ReLU", f"{c.conv_channels}×{conv_h}×{conv_w}",
         count_parameters(model.conv1)),
        ("PrimaryCaps", f"{c.primary_kernel}×{c.primary_kernel} conv, stride {c.primary_stride},\nthen squash",
         f"{c.num_primary:,} capsules of {c.primary_dim}-D\n({c.primary_types} types × {ph}×{pw})",
         count_parameters(model.primary)),
        ("DigitCaps", f"one {c.primary_dim}→{c.digit_dim} W_ij\nper (i, j) pair,\n{c.iterations} routing\niterations",
         f"{c.num_classes} capsules of {c.digit_dim}-D", count_parameters(model.digits)),
        ("Decoder", "mask, then\n" + " → ".join(str(n) for n in (*c.decoder_hidden, c.in_channels * h * w)),
         f"{c.in_channels}×{h}×{w}\nreconstruction", count_parameters(model.decoder)),
    ]


def architecture_figure(config: Optional[CapsNetConfig] = None, ax=None):
    """CapsNet's stages as annotated boxes; returns the figure."""
    stages = architecture_stages(config)
    if ax is None:   # 10 inches: at 100 dpi the page shows it at 73%, so 11 pt text is 11 px there
        fig, ax = plt.subplots(figsize=(10, 3.8))
        fig.subplots_adjust(left=0.01, right=0.99, bottom=0.02, top=0.9)   # the boxes get the width
    colours = ["0.9", "#c6dbef", "#9ecae1", "#6baed6", "#fdd0a2"]
    width, gap = 2.05, 0.45  # wide enough for the longest wrapped label

    def wrap(text):       # lines of at most 18 characters, so that 11 pt text fits its box
        return "\n".join(textwrap.fill(line, 18) for line in text.split("\n"))

    for k, ((name, what, shape, params), colour) in enumerate(zip(stages, colours)):
        x = k * (width + gap)
        ax.add_patch(FancyBboxPatch((x, 0), width, 1.6, boxstyle="round,pad=0.03", fc=colour, ec="0.3"))
        ax.text(x + width / 2, 1.42, name, ha="center", va="center", fontsize=13, weight="bold")
        ax.text(x + width / 2, 1.0, wrap(what), ha="center", va="center", fontsize=11)
        ax.text(x + width / 2, 0.4, wrap(shape), ha="center", va="center", fontsize=11)
        ax.text(x + width / 2, -0.08, f"{params:,} parameters" if params else "", ha="center", va="top",
                fontsize=11)
        if k:
            ax.add_patch(FancyArrowPatch((x - gap + 0.05, 0.8), (x - 0.05, 0.8), arrowstyle="-|>",
                                         mutation_scale=14, color="0.3"))
    total = sum(p for *_, p in stages)
    encoder = total - stages[-1][3]
    ax.set_title(f"CapsNet: {total:,} parameters ({encoder:,} without the decoder)", fontsize=13)
    ax.set_xlim(-0.2, len(stages) * (width + gap) - gap + 0.2)
    ax.set_ylim(-0.45, 1.75)
    ax.axis("off")
    return ax.figure


def neuron_vs_capsule_figure():
    """Left: a neuron turns weighted inputs into one number. Right: a capsule outputs a vector whose
    length is a probability and whose direction is the pose."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    inputs = np.array([0.2, 0.9, 0.5])
    weights = np.array([0.7, 1.1, -0.4])
    activation = 1 / (1 + np.exp(-(inputs @ weights)))
    for i, (x, wt) in enumerate(zip(inputs, weights)):
        left.annotate("", xy=(0.75, 0.5), xytext=(0.17, 0.15 + 0.35 * i),
                      arrowprops=dict(arrowstyle="->", color="0.4"))
        left.text(0.02, 0.15 + 0.35 * i, f"x={x:.1f}", va="center", fontsize=10)
        y = 0.15 + 0.35 * i + (0.35 - 0.35 * i) * 0.15 / 0.58     # the arrow's height at x = 0.32
        left.text(0.32, y + (0.05 if i else -0.1), f"w={wt:+.1f}", fontsize=10, color="0.35")   # off the line
    left.add_patch(plt.Circle((0.82, 0.5), 0.08, fc="#c6dbef", ec="0.3"))
    left.text(0.8, 0.25, f"one number: σ(w·x) = {activation:.2f}", ha="center", fontsize=10)
    left.set(xlim=(0, 1.1), ylim=(0, 1), aspect="equal", title="a neuron: how likely is the feature?")
    left.axis("off")
    for length, degrees, style, label in ((0.9, 35, "-", "present: long"), (0.25, 10, "--", "absent: short")):
        angle = np.deg2rad(degrees)
        right.annotate("", xy=(length * np.cos(angle), length * np.sin(angle)), xytext=(0, 0),
                       arrowprops=dict(arrowstyle="-|>", color="tab:red" if length > 0.5 else "0.5", lw=2,
                                       linestyle=style))
        right.text(length * np.cos(angle) + 0.03, length * np.sin(angle), label, fontsize=10)
    tilted = np.deg2rad(80)
    right.annotate("", xy=(0.9 * np.cos(tilted), 0.9 * np.sin(tilted)), xytext=(0, 0),
                   arrowprops=dict(arrowstyle="-|>", color="tab:blue", lw=2))
    right.text(0.9 * np.cos(tilted) + 0.03, 0.9 * np.sin(tilted), "same feature, other pose", fontsize=10)
    right.add_patch(plt.Circle((0, 0), 1, fill=False, ls=":", color="0.6"))
    right.set(xlim=(-0.2, 1.3), ylim=(-0.1, 1.1), aspect="equal",
              title="a capsule: length = how likely, direction = pose")
    right.axis("off")
    fig.tight_layout()
    return fig
