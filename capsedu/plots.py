"""Floor 5: the figures behind the widgets and their static twins (matplotlib).

- Pure computations: ``squash_curves``, ``toy_predictions``, ``capsnet_predictions``,
  ``routing_frames``, ``perturb`` and ``perturbation_grid``.
- Renderers (``SquashPlot``, ``RoutingPlot``, ``PerturbationPlot``): one matplotlib
  ``Figure`` each, built once; ``update(...)`` changes the artists' data and ``png()``
  draws it. The live widgets (``widgets.py``) and the static twins (``static.py``) draw
  with the same renderers. The figures are never registered with pyplot, so nothing
  here creates a figure per event or leaks one.
"""
from __future__ import annotations

import io
import operator
from contextlib import contextmanager
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.patches import Circle
from PIL import Image as PILImage

from .functional import NORM_COMPRESSIONS, check_images, compress, safe_norm, squash
from .models import CapsNet
from .routing import dynamic_routing

__all__ = ["SQUASH_VARIANTS", "PAPER_DELTAS", "one_thread", "squash_curves", "toy_predictions",
           "capsnet_predictions", "routing_frames", "perturb", "perturbation_grid", "SquashPlot",
           "RoutingPlot", "PerturbationPlot", "check_capsnet", "capsnet_images", "check_deltas"]

SQUASH_VARIANTS = tuple(NORM_COMPRESSIONS)          # paper, su, tanh, exp, rational
VARIANT_LABELS = {"paper": "paper  n²/(1+n²)", "su": "Su  n²/(0.5+n²)", "tanh": "tanh n",
                  "exp": "1 − exp(−n)", "rational": "n/(1+n)"}
PAPER_DELTAS = tuple(round(-0.25 + 0.05 * t, 2) for t in range(11))   # -0.25, -0.20, ..., 0.25
DPI = 72
MODE_NAMES = {"hinton": "Hinton b ← b + û·v", "su": "Su b ← û·v"}

# ---------------------------------------------------------------- pure computations
@contextmanager
def one_thread():
    """Run torch on one thread: the widgets' tensors are tiny, and on a busy 2-core machine the
    thread pool's hand-offs cost 100x the arithmetic (180 ms instead of 1 ms for one routing)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def squash_curves(k: float = 1.0, names: Sequence[str] = SQUASH_VARIANTS, max_length: float = 4.0,
                  points: int = 161, example: Optional[float] = None) -> Dict[str, np.ndarray]:
    """Output length against input length for ``squash(., k)`` and the named variants.

    Returns {"n": input lengths, "squash": lengths of squash(s, k), name: lengths of compress(s, name)};
    with ``example``, the entries are the lengths for that single input length instead.
    """
    n = torch.tensor([float(example)]) if example is not None else torch.linspace(0, max_length, points)
    s = torch.stack([0.6 * n, -0.8 * n, 0 * n], dim=-1)                  # vectors of length n: (P, 3)
    out = {"n": n.numpy(), "squash": safe_norm(squash(s, k=k), eps=0.0).numpy()}
    for name in names:
        out[name] = safe_norm(compress(s, name), eps=0.0).numpy()
    return out


def toy_predictions(seed: int = 0, n_in: int = 12) -> torch.Tensor:
    """A 2-D toy layer: ``n_in`` lower capsules predict 3 parents; (1, n_in, 3, 2).

    Half the lower capsules agree about parent 1, a third about parent 2, the rest about
    parent 3; every other prediction is scattered at random.
    """
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[0.6, 0.3], [-0.4, 0.6], [0.2, -0.7]])           # (3, 2)
    owner = torch.tensor([0] * (n_in // 2) + [1] * (n_in // 3) + [2] * (n_in - n_in // 2 - n_in // 3))
    u_hat = 0.6 * torch.randn(n_in, 3, 2, generator=g)                      # disagreeing votes
    u_hat[torch.arange(n_in), owner] = centres[owner] + 0.1 * torch.randn(n_in, 2, generator=g)
    return u_hat.unsqueeze(0)                                                # (1, N_in, N_out, D)


def check_capsnet(model, who: str) -> None:
    """The explorers and twins read a CapsNet's conv1, primary and digit capsules and decoder."""
    if not isinstance(model, CapsNet):
        raise TypeError(f"{who}: expected a capsedu CapsNet (e.g. capsedu.pretrained.load_capsnet()), "
                        f"got {type(model).__name__}")


def capsnet_images(model, images, who: str) -> torch.Tensor:
    """``images`` (N, C, H, W), or one image (C, H, W), checked against the CapsNet's config -> (N, C, H, W)."""
    check_capsnet(model, who)
    c = model.config
    want = (c.in_channels, *c.image_size)
    if want != (1, 28, 28):
        raise ValueError(f"{who}: the explorers draw 28x28 grey digits; this CapsNet takes images {want}")
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"{who}: expected a tensor of images (N, {', '.join(map(str, want))}), "
                        f"got {type(images).__name__}")
    x = images.unsqueeze(0) if images.dim() == 3 else images
    if x.dim() != 4 or tuple(x.shape[1:]) != want or len(x) == 0:
        raise ValueError(f"{who}: expected images of shape (N, {', '.join(map(str, want))}) with N >= 1, "
                         f"or one image {want}, got {tuple(images.shape)}")
    check_images(x.float(), f"{who}: images")
    return x.float()


@torch.no_grad()
def capsnet_predictions(model, image: torch.Tensor):
    """One image (1, 28, 28) -> (u_hat (1, 1152, 10, 16), primary lengths (1152,)) of a CapsNet."""
    x = capsnet_images(model, image, "capsnet_predictions")
    if len(x) != 1:
        raise ValueError(f"capsnet_predictions: expected one image, got a batch of {len(x)}")
    x = x.to(next(model.parameters()).device)
    primary = model.primary(F.relu(model.conv1(x)))                          # (1, 1152, 8)
    return model.digits.predictions(primary).cpu(), safe_norm(primary[0]).cpu()


@torch.no_grad()
def routing_frames(u_hat: torch.Tensor, iterations: int = 3, mode: str = "hinton",
                   squash_k: float = 1.0) -> List[Dict[str, torch.Tensor]]:
    """Per iteration t = 1..r of ``dynamic_routing`` on example 0: {"c": (N_in, N_out), "s", "v": (N_out, D)}.

    ``c`` is the history that ``dynamic_routing(..., return_history=True)`` returns; ``s`` and
    ``v`` are recomputed from it (line 5 and 6 of Procedure 1), so the last ``v`` is the output.
    """
    _, history = dynamic_routing(u_hat[:1], iterations, mode, return_history=True, squash_k=squash_k)
    frames = []
    for c in history:
        s = torch.einsum("ij,ijd->jd", c[0], u_hat[0])                     # s_j = sum_i c_ij u_hat_j|i
        frames.append({"c": c[0], "s": s, "v": squash(s, k=squash_k)})
    return frames


def _check_capsule_choice(caps: torch.Tensor, label, dim) -> None:
    """``label`` indexes a digit capsule of ``caps`` (1, C, D) and ``dim`` (if given) one of its D numbers."""
    C, D = caps.shape[-2:]
    for value, name, size in ((label, "label", C), (dim, "dim", D)):
        if value is None and name == "dim":
            continue
        try:
            index = operator.index(value)  # ints, numpy ints, 0-d integer tensors
        except TypeError:
            index = None
        if isinstance(value, bool) or index is None or not 0 <= index < size:
            raise ValueError(f"{name} must be an int in [0, {size - 1}], got {value!r}")


def check_deltas(deltas, who: str):
    """A non-empty sequence of finite numbers (the perturbation values), returned as a tuple of floats."""
    try:
        values = tuple(float(v) for v in deltas)
    except (TypeError, ValueError):
        raise TypeError(f"{who}: deltas must be a sequence of numbers, got {deltas!r}") from None
    if not values or not all(np.isfinite(values)):
        raise ValueError(f"{who}: deltas must be a non-empty sequence of finite numbers, got {deltas!r}")
    return values


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _decode(model, capsules: torch.Tensor, label: int) -> torch.Tensor:
    """Decoder output (B, 28, 28) for digit capsules (B, 10, 16), masked by ``label``."""
    mask = F.one_hot(torch.full((capsules.shape[0],), int(label)), capsules.shape[1]).to(capsules.device)
    return model.decoder(capsules, mask)[:, 0]


@torch.no_grad()
def perturb(model, capsules: torch.Tensor, label: int, dim=None, delta=0.0) -> torch.Tensor:
    """Reconstruction (28, 28) after adding ``delta`` to dimension ``dim`` of capsule ``label``.

    ``capsules``: (10, 16) or (1, 10, 16). ``dim=None`` with ``delta`` a 16-vector adds the
    whole vector (the live widget's 16 sliders at once).
    """
    caps = capsules.reshape(1, *capsules.shape[-2:]).to(_device(model), copy=True)   # (1, 10, 16)
    _check_capsule_choice(caps, label, dim)
    if dim is None:
        caps[0, label] += torch.as_tensor(delta, dtype=caps.dtype, device=caps.device)
    else:
        caps[0, label, dim] += delta
    return _decode(model, caps, label)[0].cpu()


@torch.no_grad()
def perturbation_grid(model, capsules: torch.Tensor, label: int,
                      deltas: Sequence[float] = PAPER_DELTAS) -> torch.Tensor:
    """The paper's Figure 4 for one digit: reconstructions (16, len(deltas), 28, 28), one decoder call."""
    caps = capsules.reshape(1, *capsules.shape[-2:]).to(_device(model))        # (1, 10, 16)
    _check_capsule_choice(caps, label, None)
    deltas = check_deltas(deltas, "perturbation_grid")
    D, V = caps.shape[-1], len(deltas)
    batch = caps.repeat(D * V, 1, 1)                                          # (D*V, 10, 16)
    rows = torch.arange(D).repeat_interleave(V)
    batch[torch.arange(D * V), label, rows] += torch.tensor(deltas, dtype=caps.dtype).repeat(D).to(caps.device)
    recon = _decode(model, batch, label)                                      # (D*V, H, W)
    return recon.reshape(D, V, *recon.shape[-2:]).cpu()


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
        super().__init__(6.4, 3.6)
        self.ax = ax = self.fig.add_subplot()
        base = squash_curves(1.0)
        self.lines = {name: ax.plot(base["n"], base[name], lw=1.2, label=VARIANT_LABELS[name])[0]
                      for name in SQUASH_VARIANTS}
        self.main, = ax.plot(base["n"], base["squash"], color="black", lw=2.5)
        self.marker = ax.axvline(1.0, color="0.5", ls="--", lw=0.8)
        self.dots = ax.scatter([], [], color="black", zorder=3, s=18)
        self.note = ax.text(0.98, 0.04, "", transform=ax.transAxes, ha="right", va="bottom", fontsize=9)
        ax.set(xlim=(0, 4), ylim=(0, 1.02), xlabel="input length |s|", ylabel="output length |v|")
        ax.set_title("length maps: the squash with slider k (black) and the chosen variants", fontsize=10)
        self.moving = [*self.lines.values(), self.main, self.marker, self.dots, self.note]
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
        self.note.set_text(f"|s| = {example:.2f}  ->  |v| = {point['squash'][0]:.3f} (k = {k:g})")
        if self.legend is not None:
            self.moving.remove(self.legend)
        self.legend = self.ax.legend(handles=[self.main, *[self.lines[n] for n in SQUASH_VARIANTS if n in names]],
                                     loc="upper left", fontsize=8)
        self.legend.set_animated(self._background is not None)
        self.moving.append(self.legend)
        self.state = {"k": k, "names": tuple(names), "example": example, "curves": curves, "point": point}
        return self


class RoutingPlot(FramePlot):
    """Toy 2-D routing (3 parents) and a CapsNet's c_ij heat map with its |v_j|, at one iteration."""

    def __init__(self, toy: torch.Tensor, capsnet: Optional[tuple] = None, rows: int = 40):
        super().__init__(12.5, 3.5)
        self.toy, self.capsnet = toy, capsnet
        ncols = 5 if capsnet is not None else 3
        axes = self.fig.subplots(1, ncols, width_ratios=[1, 1, 1, 0.9, 0.9][:ncols])
        self.arrows, self.points, self.titles = [], [], []
        for j, ax in enumerate(axes[:3]):
            ax.add_patch(Circle((0, 0), 1.0, fill=False, color="0.8", lw=0.8))   # |v| < 1 inside
            pts = toy[0, :, j].numpy()
            self.points.append(ax.scatter(pts[:, 0], pts[:, 1], c=np.zeros(len(pts)), cmap="viridis",
                                          vmin=0, vmax=1, s=20, edgecolors="0.3", linewidths=0.4))
            self.arrows.append(ax.quiver([0, 0], [0, 0], [0, 0], [0, 0], color=["0.6", "black"],
                                         angles="xy", scale_units="xy", scale=1, width=0.012))
            ax.set(xlim=(-2, 2), ylim=(-2, 2), aspect="equal", xlabel="dim 1")
            ax.set_ylabel("dim 2" if j == 0 else "")
            self.titles.append(ax.set_title("", fontsize=9))
        if capsnet is not None:
            self.n_rows = rows
            self.set_capsnet(capsnet)
            self.heat = axes[3].imshow(np.ones((rows, 10)), cmap="RdBu_r", norm=LogNorm(1 / 3, 3),
                                       aspect="auto", interpolation="nearest")
            axes[3].set(xlabel="digit capsule j", ylabel=f"primary capsule i ({rows} longest)",
                        xticks=range(10))
            bar = self.fig.colorbar(self.heat, ax=axes[3], label="10 c_ij (1 = uniform)", shrink=0.9)
            bar.set_ticks([1 / 3, 1 / 2, 1, 2, 3], labels=["1/3", "1/2", "1", "2", "3"])
            bar.minorticks_off()
            self.bars = axes[4].bar(range(10), np.zeros(10), color="tab:blue")
            axes[4].set(ylim=(0, 1), xticks=range(10), xlabel="digit capsule j", ylabel="|v_j|")
            self.heat_title = axes[3].set_title("", fontsize=9)
            self.bar_title = axes[4].set_title("", fontsize=9)
            self.moving += [self.heat, *self.bars, self.heat_title, self.bar_title]
        self.fig.suptitle("Toy layer: 12 lower capsules vote for 3 parents (dots: predictions, colour c_ij; "
                          "grey arrow s_j, black v_j)" + ("  |  a CapsNet input" if capsnet is not None else ""),
                          fontsize=10)
        self.moving += [*self.points, *self.arrows, *self.titles]
        self.state = None

    def set_capsnet(self, capsnet: tuple):
        """A new CapsNet input: its (u_hat, primary lengths); the heat map shows the longest primaries."""
        self.capsnet = capsnet
        self.rows = torch.argsort(capsnet[1], descending=True)[:self.n_rows]

    def update(self, toy_frames, net_frames, iteration: int, mode: str):
        f = toy_frames[iteration - 1]
        for j in range(3):
            c = f["c"][:, j].numpy()
            self.points[j].set_array(c)
            self.points[j].set_sizes(15 + 70 * c)
            s, v = f["s"][j].numpy(), f["v"][j].numpy()
            self.arrows[j].set_UVC([s[0], v[0]], [s[1], v[1]])
            self.titles[j].set_text(f"parent {j + 1}: |s| {np.linalg.norm(s):.2f}, |v| {np.linalg.norm(v):.2f}"
                                    + (f"\n{MODE_NAMES[mode]}, iteration {iteration} of {len(toy_frames)}" if j == 0 else ""))
        if self.capsnet is not None:
            g = net_frames[iteration - 1]
            self.heat.set_data(g["c"][self.rows].numpy() * g["c"].shape[1])
            lengths = g["v"].norm(dim=-1).numpy()
            for bar, h in zip(self.bars, lengths):
                bar.set_height(h)
            self.heat_title.set_text(f"CapsNet, {MODE_NAMES[mode]}: iteration {iteration} of {len(net_frames)}")
            self.bar_title.set_text(f"|v_j| after iteration {iteration}")
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
