"""Su Jianlin's two-digit experiment: train on single digits, recognise two at once (pairs of distinct
digits, vertical, horizontal or overlapping). The heads, ~280k parameters each, start as Keras's
defaults do, as in Su's script; a tie at the border of the top-2 counts as a miss.
"""
from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Dict, List, Optional

import torch
from torch import nn
from tqdm.auto import tqdm

from capsedu.core.heads import CapsuleClassifier, PoolingClassifier
from capsedu.experiments.shared.keras_init import keras_init_
from capsedu.core.params import count_parameters
from capsedu.core.squashing import safe_norm, squash
from capsedu.data.pairs import overlapping_pairs, two_digit_pairs
from capsedu.experiments.shared.runs import start_experiment
from capsedu.experiments.two_digits.config import INITS, LAYOUTS, MODELS, TwoDigitConfig
from capsedu.runtime.device import resolve_amp
from capsedu.speed.bench import estimate_fit_seconds
from capsedu.training.evaluation import predict_lengths, set_border, set_hits
from capsedu.training.loop import fit

__all__ = ["pair_metrics", "misses", "make_model", "two_digit_test_set", "ink_gap",
           "two_digit_experiment", "estimate_seconds", "CONFIDENCE"]

CONFIDENCE = 0.5


def pair_metrics(scores: torch.Tensor, targets: torch.Tensor) -> Dict[str, float]:
    """Su's two accuracies, "top2" and "top2_conf" (2nd score also > 0.5), and "ties": the share of
    images whose weaker true class ties with the strongest false one (counted as misses here)."""
    lowest_true, highest_false = set_border(scores, targets)
    return {"top2": set_hits(scores, targets).float().mean().item(),
            "top2_conf": set_hits(scores, targets, threshold=CONFIDENCE).float().mean().item(),
            "ties": (lowest_true == highest_false).float().mean().item()}


class SumPoolingClassifier(PoolingClassifier):
    """The control "pooling-sum": pooling's network with the grid summed, not averaged (summing, no capsules)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).sum(dim=(2, 3)))


class AveragedVotesClassifier(CapsuleClassifier):
    """The control "capsule-mean": capsule-su's network with v_j = squash(mean_i u_hat_j|i) (capsules, no sum)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = self.features(x).flatten(2).transpose(1, 2)
        v = squash(self.capsules.predictions(u).mean(dim=1), k=self.capsules.squash_k)
        return safe_norm(v, dim=-1)


def make_model(name: str, squash_k: float = 0.5, iterations: int = 3, init: str = "keras") -> nn.Module:
    """One of ``MODELS``; ``init="keras"``: Su's initialisation (Keras's defaults), ``"torch"``: PyTorch's."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; expected one of {tuple(MODELS)}")
    if init not in INITS:
        raise ValueError(f"unknown init {init!r}; expected one of {INITS}")
    if name == "pooling":
        model = PoolingClassifier()
    elif name == "pooling-sum":
        model = SumPoolingClassifier()
    elif name == "capsule-mean":
        model = AveragedVotesClassifier(squash_k=squash_k, iterations=1)
    elif name == "capsule-su-r1":  # its own name, so that no stored run calls two heads alike
        model = CapsuleClassifier(routing="su", squash_k=squash_k, iterations=1)
    else:  # "capsule-su" -> routing "su", "capsule-su-march" -> "su-march"
        model = CapsuleClassifier(routing=name.split("-", 1)[1], squash_k=squash_k, iterations=iterations)
    return keras_init_(model) if init == "keras" else model


def two_digit_test_set(x: torch.Tensor, y: torch.Tensor, n: int, layout: str, seed: int = 1234):
    """n images of two distinct digits in ``layout``, multi-hot targets (n, 10); one seed: one pairing."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")
    generator = torch.Generator().manual_seed(seed)  # on the CPU: the same pairs on any device
    if layout == "overlapping":
        return overlapping_pairs(x, y, n, generator=generator)         # (n, 1, 36, 36)
    return two_digit_pairs(x, y, n, layout, generator=generator)       # (n, 1, 56, 28) or (n, 1, 28, 56)


def ink_gap(images: torch.Tensor, layout: str) -> torch.Tensor:
    """Pixels between the two digits' ink along the axis that joins them, (N,), for (N, 1, 56, 28)
    vertical or (N, 1, 28, 56) horizontal pairs (chapter 7: under 14 px some cells see both digits)."""
    ink = (images[:, 0] > 0.3).any(dim=2 if layout == "vertical" else 1)  # (N, 56): ink per row / column
    idx = torch.arange(ink.shape[1], device=ink.device)
    last_of_first = torch.where(ink[:, :28], idx[:28], torch.full_like(idx[:28], -1)).amax(dim=1)
    first_of_second = torch.where(ink[:, 28:], idx[28:], torch.full_like(idx[28:], 99)).amin(dim=1)
    return (first_of_second - last_of_first - 1).float()


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


def misses(model, x: torch.Tensor, y: torch.Tensor, tests) -> Dict[str, List[int]]:
    """The indices a model gets wrong, of the single digits ("single") and of each layout's pairs (for McNemar)."""
    wrong = {"single": (predict_lengths(model, x).argmax(dim=1) != y.to(x.device)).nonzero().flatten().tolist()}
    for layout, (images, targets) in tests.items():
        wrong[layout] = (~set_hits(predict_lengths(model, images), targets)).nonzero().flatten().tolist()
    return wrong


def two_digit_experiment(data, config: TwoDigitConfig, out=None, fresh: bool = False, device="auto",
                         progress: bool = True, command: Optional[str] = None, preset: Optional[str] = None,
                         return_models: bool = False, shard=None) -> Dict:
    """Train each model once per seed on single digits as Su's script does (Adam, the margin loss); test on
    single digits and on pairs drawn once (``pair_seed``). ``return_models`` adds "trained": {model: [models]}."""
    _, device, result, _ = start_experiment(config, TwoDigitConfig, out, fresh, device, command, preset,
                                            data, progress, shard)
    _check_data(data)
    amp = resolve_amp(config.amp, device)
    x_train, y_train = data.x_train[:config.n_train].to(device), data.y_train[:config.n_train].to(device)
    x_test, y_test = data.x_test[:config.n_test].to(device), data.y_test[:config.n_test].to(device)
    singles = SimpleNamespace(x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    tests = {layout: two_digit_test_set(x_test, y_test, config.n_pairs, layout, config.pair_seed)
             for layout in config.layouts}
    trained = {m: [] for m in config.models}
    result.header["meta"] = {"n_train": len(x_train), "n_test": len(x_test), "amp": amp,  # the device: the header's
                             "data": [getattr(data, "name", None), getattr(data, "source", None)]}

    # seed by seed, so that an interrupted run already compares every model on its first seeds
    todo = [(m, s) for s, m in result.todo(config.seeds, config.models)]
    bar = tqdm(total=sum(config.epochs[m] for m, _ in todo), desc="two-digit experiment", unit="epoch",
               disable=not progress)
    for name, seed in todo:
        t0 = time.perf_counter()
        torch.manual_seed(seed)  # initial weights: the capsule heads start from the same ones
        model = make_model(name, config.squash_k, config.iterations, config.init)
        model.to(device=device, memory_format=torch.channels_last)  # ~15% faster convolutions on a CPU
        epochs = config.epochs[name]

        def after_epoch(epoch, net, name=name, seed=seed):
            bar.update()
            bar.set_postfix(model=name, seed=seed, epoch=epoch)
            return _pair_scores(net, tests) if config.curve else {}

        history = fit(model, singles, epochs=epochs, batch_size=config.batch_size, lr=config.lr,
                      lr_schedule=config.lr_schedule, device=device, amp=amp, seed=seed, shift=config.shift,
                      loss="margin", margin_lam=float(config.margin_lam), eval_every=1 if config.curve else epochs,
                      checkpoint=result.checkpoint(f"{name}-seed{seed}"), on_epoch_end=after_epoch, progress=False)
        row = {"model": name, "seed": seed, "params": count_parameters(model),
               "train_seconds": round(sum(e["seconds"] for e in history.epochs), 2),
               "final_loss": history[-1]["loss"], "single_acc": history[-1]["test_acc"]}
        row.update(_pair_scores(model, tests))
        row["misses"] = misses(model, x_test, y_test, tests)
        if config.curve:
            keys = ["test_acc"] + [k for k in history[-1] if k.split("_")[0] in config.layouts]
            row["curve"] = {k: [e.get(k) for e in history.epochs] for k in keys}
        if return_models:
            trained[name].append(model.eval())
        result.add(row, time.perf_counter() - t0)
    bar.close()
    output = result.finish()
    return {**output, "trained": trained} if return_models else output


def estimate_seconds(config: TwoDigitConfig, data, device="auto") -> float:
    """Rough wall time of ``two_digit_experiment(data, config)``, from steps of a capsule head (the slower kind)."""
    model = make_model("capsule-su", config.squash_k, config.iterations, config.init)
    model.to(memory_format=torch.channels_last)
    n_test = len(data.x_test[:config.n_test]) + config.n_pairs * len(config.layouts)
    return estimate_fit_seconds(model, data, sum(config.epochs.values()) * len(config.seeds), config.batch_size,
                                device, amp="off", loss="margin", n_train=config.n_train, test_images=n_test)
