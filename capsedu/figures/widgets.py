"""Live widgets for a Jupyter or Colab kernel (ipywidgets 7.6+ or 8, and matplotlib).

``squash_explorer()``, ``routing_explorer()``, ``perturbation_explorer(model, images)``:
controls plus an ``ipywidgets.Image`` redrawn on every change by a renderer of
``plots`` (the same one the static twins of ``static`` use); what they show is computed
in ``frames``.
"""
from __future__ import annotations

from typing import Optional

import ipywidgets as W
import torch

from capsedu.core.checks import check_count
from capsedu.core.squashing import safe_norm
from capsedu.figures.frames import (
    SQUASH_VARIANTS,
    capsnet_images,
    capsnet_predictions,
    perturb,
    routing_frames,
    toy_predictions,
)
from capsedu.figures.plots import (
    DPI,
    VARIANT_LABELS,
    PerturbationPlot,
    RoutingPlot,
    SquashPlot,
)
from capsedu.runtime.device import one_thread

__all__ = ["squash_explorer", "routing_explorer", "perturbation_explorer"]

# A notebook's output area is about 950 px wide (Colab, Jupyter). The plots render at twice the
# twins' resolution and show at most OUTPUT_PX wide, never wider than their inches at 72 px each:
# sharp on any screen, and never stretched (a VBox otherwise stretches its Image to its full width).
LIVE_DPI = 2 * DPI
OUTPUT_PX = 940
LABEL_STYLE = {"description_width": "100px"}  # the longest label, "show iteration", needs 93 px


# ---------------------------------------------------------------- live widgets
class _Explorer(W.VBox):
    """Controls above an Image; ``redraw()`` renders the plot into the Image."""

    def _setup(self, plot, controls):
        plot.fig.set_dpi(LIVE_DPI)
        self.layout.max_width = f"{OUTPUT_PX}px"
        self.plot = plot
        width = min(OUTPUT_PX, round(plot.fig.get_figwidth() * 72))  # its size at 72 px an inch, capped
        self.image = W.Image(format="png", layout=W.Layout(width=f"{width}px", height="auto"))
        self.children = [*controls, self.image]
        self.redraw()

    def redraw(self, *_):
        with one_thread():
            self._draw()
            self.image.value = self.plot.png()


class SquashExplorer(_Explorer):
    """The squash's length map with a slider for k, the variants as checkboxes, an example length."""

    def __init__(self):
        super().__init__()
        style = {"description_width": "110px"}
        self.k = W.FloatSlider(value=1.0, min=0.1, max=2.0, step=0.05, description="k", style=style)
        self.example = W.FloatSlider(value=0.5, min=0.0, max=4.0, step=0.05, description="example |s|", style=style)
        self.boxes = {n: W.Checkbox(value=True, description=VARIANT_LABELS[n], indent=False,
                                    layout=W.Layout(width="150px")) for n in SQUASH_VARIANTS}
        for w in (self.k, self.example, *self.boxes.values()):
            w.observe(self.redraw, names="value")
        self._setup(SquashPlot(), [W.HBox([self.k, self.example]), W.HBox(list(self.boxes.values()))])

    def _draw(self):
        names = [n for n, box in self.boxes.items() if box.value]
        self.plot.update(self.k.value, names, self.example.value)


class RoutingExplorer(_Explorer):
    """Routing iteration by iteration, Hinton's or Su's update, on the toy and on a CapsNet input."""

    def __init__(self, model=None, images=None, max_iterations: int = 10):
        super().__init__()
        self.model, self.images = model, images
        self._cache = {}
        self.mode = W.ToggleButtons(options=[("Hinton", "hinton"), ("Su", "su")], value="hinton",
                                    description="update", style=LABEL_STYLE)
        self.r = W.IntSlider(value=min(3, max_iterations), min=1, max=max_iterations, description="iterations r",
                             style=LABEL_STYLE)
        self.t = W.IntSlider(value=1, min=1, max=self.r.value, description="show iteration", style=LABEL_STYLE)
        controls = [W.HBox([self.mode]), W.HBox([self.r, self.t])]
        self.digit = None
        if model is not None:
            options = [(f"test digit #{i}", i) for i in range(len(images))]
            self.digit = W.Dropdown(options=options, value=0, description="CapsNet input", style=LABEL_STYLE)
            controls.append(self.digit)
        self.toy = toy_predictions()
        self._hold = False
        for w in (self.mode, self.r, self.t, *( [self.digit] if self.digit else [])):
            w.observe(self._changed, names="value")
        self._setup(RoutingPlot(self.toy, self._capsnet(0)), controls)

    def _capsnet(self, index):
        if self.model is None:
            return None
        if ("net", index) not in self._cache:
            self._cache[("net", index)] = capsnet_predictions(self.model, self.images[index])
        return self._cache[("net", index)]

    def _changed(self, change):
        with one_thread():
            self._apply(change)

    def _apply(self, change):
        if change["owner"] is self.r:                 # keep 1 <= t <= r, one redraw
            self._hold = True
            self.t.max = self.r.value
            self.t.value = min(self.t.value, self.r.value)
            self._hold = False
        if change["owner"] is self.digit:             # a new input: new predictions, new heat-map rows
            self.plot.set_capsnet(self._capsnet(self.digit.value))
        if not self._hold:
            self.redraw()

    def frames(self, mode, r):
        key = (mode, r, self.digit.value if self.digit else None)
        if key not in self._cache:
            net = self.plot.capsnet
            k = self.model.config.squash_k if self.model is not None else 1.0
            self._cache[key] = (routing_frames(self.toy, r, mode),
                                routing_frames(net[0], r, mode, k) if net is not None else None)
        return self._cache[key]

    def _draw(self):
        toy, net = self.frames(self.mode.value, self.r.value)
        self.plot.update(toy, net, self.t.value, self.mode.value)


class PerturbationExplorer(_Explorer):
    """The 16 dimensions of the predicted digit capsule as sliders; the reconstruction follows."""

    RANGES = {"±0.25 (paper)": 0.25, "±0.5": 0.5}   # ±0.5: as the in-page panel's sliders

    def __init__(self, model, images: torch.Tensor):
        super().__init__()
        self.model = model
        self.images = capsnet_images(model, images, "PerturbationExplorer").cpu()
        with torch.no_grad():
            device = next(model.parameters()).device
            self.all_capsules = model.capsules(self.images.to(device)).cpu()       # (N, 10, 16)
        self.labels = safe_norm(self.all_capsules, dim=-1).argmax(dim=1)             # predictions
        self._hold = False
        layout = W.Layout(width="225px")                                             # 4 columns of 230 px: 920 px
        self.sliders = [W.FloatSlider(value=0.0, min=-0.25, max=0.25, step=0.05, readout_format=".2f",
                                      description=f"dim {d + 1}", layout=layout)
                        for d in range(model.config.digit_dim)]
        self.span = W.Dropdown(options=list(self.RANGES), value="±0.25 (paper)", description="range")
        self.reset = W.Button(description="reset", icon="undo")
        self.digit = W.Dropdown(options=[(f"#{i} (predicted {int(y)})", i) for i, y in enumerate(self.labels)],
                                value=0, description="test digit")
        for s in self.sliders:
            s.observe(self.redraw_unless_held, names="value")
        self.digit.observe(self._new_digit, names="value")
        self.span.observe(self._new_span, names="value")
        self.reset.on_click(self.reset_sliders)
        grid = W.GridBox(self.sliders, layout=W.Layout(grid_template_columns="repeat(4, 230px)"))
        self._select(0)
        self._setup(PerturbationPlot(), [W.HBox([self.digit, self.span, self.reset]), grid])

    def _select(self, index):
        self.index, self.label = index, int(self.labels[index])
        self.capsules = self.all_capsules[index]                                     # (10, 16): the original

    def deltas(self) -> torch.Tensor:
        return torch.tensor([s.value for s in self.sliders], dtype=torch.float64)

    def capsule(self) -> torch.Tensor:
        """The decoder's input now: the original capsules with the slider values added to the predicted one."""
        caps = self.capsules.clone()
        caps[self.label] += self.deltas().to(caps.dtype)
        return caps

    def redraw_unless_held(self, *_):
        if not self._hold:
            self.redraw()

    def _draw(self):
        recon = perturb(self.model, self.capsules, self.label, None, self.deltas())
        self.plot.update(self.images[self.index], recon, safe_norm(self.capsule(), dim=-1), self.label,
                         self.deltas())

    def _batch(self, fn):
        self._hold = True
        try:
            fn()
        finally:
            self._hold = False
        self.redraw()

    def reset_sliders(self, *_):
        self._batch(lambda: [setattr(s, "value", 0.0) for s in self.sliders])

    def _new_digit(self, change):
        self._select(change["new"])
        self.reset_sliders()

    def _new_span(self, change):
        half = self.RANGES[change["new"]]

        def apply():
            for s in self.sliders:
                if half > s.max:
                    s.max, s.min = half, -half
                else:
                    s.min, s.max = -half, half
        self._batch(apply)


def squash_explorer() -> SquashExplorer:
    """The squash variants on one plot: checkboxes for the variants, a slider for k, an example length."""
    return SquashExplorer()


def routing_explorer(model=None, images: Optional[torch.Tensor] = None, max_iterations: int = 10) -> RoutingExplorer:
    """Dynamic routing step by step on a 2-D toy layer and, given ``model`` and ``images``, a real CapsNet input."""
    if (model is None) != (images is None):
        raise ValueError("routing_explorer: pass both model and images (N, 1, 28, 28), or neither")
    check_count(max_iterations, "routing_explorer: max_iterations")
    if model is not None:
        images = capsnet_images(model, images, "routing_explorer")
    return RoutingExplorer(model, images, max_iterations)


def perturbation_explorer(model, images: torch.Tensor) -> PerturbationExplorer:
    """Sliders for the 16 dimensions of the predicted digit capsule of ``images`` (N, 1, 28, 28) or one (1, 28, 28)."""
    return PerturbationExplorer(model, capsnet_images(model, images, "perturbation_explorer"))
