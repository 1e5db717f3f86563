"""Chapter 10's widget, the coupling of three routing methods side by side.

- ``coupling_maps(models, image)``: for one digit, the coupling each trained model used:
  dynamic routing's ``c_ij`` in its last iteration, EM's responsibilities ``R_ij`` in its
  last M step, self-attention's ``softmax_j(A_ij)`` (its learned priors ``b_ij`` left out),
  each (rows: input capsules, columns: the 10 classes), with the class scores.
- ``CouplingPlot``: the digit and the three maps (10 x coupling, so 1 is uniform), one
  figure drawn with ``plots.FramePlot`` (the renderer of every widget in the book).
- ``coupling_explorer(models, images)``: the live ipywidgets version (a menu of digits);
  ``coupling_twin(models, images)``: its kernel-free HTML twin (``static.Twin``).
"""
from __future__ import annotations

from typing import Dict, Mapping

import numpy as np
import torch
from matplotlib.colors import LogNorm

from capsedu.figures.plots import FramePlot
from capsedu.figures.static import Control, Twin, plot_twin
from capsedu.methods.catalogue import ROUTING_METHODS
from capsedu.runtime.device import one_thread

__all__ = ["SHOWN", "ROWS", "coupling_maps", "CouplingPlot", "coupling_explorer", "coupling_twin"]

SHOWN = {m: ROUTING_METHODS[m].label for m in ("dynamic", "em", "attention")}
ROWS = 40   # EM's rows: its most active input capsules (it has hundreds)


def _check(models: Mapping, images: torch.Tensor) -> None:
    missing = [m for m in SHOWN if m not in models]
    if missing:
        raise ValueError(f"models must hold trained models for {tuple(SHOWN)}; missing {missing}")
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or tuple(images.shape[1:]) != (1, 28, 28) \
            or len(images) == 0:
        got = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"images must be a non-empty tensor (N, 1, 28, 28), got {got}")


@torch.no_grad()
def coupling_maps(models: Mapping, image: torch.Tensor) -> Dict[str, Dict[str, np.ndarray]]:
    """{method: {"c": (rows, 10) coupling, "rows": what the rows are, "scores": (10,)}} for one image."""
    out = {}
    for name in SHOWN:
        model = models[name].eval()
        x = image.reshape(1, 1, 28, 28).to(next(model.parameters()).device)
        if name == "dynamic":
            scores, history = model(x, return_history=True)         # (1, 10), [(1, 64, 10)] * r
            c, rows = history[-1][0], "its 64 grid cells (8 x 8)"
        elif name == "em":
            _, a_in = model.grid(x)                                 # (1, H, W, T)
            _, scores, history = model.capsules(x, return_history=True)  # (1, 10), [(1, H*W*T, 10)] * r
            top = torch.argsort(a_in.flatten(), descending=True)[:ROWS]
            c, rows = history[-1][0][top], f"its {ROWS} most active of {a_in.numel()} capsules"
        else:
            v, c = model.capsules(x, return_coupling=True)          # (1, 10, 16), (1, 16, 10)
            c, scores = c[0] - model.digits.bias, v.norm(dim=-1)    # softmax part only: rows sum to 1
            rows = "its 16 primary capsules"
        out[name] = {"c": c.float().cpu().numpy(), "rows": rows, "scores": scores[0].float().cpu().numpy()}
    return out


class CouplingPlot(FramePlot):
    """The digit, then one heat map per method: 10 x coupling on a log scale (1 = uniform)."""

    def __init__(self):
        super().__init__(12.5, 3.8)
        axes = self.fig.subplots(1, 4, width_ratios=[0.8, 1, 1, 1])
        self.digit = axes[0].imshow(np.zeros((28, 28)), cmap="gray_r", vmin=0, vmax=1)
        axes[0].set(xticks=[], yticks=[])
        self.digit_title = axes[0].set_title("", fontsize=9)
        self.heat, self.titles, self.axes = {}, {}, {}
        rows = {"dynamic": 64, "em": ROWS, "attention": 16}
        for ax, name in zip(axes[1:], SHOWN):
            self.heat[name] = ax.imshow(np.ones((rows[name], 10)), cmap="RdBu_r", norm=LogNorm(1 / 3, 3),
                                        aspect="auto", interpolation="nearest")
            ax.set(xticks=range(10), xlabel="class capsule j")
            self.titles[name] = ax.set_title("", fontsize=9)
            self.axes[name] = ax
        bar = self.fig.colorbar(self.heat["attention"], ax=axes[3], label="10 × coupling (1 = uniform)", shrink=0.9)
        bar.set_ticks([1 / 3, 1 / 2, 1, 2, 3], labels=["1/3", "1/2", "1", "2", "3"])
        bar.minorticks_off()
        for name in SHOWN:  # the row labels depend on the method only, so they are drawn once
            self.axes[name].set_ylabel({"dynamic": "grid cell i", "em": f"input capsule i ({ROWS} most active)",
                                        "attention": "primary capsule i"}[name], fontsize=8)
        self.moving = [self.digit, self.digit_title, *self.heat.values(), *self.titles.values()]
        self.state = None

    def update(self, image: torch.Tensor, maps: Dict, label: int):
        self.digit.set_data(np.asarray(image.detach().cpu()).reshape(28, 28))
        self.digit_title.set_text(f"test digit, label {label}")
        for name, m in maps.items():
            self.heat[name].set_data(np.clip(10.0 * m["c"], 1 / 3, 3))
            best = int(np.argmax(m["scores"]))
            self.titles[name].set_text(f"{SHOWN[name]}: predicts {best} ({m['scores'][best]:.2f})")
        self.state = {"label": label, "maps": maps}
        return self


def coupling_twin(models: Mapping, images: torch.Tensor, labels=None) -> Twin:
    """One frame per digit in ``images`` (N, 1, 28, 28): the static twin of ``coupling_explorer``."""
    _check(models, images)
    labels = [int(v) for v in labels] if labels is not None else [-1] * len(images)
    plot = CouplingPlot()
    maps = [coupling_maps(models, images[n]) for n in range(len(images))]
    control = Control("test digit", [f"#{n} (label {labels[n]})" for n in range(len(images))], "select", 0)
    return plot_twin("coupling", plot, [control], lambda key: plot.update(images[key[0]], maps[key[0]],
                                                                             labels[key[0]]),
                      "Coupling coefficients of dynamic, EM and self-attention routing for one test digit")


def coupling_explorer(models: Mapping, images: torch.Tensor, labels=None):
    """The live widget: a menu of test digits above the figure (needs a kernel)."""
    import ipywidgets as W

    _check(models, images)
    labels = [int(v) for v in labels] if labels is not None else [-1] * len(images)
    plot = CouplingPlot()
    menu = W.Dropdown(options=[(f"#{n} (label {labels[n]})", n) for n in range(len(images))], value=0,
                      description="test digit")
    picture = W.Image(format="png")

    def redraw(*_):
        with one_thread():
            n = menu.value
            plot.update(images[n], coupling_maps(models, images[n]), labels[n])
            picture.value = plot.png()
    menu.observe(redraw, names="value")
    redraw()
    box = W.VBox([menu, picture])
    box.plot, box.menu = plot, menu  # for the tests and for readers who want the numbers
    return box
