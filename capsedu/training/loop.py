"""The training loop: ``fit`` and its four steps.

- ``fit(model, data, config, **overrides)``: Adam with the official code's staircase decay,
  whole datasets as tensors on the device, shift augmentation, bf16/fp16 autocast, an optional
  ``torch.compile``, one progress bar per run, and a checkpoint each epoch that resumes
  bit-exactly (on CPU) after an interruption.
- The steps, public so that the experiments can train epoch by epoch: ``start_run`` (set-up or
  resume), ``train_epoch``, ``epoch_record`` (the epoch's line in the ``History``) and
  ``checkpoint_state``.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Callable, Dict, List, Optional

import torch
from tqdm.auto import tqdm

from capsedu.core.checks import check_finite, check_images, check_targets
from capsedu.core.losses import margin_loss, reconstruction_loss
from capsedu.data.transforms import random_shift
from capsedu.runtime.checkpoints import CHECKPOINT_FORMAT, load_checkpoint, restore, save_atomic
from capsedu.runtime.device import adam, autocast, grad_scaler, resolve_amp, resolve_device
from capsedu.runtime.files import plain, remove_stale_tmp
from capsedu.training.distributed import data_parallel, is_main
from capsedu.training.evaluation import count_correct, evaluate, float_targets
from capsedu.training.config import TrainConfig
from capsedu.training.objectives import cross_entropy_loss, spread_loss, spread_margin

__all__ = ["fit", "start_run", "RESUME_KEYS", "train_epoch", "epoch_record", "checkpoint_state", "Run", "History"]


SYNC_EVERY = {"cpu": 1, "cuda": 50, "mps": 50}  # steps between host syncs (loss check, progress bar)
# What a resumed run must share with the checkpoint's: TrainConfig's same_run fields, the data and the model.
RESUME_KEYS = (*TrainConfig().same_run(), "n_train", "dataset", "model", "model_config")


@dataclass
class History:
    """Per-epoch records: epoch, steps, loss, margin, recon, train_acc, test_acc, images_per_s, seconds, lr."""
    epochs: List[Dict] = field(default_factory=list)
    meta: Dict = field(default_factory=dict)

    def __len__(self):
        return len(self.epochs)

    def __getitem__(self, key):
        """``history[i]`` is epoch record i; ``history["loss"]`` the column over all epochs."""
        return self.epochs[key] if isinstance(key, int) else [e[key] for e in self.epochs]

    def as_dict(self) -> Dict:
        return {"epochs": [dict(e) for e in self.epochs], "meta": dict(self.meta)}


# ---------------------------------------------------------------- set-up
def _scheduler(optimizer, schedule: str, lr_decay: float, decay_steps: int, total_steps: int):
    """The learning-rate schedule as a scheduler stepped once per optimiser step."""
    if schedule == "cosine":
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * min(step, total_steps) / total_steps)))
    if schedule == "constant":
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=decay_steps, gamma=lr_decay)


def _check_data(data) -> None:
    for split in ("train", "test"):
        x, y = getattr(data, "x_" + split, None), getattr(data, "y_" + split, None)
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            raise TypeError(f"data needs tensors x_train, y_train, x_test, y_test; x_{split} or y_{split} is not")
        if x.dim() != 4 or not x.is_floating_point() or len(x) != len(y) or len(x) == 0:
            raise ValueError(f"x_{split} must be float images (N, C, H, W) with N = len(y_{split}) > 0; "
                             f"got {tuple(x.shape)} {x.dtype} and {len(y)} labels")


def _config(config: Optional[TrainConfig], overrides: Dict) -> TrainConfig:
    """``config`` (default: ``TrainConfig()``) with ``overrides`` replacing its fields."""
    if config is not None and not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig or None, got {type(config).__name__}")
    unknown = sorted(set(overrides) - {f.name for f in fields(TrainConfig)})
    if unknown:
        raise TypeError(f"fit got unknown setting(s) {', '.join(unknown)}; TrainConfig's fields are "
                        f"{', '.join(f.name for f in fields(TrainConfig))}")
    return replace(config or TrainConfig(), **overrides)


@dataclass
class Run:
    """One training run's state: what ``start_run`` sets up and ``train_epoch`` advances."""
    model: torch.nn.Module
    net: Callable                     # the model, or its torch.compile'd wrapper
    device: torch.device
    amp: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    t_train: torch.Tensor             # (N, C) float targets
    x_test: torch.Tensor
    y_test: torch.Tensor
    optimizer: torch.optim.Optimizer
    scheduler: object
    scaler: Optional[object]          # a GradScaler exactly when amp is "fp16"
    generator: torch.Generator        # the shuffling and the shifts
    history: History
    start: int                        # the first epoch still to train
    step: int                         # optimiser steps so far
    total_steps: int = 1              # optimiser steps of the whole run (the spread loss's margin grows over it)
    shard: Optional[object] = None    # under torchrun: this process's share of each batch (training.distributed)


def start_run(model, data, config: Optional[TrainConfig] = None, **overrides) -> Run:
    """Check the data, move model and data to the device, build optimiser, schedule and scaler,
    and restore ``config.checkpoint`` if it exists (after checking it is the same run)."""
    config = _config(config, overrides)
    _check_data(data)
    epochs, batch_size, checkpoint = config.epochs, config.batch_size, config.checkpoint
    device = resolve_device(config.device)
    amp = resolve_amp(config.amp, device)
    model.to(device)
    x_train, x_test = data.x_train.to(device), data.x_test.to(device)   # moved once, sliced per batch
    y_train, y_test = data.y_train.to(device), data.y_test.to(device)
    model_config = getattr(model, "config", None)
    classes = getattr(model_config, "num_classes", 10)
    for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):  # once, up front
        check_images(x, f"x_{split}")
        check_finite(x, f"x_{split}")
        check_targets(y, len(x), classes, f"y_{split}")
    n = len(x_train)
    meta = {**config.same_run(), "n_train": n, "n_test": len(x_test),
            "dataset": [getattr(data, "name", None), getattr(data, "source", None)], "model": type(model).__name__,
            "model_config": plain(model_config) if is_dataclass(model_config) else None,
            "device": str(device), "amp": amp, "compile": bool(config.compile), "torch": str(torch.__version__)}
    optimizer = adam(model.parameters(), config.lr, device)
    scheduler = _scheduler(optimizer, config.lr_schedule, config.lr_decay, config.decay_steps,
                           epochs * math.ceil(n / batch_size))
    scaler = grad_scaler(amp, device)
    generator = torch.Generator(device=device if device.type == "cuda" else "cpu")
    generator.manual_seed(config.seed)
    run = Run(model, torch.compile(model) if config.compile else model, device, amp, x_train, y_train,
              float_targets(y_train, classes), x_test, y_test, optimizer, scheduler, scaler, generator,
              History(meta=meta), start=1, step=0)
    if checkpoint is not None:
        remove_stale_tmp(checkpoint)  # a half-written file from a killed run
    if checkpoint is not None and config.resume and os.path.exists(checkpoint):  # else overwritten after epoch 1
        ckpt = load_checkpoint(checkpoint)
        restore(ckpt, checkpoint, model, optimizer, scheduler, scaler, generator, meta, RESUME_KEYS)
        run.history.epochs, run.start = list(ckpt["history"]), ckpt["epoch"] + 1
    run.step = scheduler.last_epoch  # the scheduler counts optimiser steps
    run.total_steps = max(1, epochs * math.ceil(n / batch_size))
    run.net, run.shard = data_parallel(run)
    return run


# ---------------------------------------------------------------- one epoch
_WRONG_OUTPUT = ("loss='capsnet' calls model(images, labels) and expects (capsules, lengths, reconstructions); "
                 "the other losses call model(images) and expect scores (B, C)")


def _losses(net, xb, tb, loss, margin_lam, recon_weight, progress=0.0):
    """One forward pass -> (scores, class loss, weighted reconstruction loss)."""
    if loss != "capsnet":
        scores = net(xb)                                                # (B, C)
        if not isinstance(scores, torch.Tensor):
            raise TypeError(_WRONG_OUTPUT + f"; got {type(scores).__name__}: try loss='capsnet'")
        if loss == "margin":
            main = margin_loss(scores, tb, lam=margin_lam)
        elif loss == "cross_entropy":
            main = cross_entropy_loss(scores, tb)
        else:
            main = spread_loss(scores, tb, spread_margin(progress))
        return scores, main, scores.new_zeros((), dtype=torch.float32)
    try:
        out = net(xb, tb)  # the labels mask the decoder: it reconstructs the true class
    except TypeError as err:  # e.g. forward(x) takes no labels
        raise TypeError(f"{_WRONG_OUTPUT}; the call failed ({err}): try loss='margin'") from None
    if not (isinstance(out, (tuple, list)) and len(out) == 3):
        raise TypeError(_WRONG_OUTPUT + f"; got {type(out).__name__}: try loss='margin'")
    _, lengths, recon = out                                           # (B, C, D), (B, C), (B, 1, 28, 28)
    return lengths, margin_loss(lengths, tb, lam=margin_lam), reconstruction_loss(recon, xb, scale=recon_weight)


def _optimiser_step(run: Run, total: torch.Tensor) -> None:
    run.optimizer.zero_grad(set_to_none=True)
    if run.scaler is not None:  # fp16: scale the loss up so that small gradients do not round to 0
        run.scaler.scale(total).backward()
        run.scaler.step(run.optimizer)
        run.scaler.update()
    else:
        total.backward()
        run.optimizer.step()
    run.scheduler.step()
    run.step += 1


def _check_parameters(model, epoch: int, step: int, batch: int, steps: int) -> None:
    """A finite loss can still leave non-finite weights (e.g. a huge learning rate): stop as for a NaN loss."""
    params = [p.detach() for p in model.parameters()]
    if params and not torch.stack([torch.isfinite(p).all() for p in params]).all():
        raise FloatingPointError(f"parameters became non-finite by epoch {epoch}, step {step} (batch {batch} of "
                                 f"{steps}) although the loss was finite; try a lower learning rate or amp='off'")


def train_epoch(run: Run, epoch: int, on_progress: Optional[Callable[[float, Dict], None]] = None) -> Dict:
    """One shuffled pass over the training set; returns the epoch's sums (loss, margin, recon,
    correct), its steps and seconds. ``on_progress(fraction_done, running)`` is called at each read-back."""
    meta, model = run.history.meta, run.model
    n, batch_size = len(run.x_train), meta["batch_size"]
    steps = math.ceil(n / batch_size)
    sync_every = SYNC_EVERY.get(run.device.type, 1)
    window = torch.zeros(sync_every, 4, device=run.device)  # per step: loss, margin, recon, correct
    t0, sums, filled = time.perf_counter(), [0.0, 0.0, 0.0, 0.0], 0
    model.train()
    order = torch.randperm(n, generator=run.generator, device=run.generator.device).to(run.device)
    for b in range(steps):
        idx = order[b * batch_size:(b + 1) * batch_size]
        xb, yb, tb = run.x_train[idx], run.y_train[idx], run.t_train[idx]
        if meta["shift"]:
            xb = random_shift(xb, meta["shift"], generator=run.generator)
        xb, yb, tb, share = run.shard(xb, yb, tb) if run.shard else (xb, yb, tb, 1.0)  # after the global batch's draws
        with autocast(run.amp, run.device):
            scores, margin, recon = _losses(run.net, xb, tb, meta["loss"], meta["margin_lam"], meta["recon_weight"],
                                            run.step / run.total_steps)
        total = (margin + recon) * share  # share < 1 only under torchrun
        _optimiser_step(run, total * run.shard.world if run.shard else total)  # DDP averages over ranks
        # Record on the device; read back every `sync_every` steps (each read waits for the GPU).
        window[filled] = torch.stack([total.detach(), margin.detach() * share, recon.detach() * share,
                                      count_correct(scores.detach(), yb).float()])
        filled += 1
        if filled == sync_every or b == steps - 1:
            if run.shard:
                run.shard.reduce(window[:filled])
            for k, row in enumerate(window[:filled].tolist()):
                if not math.isfinite(row[0]):
                    bad = run.step - filled + k + 1
                    raise FloatingPointError(
                        f"loss is {row[0]} at epoch {epoch}, step {bad} (batch {b - filled + k + 2} of "
                        f"{steps}); try a lower learning rate or amp='off'")
                sums = [s + v for s, v in zip(sums, row)]
            _check_parameters(model, epoch, run.step, b + 1, steps)
            if on_progress is not None:
                seen = min(n, (b + 1) * batch_size)
                on_progress((b + 1) / steps, {"loss": sums[0] / (b + 1), "acc": sums[3] / seen,
                                              "img/s": seen / (time.perf_counter() - t0)})
            filled = 0
    return {"loss": sums[0], "margin": sums[1], "recon": sums[2], "correct": sums[3], "steps": steps,
            "seconds": time.perf_counter() - t0}


def epoch_record(run: Run, epoch: int, sums: Dict, test_acc: Optional[float], seconds: float) -> Dict:
    """The epoch's line in the history: mean losses per step, accuracies, speed, time, learning rate."""
    steps, n = sums["steps"], len(run.x_train)
    return {"epoch": epoch, "steps": run.step, "loss": sums["loss"] / steps, "margin": sums["margin"] / steps,
            "recon": sums["recon"] / steps, "train_acc": sums["correct"] / n, "test_acc": test_acc,
            "images_per_s": n / sums["seconds"], "seconds": seconds, "lr": run.scheduler.get_last_lr()[0]}


def checkpoint_state(run: Run, epoch: int) -> Dict:
    """Everything a run needs to resume bit-exactly after ``epoch``: weights, optimiser, schedule,
    scaler, random generators, the history so far and the run's settings."""
    return {"format": CHECKPOINT_FORMAT, "epoch": epoch, "meta": run.history.meta, "history": run.history.epochs,
            "model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(),
            "scheduler": run.scheduler.state_dict(), "scaler": run.scaler.state_dict() if run.scaler else None,
            "rng_cpu": torch.get_rng_state(), "generator": run.generator.get_state(),
            "generator_device": run.generator.device.type,
            "rng_cuda": torch.cuda.get_rng_state() if run.device.type == "cuda" else None}


# ---------------------------------------------------------------- the whole run
def fit(model, data, config: Optional[TrainConfig] = None, *, on_epoch_end=None, **overrides) -> History:
    """Train ``model`` on ``data`` (x_train, y_train, x_test, y_test tensors) and return its ``History``.

    The settings are ``config`` (a ``TrainConfig``, by default the paper's) with ``overrides``
    replacing its fields: ``fit(model, data, epochs=10, lr=3e-3)``.
    ``loss="capsnet"``: ``model(x, labels)`` returns (capsules, lengths, reconstructions), the
    decoder masked by the true labels; loss = margin + recon_weight x SSE.
    ``loss="margin"``, ``"cross_entropy"`` or ``"spread"`` (``training.objectives``): ``model(x)`` returns scores (B, C).
    Labels may be integers (N,) or multi-hot floats (N, C). With ``checkpoint``, the state is
    saved after every epoch and a run finds and resumes it (if its ``same_run`` settings match);
    finished runs return at once. ``resume=False`` ignores an existing checkpoint, which the
    first new one then replaces. ``amp="auto"`` is ``capsedu.runtime.device.resolve_amp``'s choice.
    ``on_epoch_end(epoch, model)`` may return a dict of extra numbers, stored in that epoch's
    record (and so in the checkpoint).

    A NaN/inf loss raises ``FloatingPointError`` naming its epoch and step. The CPU checks every
    step; a GPU reads the per-step losses back every ``SYNC_EVERY`` (50) steps, since each read
    waits for the GPU, so the error names the exact step but may come up to 49 steps later.
    """
    if on_epoch_end is not None and not callable(on_epoch_end):
        raise TypeError(f"on_epoch_end must be callable or None, got {type(on_epoch_end).__name__}")
    config = _config(config, overrides)
    run = start_run(model, data, config)
    epochs, checkpoint, progress = config.epochs, config.checkpoint, config.progress
    if progress and run.start > 1:
        done = "all done" if run.start > epochs else f"resuming at epoch {run.start}"
        tqdm.write(f"capsedu: {checkpoint} holds {run.start - 1} epoch(s); {done}")
    if run.start > epochs:
        return run.history
    shown = {"loss": "-", "train_acc": "-", "test_acc": "-", "img/s": "-"}  # this epoch's so far; test: the last
    # one bar for the run, epochs as the unit (fractions within an epoch), ETA from the rate so far
    bar = tqdm(total=epochs, initial=run.start - 1, desc="fit", unit="epoch", disable=not progress,
               bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.2f}/{total} epochs [{elapsed}<{remaining}{postfix}]")
    with bar:
        for epoch in range(run.start, epochs + 1):
            def advance(fraction, running, base=epoch - 1):
                shown.update({"loss": f"{running['loss']:.4f}", "train_acc": f"{running['acc']:.3f}",
                              "img/s": f"{running['img/s']:.0f}"})
                bar.set_postfix(shown, refresh=False)
                bar.update(base + fraction - bar.n)  # redraws at most every 0.1 s
            t0 = time.perf_counter()
            sums = train_epoch(run, epoch, advance if progress else None)
            test_acc = None
            if epoch % config.eval_every == 0 or epoch == epochs:
                test_acc = evaluate(model, run.x_test, run.y_test, device="auto", amp=run.amp)["accuracy"]
                shown["test_acc"] = f"{test_acc:.4f}"
            run.history.epochs.append(epoch_record(run, epoch, sums, test_acc, time.perf_counter() - t0))
            if on_epoch_end is not None:
                run.history.epochs[-1].update(on_epoch_end(epoch, model) or {})
                model.train()
            bar.set_postfix(shown)
            if checkpoint is not None and is_main():
                save_atomic(checkpoint_state(run, epoch), checkpoint)
    return run.history
