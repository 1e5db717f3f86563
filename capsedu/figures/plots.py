"""The figures behind the widgets and their static twins (matplotlib).

- What they show is computed in ``frames`` (no drawing there).
- Renderers (``SquashPlot``, ``RoutingPlot``, ``PerturbationPlot``): one matplotlib
  ``Figure`` each, built once; ``update(...)`` changes the artists' data and ``png()``
  draws it. The live widgets (``widgets.py``) and the static twins (``static.py``) draw
  with the same renderers. The figures are never registered with pyplot, so nothing
  here creates a figure per event or leaks one.
"""
from __future__ import annotations

import io
from typing import List, Optional, Sequence

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.patches import Circle
from PIL import Image as PILImage

from capsedu.figures.frames import SQUASH_VARIANTS, squash_curves

__all__ = ["SquashPlot", "RoutingPlot", "PerturbationPlot", "FramePlot", "VARIANT_LABELS"]

VARIANT_LABELS = {"paper": "paper  n²/(1+n²)", "su": "Su  n²/(0.5+n²)", "tanh": "tanh n",
                  "exp": "1 − exp(−n)", "rational": "n/(1+n)"}
DPI = 72
VARIANT_DASHES = {"paper": (0, (5, 3)), "su": (0, (2, 2))}
MODE_NAMES = {"hinton": "Hinton b ← b + û·v", "su": "Su b ← û·v"}


# ---------------------------------------------------------------- renderers (one figure each, reused)
class FramePlot:
    """A matplotlib Figure outside pyplot, drawn by blitting: the axes, ticks and labels are
    rendered once; each ``png()`` restores them and redraws only the artists in ``self.moving``."""

    def __init__(self, width: float, height: float):
        self.fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
        FigureCanvasAgg(self.fig)
        self.moving: List = []                     # artists whose data change with the controls
        self._background = None

    def pixels(self) -> np.ndarray:
        """The current state as an RGB array (H, W, 3)."""
        canvas = self.fig.canvas
        if self._background is None:               # first draw: lay out, then freeze the layout
            for artist in self.moving:
                artist.set_animated(True)
            canvas.draw()
            self.fig.set_layout_engine("none")
            self._background = canvas.copy_from_bbox(self.fig.bbox)
        canvas.restore_region(self._background)
        for artist in self.moving:
            self.fig.draw_artist(artist)
        return np.asarray(canvas.buffer_rgba())[..., :3].copy()

    def png(self, compress_level: int = 1) -> bytes:
        """The current state as PNG bytes (level 1: fast, for the live widget; 9: small, for the twins)."""
        buf = io.BytesIO()
        PILImage.fromarray(self.pixels()).save(buf, format="png", compress_level=compress_level)
        return buf.getvalue()


class SquashPlot(FramePlot):
    """Length maps of the squash (slider k) and of the chosen variants; one example length marked."""

    def __init__(self):
        super().__init__(9.4, 5.2)               # 677 px at 72 dpi: the column's width, unscaled
        self.ax = ax = self.fig.add_subplot()
        ax.tick_params(labelsize=12)
        base = squash_curves(1.0)
        # the variants are drawn over the black curve, the paper's and Su's dashed, so that at
        # k = 1 (or 0.5) the curve it coincides with still shows on top of the black one
        self.lines = {name: ax.plot(base["n"], base[name], lw=1.8, zorder=3, label=VARIANT_LABELS[name],
                                    ls=VARIANT_DASHES.get(name, "-"))[0]
                      for name in SQUASH_VARIANTS}
        self.main, = ax.plot(base["n"], base["squash"], color="black", lw=3.5, zorder=2)
        self.marker = ax.axvline(1.0, color="0.5", ls="--", lw=0.8)
        self.dots = ax.scatter([], [], color="black", zorder=3, s=18)
        self.note = ax.text(0.98, 0.04, "", transform=ax.transAxes, ha="right", va="bottom", fontsize=12)
        ax.set(xlim=(0, 4), ylim=(0, 1.02))
        ax.set_xlabel("input length |s|", fontsize=13)
        ax.set_ylabel("output length |v|", fontsize=13)
        ax.set_title("length maps: the squash with slider k (black) and the chosen variants", fontsize=13)
        self.moving = [self.main, *self.lines.values(), self.marker, self.dots, self.note]   # drawn in order
        self.legend = None
        self.state = None

    def update(self, k: float, names: Sequence[str], example: float):
        curves = squash_curves(k)
        self.main.set_ydata(curves["squash"])
        self.main.set_label(f"squash, k = {k:g}:  n²/(k+n²)")
        for name, line in self.lines.items():
            line.set_visible(name in names)
        point = squash_curves(k, names, example=example)
        shown = ["squash", *[n for n in SQUASH_VARIANTS if n in names]]
        self.marker.set_xdata([example, example])
        self.dots.set_offsets(np.array([[example, point[n][0]] for n in shown]))
        same = [who for n, kn, who in (("paper", 1.0, "the paper's"), ("su", 0.5, "Su's"))
                if n in names and k == kn]
        self.note.set_text(f"|s| = {example:.2f}  ->  |v| = {point['squash'][0]:.3f} (k = {k:g})"
                           + (f"\nk = {k:g} is {same[0]}: its dashed curve lies on the black" if same else ""))
        if self.legend is not None:
            self.moving.remove(self.legend)
        self.legend = self.ax.legend(handles=[self.main, *[self.lines[n] for n in SQUASH_VARIANTS if n in names]],
                                     loc="upper left", fontsize=12)
        self.legend.set_animated(self._background is not None)
        self.moving.append(self.legend)
        self.state = {"k": k, "names": tuple(names), "example": example, "curves": curves, "point": point}
        return self


class RoutingPlot(FramePlot):
    """Toy 2-D routing (3 parents) and a CapsNet input: the digit, its c_ij heat map and |v_j|, at one iteration.

    Two rows, 9.7 x 7.2 inches at 72 dpi (698 px, within a 700 px column, so never scaled down), so
    that its 10-11 pt text stays 10 px or more on the page."""

    def __init__(self, toy: torch.Tensor, capsnet: Optional[tuple] = None, rows: int = 40):
        super().__init__(9.7, 7.2 if capsnet is not None else 3.8)
        self.toy, self.capsnet = toy, capsnet
        grid = self.fig.add_gridspec(2 if capsnet is not None else 1, 6)
        axes = [self.fig.add_subplot(grid[0, 2 * j:2 * j + 2]) for j in range(3)]
        self.arrows, self.points, self.titles = [], [], []
        for j, ax in enumerate(axes):
            ax.add_patch(Circle((0, 0), 1.0, fill=False, color="0.8", lw=0.8))   # |v| < 1 inside
            pts = toy[0, :, j].numpy()
            self.points.append(ax.scatter(pts[:, 0], pts[:, 1], c=np.zeros(len(pts)), cmap="viridis",
                                          vmin=0, vmax=1, s=20, edgecolors="0.3", linewidths=0.4))
            self.arrows.append(ax.quiver([0, 0], [0, 0], [0, 0], [0, 0], color=["0.6", "black"],
                                         angles="xy", scale_units="xy", scale=1, width=0.012))
            ax.set(xlim=(-2, 2), ylim=(-2, 2), aspect="equal", xlabel="dim 1")
            ax.set_ylabel("dim 2" if j == 0 else "")
            self.titles.append(ax.set_title("", fontsize=11))
        if capsnet is not None:
            ax_digit = self.fig.add_subplot(grid[1, 0])
            ax_heat = self.fig.add_subplot(grid[1, 1:4])
            ax_bar = self.fig.add_subplot(grid[1, 4:])
            self.digit = ax_digit.imshow(np.zeros((28, 28)), cmap="gray_r", vmin=0, vmax=1)
            ax_digit.set(xticks=[], yticks=[])
            ax_digit.set_title("the input", fontsize=11)
            self.n_rows = rows
            self.heat = ax_heat.imshow(np.ones((rows, 10)), cmap="RdBu_r", norm=LogNorm(1 / 3, 3),
                                       aspect="auto", interpolation="nearest")
            ax_heat.set(xlabel="digit capsule j", ylabel=f"primary capsule i\n({rows} longest)",
                        xticks=range(10))
            bar = self.fig.colorbar(self.heat, ax=ax_heat, label="10 c_ij (1 = uniform)", shrink=0.9)
            bar.set_ticks([1 / 3, 1 / 2, 1, 2, 3], labels=["1/3", "1/2", "1", "2", "3"])
            bar.minorticks_off()
            self.bars = ax_bar.bar(range(10), np.zeros(10), color="tab:blue")
            ax_bar.set(ylim=(0, 1), xticks=range(10), xlabel="digit capsule j", ylabel="|v_j|")
            self.heat_title = ax_heat.set_title("", fontsize=11)
            self.bar_title = ax_bar.set_title("", fontsize=11)
            self.set_capsnet(capsnet)
            self.moving += [self.digit, self.heat, *self.bars, self.heat_title, self.bar_title]
        self.fig.suptitle("Toy layer: 12 lower capsules vote for 3 parents (dots: predictions, colour c_ij;\n"
                          "grey arrow s_j, black v_j)" + ("; below, the CapsNet on a test digit"
                                                          if capsnet is not None else ""), fontsize=11)
        self.moving += [*self.points, *self.arrows, *self.titles]
        self.state = None

    def set_capsnet(self, capsnet: tuple):
        """A new CapsNet input: its (u_hat, primary lengths); the heat map shows the longest primaries."""
        self.capsnet = capsnet
        self.rows = torch.argsort(capsnet[1], descending=True)[:self.n_rows]
        self.digit.set_data(np.asarray(capsnet[2]))

    def update(self, toy_frames, net_frames, iteration: int, mode: str):
        f = toy_frames[iteration - 1]
        for j in range(3):
            c = f["c"][:, j].numpy()
            self.points[j].set_array(c)
            self.points[j].set_sizes(15 + 70 * c)
            s, v = f["s"][j].numpy(), f["v"][j].numpy()
            self.arrows[j].set_UVC([s[0], v[0]], [s[1], v[1]])
            self.titles[j].set_text(f"parent {j + 1}: |s| {np.linalg.norm(s):.2f}, |v| {np.linalg.norm(v):.2f}"
                                    + (f"\n{MODE_NAMES[mode]}, r = {iteration} of {len(toy_frames)}" if j == 0 else ""))
        if self.capsnet is not None:
            g = net_frames[iteration - 1]
            self.heat.set_data(g["c"][self.rows].numpy() * g["c"].shape[1])
            lengths = g["v"].norm(dim=-1).numpy()
            for bar, h in zip(self.bars, lengths):
                bar.set_height(h)
            self.heat_title.set_text(f"CapsNet, {MODE_NAMES[mode]}, r = {iteration}")
            self.bar_title.set_text(f"|v_j| at r = {iteration}: longest {int(lengths.argmax())}")
        self.state = {"iteration": iteration, "mode": mode, "toy": f,
                      "net": None if self.capsnet is None else net_frames[iteration - 1]}
        return self


class PerturbationPlot(FramePlot):
    """Input digit, the reconstruction from the (perturbed) capsule, and the 10 capsule lengths."""

    def __init__(self):
        super().__init__(7.8, 2.8)
        ax_in, ax_rec, self.ax_bar = self.fig.subplots(1, 3, width_ratios=[1, 1, 1.5])
        self.im_in = ax_in.imshow(np.zeros((28, 28)), cmap="gray", vmin=0, vmax=1)
        self.im_rec = ax_rec.imshow(np.zeros((28, 28)), cmap="gray", vmin=0, vmax=1)
        for ax, title in ((ax_in, "input"), (ax_rec, "reconstruction")):
            ax.set(xticks=[], yticks=[], title=title)
        self.title_rec = ax_rec.title
        self.bars = self.ax_bar.bar(range(10), np.zeros(10), color="0.6")
        self.ax_bar.set(ylim=(0, 1.05), xticks=range(10), xlabel="digit capsule", ylabel="length")
        self.moving = [self.im_in, self.im_rec, *self.bars, self.title_rec]
        self.state = None

    def update(self, image, recon, lengths, label: int, deltas):
        self.im_in.set_data(np.asarray(image).reshape(28, 28))
        self.im_rec.set_data(np.asarray(recon))
        for j, (bar, h) in enumerate(zip(self.bars, np.asarray(lengths))):
            bar.set_height(h)
            bar.set_color("tab:red" if j == label else "0.6")
        moved = int(np.count_nonzero(np.asarray(deltas)))
        self.title_rec.set_text(f"decoded as {label}" + (f", {moved} dim. moved" if moved else ""))
        self.state = {"recon": np.asarray(recon), "lengths": np.asarray(lengths), "label": label}
        return self
