"""Static twins of the widgets, for the rendered book where no kernel runs.

A ``Twin`` is one PNG frame per setting of its controls, precomputed at build time with the same
renderers as the live widgets (so it shows what the widget would), and one self-contained HTML
snippet (filled from ``page/twin.html``, ``twin.css``, ``twin.js``) whose few lines of JavaScript
swap the shown image: no CDN, no kernel; without JavaScript the default frame still shows.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import html
import io
import itertools
import json
from dataclasses import dataclass, field
from importlib import resources
from string import Template
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from PIL import Image as PILImage

from capsedu.core.checks import check_count, check_number
from capsedu.core.squashing import safe_norm
from capsedu.figures.frames import (
    PAPER_DELTAS,
    SQUASH_VARIANTS,
    capsnet_images,
    capsnet_predictions,
    check_deltas,
    perturbation_grid,
    routing_frames,
    toy_predictions,
)
from capsedu.figures.plots import RoutingPlot, SquashPlot
from capsedu.runtime.device import one_thread

__all__ = ["Control", "Twin", "squash_twin", "routing_twin", "perturbation_twin", "SQUASH_TWIN_K",
           "SQUASH_TWIN_SETS"]

SQUASH_TWIN_K = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
SQUASH_TWIN_SETS = {"all five": SQUASH_VARIANTS, "paper and Su": ("paper", "su"), "none": ()}
EXAMPLE_LENGTH = 0.5      # the live widget's default example |s|

PAGE = resources.files("capsedu.figures") / "page"   # the twin's and the panel's HTML, JS and CSS


@functools.cache
def page_file(name: str) -> str:
    """A file of capsedu/figures/page/, read once: a .js or .css file without its final newline, an
    .html template with each line stripped and the lines joined (no whitespace between its tags)."""
    text = (PAGE / name).read_text(encoding="utf-8")
    return "".join(line.strip() for line in text.splitlines()) if name.endswith(".html") else text.rstrip("\n")


def fill(name: str, **values: str) -> str:
    """``page_file(name)`` with its ``$name`` placeholders replaced by ``values`` (string.Template)."""
    return Template(page_file(name)).substitute(values)


@dataclass
class Control:
    """One control of a twin: a range input or a select over ``labels``, starting at ``default``."""
    name: str
    labels: List[str]
    kind: str = "range"
    default: int = 0


def encode_png(pixels: np.ndarray) -> bytes:
    """RGB (H, W, 3) or grey (H, W) uint8 pixels -> the smallest PNG PIL makes."""
    buf = io.BytesIO()
    PILImage.fromarray(pixels).save(buf, format="png", optimize=True)
    return buf.getvalue()


class HtmlBlock:
    """An HTML output whose ``html()`` the notebook and the book show (the twins, the in-page panel)."""

    def _repr_html_(self) -> str:
        return self.html()

    @property
    def nbytes(self) -> int:
        """Size of the HTML in bytes (what the block adds to its page)."""
        return len(self.html().encode())


@dataclass
class Twin(HtmlBlock):
    """Precomputed frames keyed by control indices, and the HTML that swaps between them."""
    kind: str
    controls: List[Control]
    frames: Dict[Tuple[int, ...], bytes] = field(repr=False)
    data: Dict[Tuple[int, ...], object] = field(repr=False)
    alt: str = ""
    pixelated: bool = False

    @property
    def default(self) -> Tuple[int, ...]:
        return tuple(c.default for c in self.controls)

    def html(self) -> str:
        """One self-contained snippet: style, controls (hidden until the script runs), image, frames, script."""
        frames = {"-".join(map(str, k)): base64.b64encode(v).decode("ascii") for k, v in self.frames.items()}
        digest = hashlib.sha1(json.dumps(frames, sort_keys=True).encode()).hexdigest()[:12]
        uid = f"capsedu-twin-{self.kind}-{digest}"
        parts = []
        for n, c in enumerate(self.controls):
            labels = html.escape(json.dumps(c.labels), quote=True)
            if c.kind == "range":
                widget = (f'<input type="range" min="0" max="{len(c.labels) - 1}" step="1" value="{c.default}" '
                          f'data-control="{n}" data-labels="{labels}" aria-label="{html.escape(c.name)}">'
                          f'<output data-for="{n}">{html.escape(c.labels[c.default])}</output>')
            else:
                options = "".join(f'<option value="{i}"{" selected" if i == c.default else ""}>{html.escape(t)}</option>'
                                  for i, t in enumerate(c.labels))
                widget = f'<select data-control="{n}" data-labels="{labels}">{options}</select>'
            parts.append(f"<label>{html.escape(c.name)} {widget}</label>")
        key = "-".join(map(str, self.default))
        cls = "capsedu-twin-frame" + (" capsedu-twin-pixelated" if self.pixelated else "")
        return fill("twin.html", kind=self.kind, id=uid, css=page_file("twin.css"), controls="".join(parts),
                    cls=cls, alt=html.escape(self.alt), key=key, src=frames[key], frames=json.dumps(frames),
                    script=fill("twin.js", id=json.dumps(uid)))


def plot_twin(kind, plot, controls, settings, alt) -> Twin:
    """Render ``plot`` for every combination of control indices; ``settings(key)`` updates it."""
    frames, data = {}, {}
    with one_thread():
        for key in itertools.product(*(range(len(c.labels)) for c in controls)):
            settings(key)
            frames[key] = encode_png(plot.pixels())
            data[key] = plot.state
    return Twin(kind, controls, frames, data, alt)


def squash_twin(ks: Sequence[float] = SQUASH_TWIN_K) -> Twin:
    """The squash explorer for each k in ``ks`` and each set of variants in ``SQUASH_TWIN_SETS``."""
    values = tuple(ks) if hasattr(ks, "__iter__") and not isinstance(ks, (str, bytes)) else ()
    if not values:
        raise ValueError(f"squash_twin: ks must be a non-empty sequence of numbers > 0, got {ks!r}")
    for k in values:
        check_number(k.item() if hasattr(k, "item") else k, "squash_twin: each k")
    ks = values
    sets = list(SQUASH_TWIN_SETS)
    plot = SquashPlot()
    controls = [Control("k", [f"{k:g}" for k in ks], "range", list(ks).index(1.0) if 1.0 in ks else 0),
                Control("variants", sets, "select", 0)]
    return plot_twin("squash", plot, controls,
                      lambda key: plot.update(ks[key[0]], SQUASH_TWIN_SETS[sets[key[1]]], EXAMPLE_LENGTH),
                      "Length maps of the squash for one k, with the chosen variants")


def routing_twin(model=None, image: Optional[torch.Tensor] = None, iterations: int = 5) -> Twin:
    """Routing iterations 1..``iterations`` with Hinton's and Su's update, on the toy layer and a CapsNet input.

    It opens at the last iteration: the first is uniform by construction."""
    if (model is None) != (image is None):
        raise ValueError("routing_twin: pass both model and image (1, 28, 28), or neither")
    check_count(iterations, "routing_twin: iterations")
    if model is not None:
        image = capsnet_images(model, image, "routing_twin")
        if len(image) != 1:
            raise ValueError(f"routing_twin: expected one image (1, 28, 28), got a batch of {len(image)}")
    toy = toy_predictions()
    with one_thread():
        net = capsnet_predictions(model, image) if model is not None else None
        k = model.config.squash_k if model is not None else 1.0
        runs = {mode: (routing_frames(toy, iterations, mode),
                       routing_frames(net[0], iterations, mode, k) if net is not None else None)
                for mode in ("hinton", "su")}
    plot = RoutingPlot(toy, net)
    modes = ["hinton", "su"]
    controls = [Control("update", ["Hinton: b ← b + û·v", "Su: b ← û·v"], "select", 0),
                Control("iteration", [str(t) for t in range(1, iterations + 1)], "range", iterations - 1)]
    return plot_twin("routing", plot, controls,
                      lambda key: plot.update(*runs[modes[key[0]]], key[1] + 1, modes[key[0]]),
                      "Coupling coefficients and outputs of dynamic routing at one iteration")


def perturbation_twin(model, images: torch.Tensor, deltas: Sequence[float] = PAPER_DELTAS) -> Twin:
    """The paper's Figure 4 as a twin: each of ``images`` (N, 1, 28, 28), 16 dimensions x ``deltas``."""
    images = capsnet_images(model, images, "perturbation_twin")
    deltas = check_deltas(deltas, "perturbation_twin")
    with one_thread(), torch.no_grad():
        capsules = model.capsules(images.to(next(model.parameters()).device)).cpu()     # (N, 10, 16)
        labels = safe_norm(capsules, dim=-1).argmax(dim=1)
        grids = [perturbation_grid(model, capsules[i], int(labels[i]), deltas) for i in range(len(images))]
    frames, data = {}, {}
    for i, grid in enumerate(grids):                                                   # (16, V, 28, 28)
        for d, t in itertools.product(range(grid.shape[0]), range(grid.shape[1])):
            frames[(i, d, t)] = encode_png(to_uint8(grid[d, t]))
            data[(i, d, t)] = grid[d, t]
    zero = list(deltas).index(0.0) if 0.0 in deltas else 0
    controls = [Control("test digit", [f"#{i} (predicted {int(y)})" for i, y in enumerate(labels)], "select", 0),
                Control("dimension", [str(d + 1) for d in range(grids[0].shape[0])], "range", 0),
                Control("value", [f"{v:+.2f}" for v in deltas], "range", zero)]
    twin = Twin("perturbation", controls, frames, data,
                "Reconstruction from the predicted digit capsule with one dimension changed", pixelated=True)
    twin.labels = labels
    return twin


def to_uint8(image: torch.Tensor) -> np.ndarray:
    """Decoder output in [0, 1] (28, 28) -> grey uint8 pixels."""
    return (image.clamp(0, 1) * 255).round().to(torch.uint8).numpy()
