"""Floor 6: the book's experiments as functions (Su Jianlin's two-digit experiment).

- ``set_hits``, ``pair_metrics``: does the top-k of the scores pick exactly the k true classes
  (strictly: a tie at the border of the top-k is a miss); Su's top-2 and top-2 > 0.5 accuracies.
- ``make_model``: the pooling baseline or a shared-weight capsule head (Su's or Hinton's
  routing), ~270k parameters each, initialised as Keras does (``keras_init_``), as in Su's script.
- ``two_digit_experiment``: train on single digits only, test on pairs of two distinct digits
  (vertical, horizontal, overlapping), several seeds; a JSON-friendly dict. ``PRESETS`` holds
  the book's settings per mode, shared with ``python -m capsedu two-digits``.
- ``format_table``, ``render_table``: that dict's summary (mean +- std over seeds), or any
  table, as Markdown or HTML.
"""
from __future__ import annotations

import math
import statistics
import time
from html import escape
from types import SimpleNamespace
from typing import Dict, Mapping, Sequence, Union

import torch
from torch import nn
from tqdm.auto import tqdm

from .data import overlapping_pairs, two_digit_pairs
from .layers import SharedCapsules
from .models import CapsuleClassifier, PoolingClassifier
from .params import count_parameters
from .train import fit, predict_lengths, resolve_amp, resolve_device

__all__ = ["MODELS", "LAYOUTS", "INITS", "SU_EPOCHS", "PRESETS", "set_hits", "pair_metrics", "keras_init_",
           "make_model", "two_digit_test_set", "two_digit_experiment", "render_table", "format_table"]

# name -> what the head is; all three share Su's ConvStack.
MODELS = {
    "pooling": "global average pooling -> dense 128 -> 10 sigmoids",
    "capsule-su": "shared-weight capsules, Su's routing (b <- <u_hat, v>)",
    "capsule-hinton": "shared-weight capsules, Hinton's routing (b <- b + <u_hat, v>)",
}
# vertical: Su's script (56x28); horizontal: his prose (28x56); overlapping: MultiMNIST-style 36x36.
LAYOUTS = ("vertical", "horizontal", "overlapping")
INITS = ("keras", "torch")  # keras: Glorot-uniform weights and zero biases, as in Su's script
SU_EPOCHS = {"pooling": 20, "capsule-su": 10, "capsule-hinton": 10}  # his capsule_test.py; batch 128
CONFIDENCE = 0.5

# The book's and the CLI's settings per mode (capsedu.current_mode()); "source" is the MNIST source.
# full is Su's script: all of MNIST, batch 128, 20 epochs for pooling and 10 for the capsule heads.
# quick fits a 2-core CPU: 3,000 sample digits, batch 16 (more steps per image), Su's 2:1 epoch ratio.
_COMMON = dict(models=tuple(MODELS), seeds=(0, 1, 2), lr=1e-3, margin_lam=0.25, squash_k=0.5, iterations=3,
               init="keras", layouts=LAYOUTS, shift=0)
PRESETS = {
    "smoke": dict(_COMMON, source="sample", epochs=1, batch_size=16, n_train=64, n_test=100, n_pairs=100),
    "quick": dict(_COMMON, source="sample", epochs={"pooling": 2, "capsule-su": 1, "capsule-hinton": 1},
                  batch_size=16, n_train=3000, n_test=500, n_pairs=400),
    "full": dict(_COMMON, source="auto", epochs=SU_EPOCHS, batch_size=128, n_train=None, n_test=None,
                 n_pairs=10000),
}


# ---------------------------------------------------------------- the metric
def set_hits(scores: torch.Tensor, targets: torch.Tensor, threshold=None) -> torch.Tensor:
    """Bool (N,): the classes marked in ``targets`` (N, C) are exactly the top-k of ``scores`` (N, C).

    A hit needs every true class to score *strictly* higher than every other class, so a
    tie at the border of the top-k (the k-th and (k+1)-th scores equal) is a miss: the
    top-k set would be ambiguous. Ties among the true classes do not matter. With
    ``threshold``, the lowest true score (then the k-th highest score) must also be > threshold.
    """
    if not isinstance(scores, torch.Tensor) or scores.dim() != 2 or not scores.is_floating_point():
        raise ValueError(f"scores must be a float tensor (N, C), got {getattr(scores, 'shape', type(scores))}")
    if not isinstance(targets, torch.Tensor) or targets.shape != scores.shape:
        raise ValueError(f"targets must be a multi-hot tensor of shape {tuple(scores.shape)}, "
                         f"got {getattr(targets, 'shape', type(targets))}")
    t = targets.to(scores.device) > 0.5                                 # (N, C) bool
    k = t.sum(dim=1)
    if not ((targets == 0) | (targets == 1)).all() or (k == 0).any() or (k == t.shape[1]).any():
        raise ValueError("targets must be 0/1 with at least one true and one false class per row")
    if not torch.isfinite(scores).all():
        raise ValueError("scores contain NaN or inf")
    s = scores.float()
    lowest_true = s.masked_fill(~t, math.inf).amin(dim=1)               # (N,)
    highest_false = s.masked_fill(t, -math.inf).amax(dim=1)             # (N,)
    hits = lowest_true > highest_false
    return hits if threshold is None else hits & (lowest_true > threshold)


def pair_metrics(scores: torch.Tensor, targets: torch.Tensor) -> Dict[str, float]:
    """Su's two accuracies: "top2" (top-2 set = true pair) and "top2_conf" (also 2nd score > 0.5)."""
    hits = set_hits(scores, targets)
    confident = set_hits(scores, targets, threshold=CONFIDENCE)
    return {"top2": hits.float().mean().item(), "top2_conf": confident.float().mean().item()}


# ---------------------------------------------------------------- models and test sets
@torch.no_grad()
def keras_init_(model: nn.Module) -> nn.Module:
    """Re-initialise in place as Keras does by default: Glorot-uniform weights, zero biases."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, SharedCapsules):  # Su's W is a (1, in_dim, n_out * out_dim) conv1d kernel
            n_out, out_dim, in_dim = m.weight.shape
            bound = math.sqrt(6.0 / (in_dim + n_out * out_dim))
            m.weight.uniform_(-bound, bound)
    return model


def make_model(name: str, squash_k: float = 0.5, iterations: int = 3, init: str = "keras") -> nn.Module:
    """One of ``MODELS`` (squash_k and iterations matter for the capsule heads only).

    ``init="keras"``: Su's initialisation (Keras defaults); ``"torch"``: PyTorch's defaults.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; expected one of {tuple(MODELS)}")
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}; expected one of {INITS}")
    if name == "pooling":
        model = PoolingClassifier()
    else:
        model = CapsuleClassifier(routing=name.split("-")[1], squash_k=squash_k, iterations=iterations)
    return keras_init_(model) if init == "keras" else model


def two_digit_test_set(x: torch.Tensor, y: torch.Tensor, n: int, layout: str, seed: int = 1234):
    """n test images of two distinct digits in ``layout``, with multi-hot targets (n, 10).

    The same ``seed`` draws the same digit pairs for every layout, so layouts differ in layout only.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")
    generator = torch.Generator().manual_seed(seed)  # on the CPU: the same pairs on any device
    if layout == "overlapping":
        return overlapping_pairs(x, y, n, generator=generator)         # (n, 1, 36, 36)
    return two_digit_pairs(x, y, n, layout, generator=generator)       # (n, 1, 56, 28) or (n, 1, 28, 56)


# ---------------------------------------------------------------- the experiment
def _check_count(name, value, allow_none=False):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int{' or None' if allow_none else ''}, got {value!r}")


def _epochs_per_model(epochs, models) -> Dict[str, int]:
    if isinstance(epochs, Mapping):
        missing = [m for m in models if m not in epochs]
        if missing:
            raise ValueError(f"epochs has no entry for {missing}; give an int or one per model")
        out = {m: epochs[m] for m in models}
    else:
        out = {m: epochs for m in models}
    for m, e in out.items():
        _check_count(f"epochs[{m!r}]", e)
    return out


def _spread(values):
    """(mean, sample std) of a list; std is None for a single value."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def two_digit_experiment(data, models: Sequence[str] = tuple(MODELS), seeds: Sequence[int] = (0, 1, 2),
                         epochs: Union[int, Mapping[str, int]] = 5, batch_size: int = 128, lr: float = 1e-3,
                         margin_lam: float = 0.25, squash_k: float = 0.5, iterations: int = 3,
                         init: str = "keras", n_train=None, n_test=None, n_pairs: int = 10000,
                         layouts: Sequence[str] = ("vertical", "horizontal"), shift: int = 0,
                         device="auto", amp="off", pair_seed: int = 1234, progress: bool = True,
                         return_models: bool = False) -> Dict:
    """Train each of ``models`` once per seed on single digits; test on single digits and on pairs.

    ``data``: x_train, y_train, x_test, y_test (images (N, 1, H, W), integer labels). Training
    follows Su's script: Adam at a constant ``lr``, the multi-class margin loss (m+ 0.9, m- 0.1,
    ``margin_lam``), no shifts unless ``shift``; ``epochs`` is an int or one per model (Su:
    ``SU_EPOCHS``). ``n_train``/``n_test``: use the first N training/test digits. Single-digit
    accuracy is ``fit``'s (argmax); the pair metrics are ``pair_metrics`` on float32 scores.
    Test pairs are drawn once from the test digits (``pair_seed``) and shared by every model,
    seed and layout. Returns {"config", "table" (one row per model: mean and std over seeds),
    "runs" (one row per model and seed), "seconds"}; with ``return_models`` also "trained":
    {model name: [trained model per seed]} (not JSON).
    """
    models, seeds, layouts = list(models), list(seeds), list(layouts)
    for name, items, allowed in (("models", models, tuple(MODELS)), ("layouts", layouts, LAYOUTS)):
        bad = [v for v in items if v not in allowed]
        if not items or bad or len(set(items)) != len(items):
            raise ValueError(f"{name} must be distinct values from {allowed}, got {items!r}")
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds) \
            or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct ints >= 0, got {seeds!r}")
    per_model_epochs = _epochs_per_model(epochs, models)
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}; expected one of {INITS}")
    for name, value, allow_none in (("batch_size", batch_size, False), ("n_pairs", n_pairs, False),
                                    ("iterations", iterations, False), ("n_train", n_train, True),
                                    ("n_test", n_test, True)):
        _check_count(name, value, allow_none)
    for name, value in (("lr", lr), ("squash_k", squash_k)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    if isinstance(margin_lam, bool) or not isinstance(margin_lam, (int, float)) or margin_lam < 0:
        raise ValueError(f"margin_lam must be a number >= 0, got {margin_lam!r}")
    for split in ("train", "test"):
        x, y = getattr(data, "x_" + split, None), getattr(data, "y_" + split, None)
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)) or x.dim() != 4 or x.shape[1] != 1 \
                or y.dim() != 1 or y.is_floating_point() or len(x) != len(y) or len(x) == 0:
            raise ValueError(f"data needs x_{split} (N, 1, 28, 28) and integer labels y_{split} (N,)")

    start = time.perf_counter()
    device = resolve_device(device)
    amp = resolve_amp(amp, device)
    x_train, y_train = data.x_train[:n_train].to(device), data.y_train[:n_train].to(device)
    x_test, y_test = data.x_test[:n_test].to(device), data.y_test[:n_test].to(device)
    singles = SimpleNamespace(x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    tests = {layout: two_digit_test_set(x_test, y_test, n_pairs, layout, pair_seed) for layout in layouts}

    runs, trained, params = [], {m: [] for m in models}, {}
    bar = tqdm(total=len(models) * len(seeds), desc="two-digit experiment", disable=not progress)
    for name in models:
        for seed in seeds:
            bar.set_postfix(model=name, seed=seed)
            torch.manual_seed(seed)  # initial weights: the two capsule models start from the same ones
            model = make_model(name, squash_k, iterations, init)
            params[name] = count_parameters(model)
            model.to(device=device, memory_format=torch.channels_last)  # ~15% faster convolutions on a CPU
            t0 = time.perf_counter()
            history = fit(model, singles, epochs=per_model_epochs[name], batch_size=batch_size, lr=lr,
                          lr_decay=1.0, device=device, amp=amp, seed=seed, shift=shift, loss="margin",
                          margin_lam=float(margin_lam), eval_every=per_model_epochs[name], progress=False)
            # fit's own test accuracy (argmax) on the single digits: no second pass over them
            row = {"model": name, "seed": seed, "train_seconds": round(time.perf_counter() - t0, 2),
                   "final_loss": history[-1]["loss"], "single_acc": history[-1]["test_acc"]}
            for layout, (images, targets) in tests.items():
                for metric, value in pair_metrics(predict_lengths(model, images), targets).items():
                    row[f"{layout}_{metric}"] = value
            runs.append(row)
            if return_models:
                trained[name].append(model.eval())
            bar.update()
    bar.close()

    fields = ["single_acc"] + [f"{layout}_{metric}" for layout in layouts for metric in ("top2", "top2_conf")]
    table = []
    for name in models:
        row = {"model": name, "head": MODELS[name], "params": params[name], "seeds": len(seeds)}
        for f in fields:
            row[f], row[f + "_std"] = _spread([r[f] for r in runs if r["model"] == name])
        table.append(row)
    config = {"models": models, "seeds": seeds, "epochs": per_model_epochs, "batch_size": batch_size,
              "lr": float(lr), "margin_lam": float(margin_lam), "squash_k": float(squash_k),
              "iterations": iterations, "init": init, "shift": shift, "n_train": len(x_train), "n_test": len(x_test),
              "n_pairs": n_pairs, "layouts": layouts, "pair_seed": pair_seed, "device": str(device), "amp": amp,
              "data": [getattr(data, "name", None), getattr(data, "source", None)]}
    result = {"config": config, "table": table, "runs": runs, "seconds": round(time.perf_counter() - start, 2)}
    if return_models:
        result["trained"] = trained
    return result


def render_table(heads: Sequence[str], rows: Sequence[Sequence], html: bool = False) -> str:
    """A table as Markdown, or as HTML (which notebooks and the rendered book both display)."""
    if html:
        def line(cells, tag):
            return "<tr>" + "".join(f"<{tag}>{escape(str(c))}</{tag}>" for c in cells) + "</tr>"
        body = "\n".join(line(r, "td") for r in rows)
        return f"<table>\n<thead>{line(heads, 'th')}</thead>\n<tbody>\n{body}\n</tbody>\n</table>"
    lines = ["| " + " | ".join(map(str, heads)) + " |", "|" + "---|" * len(heads)]
    return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def format_table(result: Dict, digits: int = 3, html: bool = False) -> str:
    """The result's table: one row per model, mean +- std over seeds for each metric."""
    layouts = result["config"]["layouts"]
    heads = ["model", "params", "single digit"] + [f"{lay} {m}" for lay in layouts for m in ("top-2", "top-2 > 0.5")]
    rows = []
    for row in result["table"]:
        cells = [row["model"], f"{row['params']:,}"]
        for f in ["single_acc"] + [f"{lay}_{m}" for lay in layouts for m in ("top2", "top2_conf")]:
            std = row[f + "_std"]
            cells.append(f"{row[f]:.{digits}f}" + ("" if std is None else f" ± {std:.{digits}f}"))
        rows.append(cells)
    return render_table(heads, rows, html)
