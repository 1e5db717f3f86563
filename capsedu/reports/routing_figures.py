"""Chapter 10's figures of the comparison, drawn from a ``routing.RoutingReport`` (what the page judges).

``accuracy_figure``: test and affine accuracy per ranked method (mean and seeds, on an axis zoomed to
them) and the routing cost; ``curves_figure``: the mean test accuracy per epoch, whose last epochs
the budget box judges for convergence.
"""
from __future__ import annotations

from typing import Tuple

import matplotlib.pyplot as plt
import numpy as np

from capsedu.reports.routing import LABELS

__all__ = ["accuracy_figure", "curves_figure"]

COLOURS = {"dynamic": "tab:blue", "none": "tab:gray", "em": "tab:green", "attention": "tab:red",
           "em-spread": "tab:olive"}
COST = "routing_fwd_bwd_ms"


def _colour(name: str) -> str:
    return COLOURS.get(name, "tab:purple")


def accuracy_figure(rep) -> Tuple[plt.Figure, float, float]:
    """(the figure, the accuracy axes' low and high). The small EM network is not ranked, so it is left out
    of the accuracy panels (its means go in their titles) and the axes zoom to the ranked methods."""
    seeds = lambda n, key: [r[key] for r in rep.final["runs"] if r["method"] == n]  # noqa: E731
    mean = {r["method"]: r for r in rep.final["summary"]["table"]}
    names = list(rep.params)
    ranked = [n for n in names if n != "em"]
    shown = [v for n in ranked for key in ("test", "affine") for v in seeds(n, key)]
    low, high = min(shown) - 0.005, min(1.0, max(shown) + 0.003)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    panels = (("test", "test accuracy"), ("affine", "affine (0.5, 28×28) accuracy"),
              (COST, "routing fwd + bwd, ms (log)" + (", benchmark" if rep.benchmark else "")))
    for ax, (key, title) in zip(axes, panels):
        drawn = names if key == COST else ranked
        for x, n in enumerate(drawn):
            vals = rep.cost_values(n) if key == COST else seeds(n, key)
            if key == COST:
                ax.bar(x, np.mean(vals), color=_colour(n), alpha=0.35)
            else:                                                   # no bars on a zoomed axis: a mean mark
                ax.plot([x - 0.3, x + 0.3], [np.mean(vals)] * 2, color=_colour(n), lw=2.5)
            ax.plot([x] * len(vals), vals, "o", color=_colour(n), ms=4)  # one dot per seed (per round for the cost)
        ax.set_xticks(range(len(drawn)), [LABELS.get(n, n) for n in drawn], fontsize=8)
        ax.set_title(title, fontsize=10)
        if key == COST:
            ax.set_yscale("log")
            continue
        ax.set_ylim(low, high)
        ax.set_xlim(-0.6, len(drawn) - 0.4)
        if "em" in mean:
            ax.set_title(f"{title}\nEM (small, not ranked): {mean['em'][key]:.3f}, below this axis", fontsize=9)
    fig.suptitle(f"Routing methods, from {rep.source}: lines are means, dots single seeds", fontsize=10)
    fig.tight_layout()
    return fig, low, high


def curves_figure(rep) -> plt.Figure:
    """Mean test accuracy over the seeds, epoch by epoch, one line per method."""
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    lowest = 1.0
    for name in rep.params:
        curve = np.array([[e["test"] for e in r["epochs"]] for r in rep.final["runs"]
                          if r["method"] == name]).mean(axis=0)
        ax.plot(np.arange(1, len(curve) + 1), curve, "o-", ms=3, color=_colour(name), label=LABELS.get(name, name))
        lowest = min(lowest, curve.min())
    ax.set(xlabel="epoch", ylabel="test accuracy (mean over seeds)", ylim=(lowest - 0.01, 1.0),
           title=f"Training curves, {rep.source}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
