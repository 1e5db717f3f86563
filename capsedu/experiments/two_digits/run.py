"""Su Jianlin's two-digit experiment: train on single digits, recognise two at once.

- ``set_hits``, ``pair_metrics``: does the top-k of the scores pick exactly the k true classes
  (strictly: a tie at the border of the top-k is a miss); Su's top-2 and top-2 > 0.5 accuracies.
- ``make_model``: the pooling baseline or a shared-weight capsule head (Su's January or March
  routing, or Hinton's), ~280k parameters each, initialised as Keras does, as in Su's script.
- ``two_digit_experiment(data, config)``: every model once per seed on single digits, tested on
  pairs of two distinct digits (vertical, horizontal, overlapping); a JSON-friendly dict. It can
  resume: runs already in ``previous`` are kept, and ``checkpoint_dir`` resumes a run mid-way.
- ``format_table``, ``curve``: the result's summary (mean ± std over seeds) and learning curves.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from types import SimpleNamespace
from typing import Callable, Dict, List, Optional

import torch
from torch import nn
from tqdm.auto import tqdm

from capsedu.core.heads import CapsuleClassifier, PoolingClassifier, keras_init_
from capsedu.core.params import count_parameters
from capsedu.data.pairs import overlapping_pairs, two_digit_pairs
from capsedu.experiments.shared.runs import spread
from capsedu.experiments.two_digits.config import INITS, LAYOUTS, MODELS, TwoDigitConfig
from capsedu.figures.tables import mean_std, render_table
from capsedu.runtime.device import resolve_amp, resolve_device
from capsedu.training.evaluation import predict_lengths
from capsedu.training.loop import fit

__all__ = ["set_hits", "pair_metrics", "make_model", "two_digit_test_set",
           "two_digit_experiment", "estimate_seconds", "format_table", "curve", "CONFIDENCE"]

CONFIDENCE = 0.5


# ---------------------------------------------------------------- the metric
def set_hits(scores: torch.Tensor, targets: torch.Tensor, threshold=None) -> torch.Tensor:
    """Bool (N,): the classes marked in ``targets`` (N, C) are exactly the top-k of ``scores`` (N, C).

    A hit needs every true class to score *strictly* higher than every other class, so a
    tie at the border of the top-k (the k-th and (k+1)-th scores equal) is a miss: the
    top-k set would be ambiguous. Ties among the true classes do not matter. With
    ``threshold``, the lowest true score (then the k-th highest score) must also be > threshold.
    """
    lowest_true, highest_false = _border(scores, targets)
    hits = lowest_true > highest_false
    return hits if threshold is None else hits & (lowest_true > threshold)


def _border(scores, targets):
    """(lowest true score, highest false score), each (N,), after checking the arguments."""
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
    return s.masked_fill(~t, math.inf).amin(dim=1), s.masked_fill(t, -math.inf).amax(dim=1)


def pair_metrics(scores: torch.Tensor, targets: torch.Tensor) -> Dict[str, float]:
    """Su's two accuracies, "top2" and "top2_conf" (2nd score also > 0.5), and "ties": the share of
    images whose weaker true class ties with the strongest false one (counted as misses here)."""
    lowest_true, highest_false = _border(scores, targets)
    hits = lowest_true > highest_false
    return {"top2": hits.float().mean().item(),
            "top2_conf": (hits & (lowest_true > CONFIDENCE)).float().mean().item(),
            "ties": (lowest_true == highest_false).float().mean().item()}


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
    else:  # "capsule-su" -> routing "su", "capsule-su-march" -> "su-march"
        model = CapsuleClassifier(routing=name.split("-", 1)[1], squash_k=squash_k, iterations=iterations)
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
def _check_data(data):
    for split in ("train", "test"):
        x, y = getattr(data, "x_" + split, None), getattr(data, "y_" + split, None)
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)) or x.dim() != 4 or x.shape[1] != 1 \
                or y.dim() != 1 or y.is_floating_point() or len(x) != len(y) or len(x) == 0:
            raise ValueError(f"data needs x_{split} (N, 1, 28, 28) and integer labels y_{split} (N,)")


def _pair_scores(model, tests) -> Dict[str, float]:
    """{layout_metric: value} for every test layout."""
    return {f"{layout}_{metric}": value for layout, (images, targets) in tests.items()
            for metric, value in pair_metrics(predict_lengths(model, images), targets).items()}


def two_digit_experiment(data, config: TwoDigitConfig, device="auto", progress: bool = True,
                         previous: Optional[Dict] = None, checkpoint_dir: Optional[str] = None,
                         on_run_end: Optional[Callable[[Dict], None]] = None, return_models: bool = False) -> Dict:
    """Train each model of ``config`` once per seed on single digits; test on single digits and pairs.

    ``data``: x_train, y_train, x_test, y_test (images (N, 1, H, W), integer labels). Training
    follows Su's script: Adam, the multi-class margin loss (m+ 0.9, m- 0.1, ``margin_lam``), no
    shifts unless ``shift``. Test pairs are drawn once from the test digits (``pair_seed``) and
    shared by every model, seed and layout. ``previous``: an earlier result of the same config,
    whose finished runs are kept; ``checkpoint_dir``: a checkpoint per run, so an interrupted run
    resumes at its last finished epoch; ``on_run_end(result)`` after every finished run (the CLI
    writes the JSON there). Returns {"config", "table", "runs", "seconds"}; ``return_models`` adds
    "trained": {model: [model per seed trained here]} (not JSON).
    """
    if not isinstance(config, TwoDigitConfig):
        raise TypeError(f"config must be a TwoDigitConfig, got {type(config).__name__}")
    _check_data(data)
    runs: List[Dict] = []
    if previous is not None:
        if previous.get("config") != config.as_dict():
            raise ValueError("previous holds a result of other settings; start a new file instead")
        runs = [r for r in previous.get("runs", []) if r["model"] in config.models and r["seed"] in config.seeds]
    start = time.perf_counter() - (previous or {}).get("seconds", 0.0)
    device = resolve_device(device)
    amp = resolve_amp(config.amp, device)
    x_train, y_train = data.x_train[:config.n_train].to(device), data.y_train[:config.n_train].to(device)
    x_test, y_test = data.x_test[:config.n_test].to(device), data.y_test[:config.n_test].to(device)
    singles = SimpleNamespace(x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    tests = {layout: two_digit_test_set(x_test, y_test, config.n_pairs, layout, config.pair_seed)
             for layout in config.layouts}
    done = {(r["model"], r["seed"]) for r in runs}
    trained = {m: [] for m in config.models}
    meta = {"n_train": len(x_train), "n_test": len(x_test), "device": str(device), "amp": amp,
            "data": [getattr(data, "name", None), getattr(data, "source", None)]}

    def result():
        return {"config": config.as_dict(), "meta": dict(meta), "table": _summary(config, runs),
                "runs": [dict(r) for r in runs],
                "seconds": round(time.perf_counter() - start, 2)}

    # seed by seed, so that an interrupted run already compares every model on its first seeds
    todo = [(m, s) for s in config.seeds for m in config.models if (m, s) not in done]
    total_epochs = sum(config.epochs[m] for m, _ in todo)
    bar = tqdm(total=total_epochs, desc="two-digit experiment", unit="epoch", disable=not progress)
    for name, seed in todo:
        torch.manual_seed(seed)  # initial weights: the capsule heads start from the same ones
        model = make_model(name, config.squash_k, config.iterations, config.init)
        model.to(device=device, memory_format=torch.channels_last)  # ~15% faster convolutions on a CPU
        epochs = config.epochs[name]

        def after_epoch(epoch, net, name=name, seed=seed):
            bar.update()
            bar.set_postfix(model=name, seed=seed, epoch=epoch)
            return _pair_scores(net, tests) if config.curve else {}

        ckpt = None if checkpoint_dir is None else os.path.join(checkpoint_dir, f"{name}-seed{seed}.pt")
        history = fit(model, singles, epochs=epochs, batch_size=config.batch_size, lr=config.lr,
                      lr_schedule=config.lr_schedule, device=device, amp=amp, seed=seed, shift=config.shift,
                      loss="margin", margin_lam=float(config.margin_lam), eval_every=1 if config.curve else epochs,
                      checkpoint=ckpt, on_epoch_end=after_epoch, progress=False)
        row = {"model": name, "seed": seed, "params": count_parameters(model),
               "train_seconds": round(sum(e["seconds"] for e in history.epochs), 2),
               "final_loss": history[-1]["loss"], "single_acc": history[-1]["test_acc"]}
        row.update(_pair_scores(model, tests))
        if config.curve:
            keys = ["test_acc"] + [k for k in history[-1] if k.split("_")[0] in config.layouts]
            row["curve"] = {k: [e.get(k) for e in history.epochs] for k in keys}
        runs.append(row)
        if return_models:
            trained[name].append(model.eval())
        if on_run_end is not None:
            on_run_end(result())
    bar.close()
    out = result()
    if return_models:
        out["trained"] = trained
    return out


def estimate_seconds(config: TwoDigitConfig, data, device="auto", steps: int = 3) -> float:
    """Rough wall time of ``two_digit_experiment(data, config)`` on ``device``: a few timed training
    steps of a capsule head (the slower kind), scaled to every epoch of every run, plus 10% for tests."""
    device = resolve_device(device)
    n = len(data.x_train[:config.n_train])
    model = make_model("capsule-su", config.squash_k, config.iterations, config.init)
    model.to(device=device, memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    x = data.x_train[:config.batch_size].to(device)
    t = torch.nn.functional.one_hot(data.y_train[:config.batch_size].to(device), 10).float()
    timings = []
    for _ in range(steps + 1):                                      # the first step warms up
        t0 = time.perf_counter()
        loss = (model(x) - t).pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        timings.append(time.perf_counter() - t0)
    per_step = statistics.median(timings[1:])
    epochs = sum(config.epochs.values()) * len(config.seeds)
    return 1.1 * per_step * math.ceil(n / config.batch_size) * epochs


def _fields(layouts) -> List[str]:
    return ["single_acc"] + [f"{lay}_{m}" for lay in layouts for m in ("top2", "top2_conf", "ties")]


def _summary(config: TwoDigitConfig, runs: List[Dict]) -> List[Dict]:
    """One row per model with finished runs: mean and std over its seeds."""
    table = []
    for name in config.models:
        mine = [r for r in runs if r["model"] == name]
        if not mine:
            continue
        row = {"model": name, "head": MODELS[name], "params": mine[0]["params"], "seeds": len(mine)}
        for f in _fields(config.layouts):
            row[f], row[f + "_std"] = spread([r[f] for r in mine])
        table.append(row)
    return table


def format_table(result: Dict, digits: int = 3, html: bool = False) -> str:
    """The result's table: one row per model, mean ± std over seeds for each metric."""
    layouts = result["config"]["layouts"]
    heads = ["model", "params", "seeds", "single digit"] + [f"{lay} {m}" for lay in layouts
                                                           for m in ("top-2", "top-2 > 0.5")]
    rows = []
    for row in result["table"]:
        cells = [row["model"], f"{row['params']:,}", row["seeds"]]
        for f in ["single_acc"] + [f"{lay}_{m}" for lay in layouts for m in ("top2", "top2_conf")]:
            cells.append(mean_std(row[f], row[f + "_std"], digits))
        rows.append(cells)
    return render_table(heads, rows, html)


def curve(result: Dict, model: str, key: str):
    """(epochs, mean, std) of a per-epoch measurement over the seeds of ``model`` (needs ``curve``)."""
    curves = [r["curve"][key] for r in result["runs"] if r["model"] == model and key in r.get("curve", {})]
    if not curves:
        raise ValueError(f"the result has no learning curve of {key!r} for {model!r}")
    columns = list(zip(*curves))                                    # one tuple of seeds per epoch
    means = [statistics.fmean(c) for c in columns]
    stds = [statistics.stdev(c) if len(c) > 1 else 0.0 for c in columns]
    return list(range(1, len(columns) + 1)), means, stds
