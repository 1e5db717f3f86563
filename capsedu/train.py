"""Floor 5: training and evaluation.

- ``fit``: Adam with the official code's staircase decay (x0.96 every 2,000 steps), whole
  datasets kept as tensors on the device, shift augmentation, bf16/fp16 autocast,
  an optional ``torch.compile``, a ``tqdm`` bar per epoch, and checkpoints that
  resume bit-exactly (on CPU) after an interruption.
- ``evaluate`` / ``predict_lengths``: accuracy and scores in eval mode, no augmentation.
- ``History``: one plain dict per epoch, ready for json and for the book's plots.
- Checkpoints (``checkpoints.py``): written atomically each epoch, read back with one clear
  error if anything is wrong; ``load_checkpoint`` and ``CheckpointError`` are re-exported.
"""
from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass, field, is_dataclass
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .allocator import keep_freed_memory
from .checkpoints import CHECKPOINT_FORMAT, CheckpointError, _plain, _restore, _save_atomic, load_checkpoint
from .data import resolve_device  # re-exported: the CLI and experiments import it from here
from .functional import margin_loss, reconstruction_loss

__all__ = ["fit", "evaluate", "predict_lengths", "History", "CheckpointError", "load_checkpoint",
           "resolve_device", "resolve_amp"]

SYNC_EVERY = {"cpu": 1, "cuda": 50, "mps": 50}  # steps between host syncs (loss check, progress bar)


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


# ---------------------------------------------------------------- device and precision
def resolve_amp(amp, device: torch.device) -> str:
    """"auto" -> "bf16" on a CUDA GPU that supports it, else "off"; "fp16" needs CUDA."""
    if amp == "auto":
        return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "off"
    if amp not in ("bf16", "fp16", "off"):
        raise ValueError(f"amp must be 'auto', 'bf16', 'fp16' or 'off', got {amp!r}")
    if amp == "fp16" and device.type != "cuda":
        raise ValueError(f"amp='fp16' needs a CUDA GPU (it uses a GradScaler); got device {device}")
    return amp


def _autocast(amp: str, device: torch.device):
    if amp == "off":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16)


# ---------------------------------------------------------------- scores and accuracy
def _scores(out) -> torch.Tensor:
    """Class scores (B, C) from a model output: CapsNet's (caps, lengths, recon) or plain scores."""
    return out[1] if isinstance(out, (tuple, list)) else out


def _correct(scores: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Number of right answers: argmax for integer labels; for multi-hot, the top-k set equals the targets."""
    if not y.is_floating_point():
        return (scores.argmax(dim=1) == y).sum()
    k = y.sum(dim=1).round().long().clamp(min=1)                        # (B,) digits per image
    kth = scores.float().sort(dim=1, descending=True).values.gather(1, (k - 1)[:, None])  # (B, 1)
    return ((scores.float() >= kth) == (y > 0.5)).all(dim=1).sum()


def _targets(y: torch.Tensor, classes: int) -> torch.Tensor:
    """Float (N, C) targets: one-hot once up front, so no step has to check labels (a GPU sync)."""
    return y.float() if y.is_floating_point() else F.one_hot(y.long(), classes).float()


# ---------------------------------------------------------------- evaluation
@torch.no_grad()
def predict_lengths(model, x: torch.Tensor, batch_size: int = 500, device="auto", amp="off") -> torch.Tensor:
    """Class scores (N, C) (capsule lengths for CapsNet), eval mode, float32, on the model's device.

    ``device="auto"`` keeps the model where it is; any other device moves it there.
    """
    if device == "auto":
        device = next(model.parameters()).device
    else:
        device = resolve_device(device)
        model.to(device)
    amp, was_training = resolve_amp(amp, device), model.training
    model.eval()
    try:
        with _autocast(amp, device):
            outs = [_scores(model(x[i:i + batch_size].to(device))).float() for i in range(0, len(x), batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(outs)


def evaluate(model, x: torch.Tensor, y: torch.Tensor, batch_size: int = 500, device="auto", amp="off") -> Dict:
    """dict(accuracy, margin_loss, count) over (x, y), eval mode, no augmentation."""
    if len(x) != len(y) or len(x) == 0:
        raise ValueError(f"evaluate needs as many labels as images (and at least one), got {len(x)} and {len(y)}")
    scores = predict_lengths(model, x, batch_size, device, amp)           # (N, C)
    y = y.to(scores.device)
    return {"accuracy": _correct(scores, y).item() / len(y),
            "margin_loss": margin_loss(scores, _targets(y, scores.shape[1])).item(),
            "count": len(y)}


# ---------------------------------------------------------------- training
def _check_args(data, **numbers):
    for name, v in numbers.items():  # lr may be a float, the others are counts
        if isinstance(v, bool) or not isinstance(v, (int, float) if name == "lr" else int) or not v > 0:
            raise ValueError(f"{name} must be a positive {'number' if name == 'lr' else 'int'}, got {v!r}")
    for split in ("train", "test"):
        x, y = getattr(data, "x_" + split, None), getattr(data, "y_" + split, None)
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            raise TypeError(f"data needs tensors x_train, y_train, x_test, y_test; x_{split} or y_{split} is not")
        if x.dim() != 4 or not x.is_floating_point() or len(x) != len(y) or len(x) == 0:
            raise ValueError(f"x_{split} must be float images (N, C, H, W) with N = len(y_{split}) > 0; "
                             f"got {tuple(x.shape)} {x.dtype} and {len(y)} labels")


_WRONG_OUTPUT = ("loss='capsnet' calls model(images, labels) and expects (capsules, lengths, reconstructions); "
                 "loss='margin' calls model(images) and expects scores (B, C)")


def _losses(net, xb, tb, loss, margin_lam, recon_weight):
    """One forward pass -> (scores, margin loss, weighted reconstruction loss)."""
    if loss == "margin":
        scores = net(xb)                                                # (B, C)
        if not isinstance(scores, torch.Tensor):
            raise TypeError(_WRONG_OUTPUT + f"; got {type(scores).__name__}: try loss='capsnet'")
        return scores, margin_loss(scores, tb, lam=margin_lam), scores.new_zeros((), dtype=torch.float32)
    try:
        out = net(xb, tb)  # the labels mask the decoder: it reconstructs the true class
    except TypeError as err:  # e.g. forward(x) takes no labels
        raise TypeError(f"{_WRONG_OUTPUT}; the call failed ({err}): try loss='margin'") from None
    if not (isinstance(out, (tuple, list)) and len(out) == 3):
        raise TypeError(_WRONG_OUTPUT + f"; got {type(out).__name__}: try loss='margin'")
    _, lengths, recon = out                                           # (B, C, D), (B, C), (B, 1, 28, 28)
    return lengths, margin_loss(lengths, tb, lam=margin_lam), reconstruction_loss(recon, xb, scale=recon_weight)


def fit(model, data, epochs: int, batch_size: int = 128, lr: float = 1e-3, lr_decay: float = 0.96,
        decay_steps: int = 2000, device="auto", amp="auto", compile: bool = False,
        checkpoint: Optional[str] = None, seed: int = 0, shift: int = 2, loss: str = "capsnet",
        margin_lam: float = 0.5, recon_weight: float = 0.0005, eval_every: int = 1,
        progress: bool = True) -> History:
    """Train ``model`` on ``data`` (x_train, y_train, x_test, y_test tensors) and return its ``History``.

    ``loss="capsnet"``: ``model(x, labels)`` returns (capsules, lengths, reconstructions), the
    decoder masked by the true labels; loss = margin + recon_weight x SSE.
    ``loss="margin"``: ``model(x)`` returns scores (B, C); loss = margin loss.
    Labels may be integers (N,) or multi-hot floats (N, C). With ``checkpoint``, the state is
    saved after every epoch and a run finds and resumes it; finished runs return at once.

    A NaN/inf loss raises ``FloatingPointError`` naming its epoch and step. The CPU checks every
    step; a GPU reads the per-step losses back every ``SYNC_EVERY`` (50) steps, since each read
    waits for the GPU, so the error names the exact step but may come up to 49 steps later.
    """
    _check_args(data, epochs=epochs, batch_size=batch_size, decay_steps=decay_steps, eval_every=eval_every, lr=lr)
    if loss not in ("capsnet", "margin"):
        raise ValueError(f"loss must be 'capsnet' (CapsNet outputs) or 'margin' (plain scores), got {loss!r}")
    device = resolve_device(device)
    amp = resolve_amp(amp, device)
    if device.type == "cpu":
        keep_freed_memory()  # ~30% faster steps on CPU; see allocator.py
    model.to(device)
    x_train, x_test = data.x_train.to(device), data.x_test.to(device)   # moved once, sliced per batch
    y_train, y_test = data.y_train.to(device), data.y_test.to(device)
    config = getattr(model, "config", None)
    classes = getattr(config, "num_classes", 10)
    if not y_train.is_floating_point() and (y_train.min() < 0 or y_train.max() >= classes):
        raise ValueError(f"integer labels must lie in [0, {classes - 1}]")
    t_train = _targets(y_train, classes)                                 # (N, C) float
    n = len(x_train)
    meta = {"batch_size": batch_size, "lr": float(lr), "lr_decay": float(lr_decay), "decay_steps": decay_steps,
            "seed": seed, "shift": shift, "loss": loss, "margin_lam": float(margin_lam),
            "recon_weight": float(recon_weight), "n_train": n, "n_test": len(x_test),
            "dataset": [getattr(data, "name", None), getattr(data, "source", None)],
            "model": type(model).__name__, "model_config": _plain(config) if is_dataclass(config) else None,
            "device": str(device), "amp": amp, "compile": bool(compile), "torch": str(torch.__version__)}

    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_decay ** (step // decay_steps))
    scaler = torch.amp.GradScaler("cuda") if amp == "fp16" else None
    generator = torch.Generator(device=device if device.type == "cuda" else "cpu")
    generator.manual_seed(seed)
    history, start = History(meta=meta), 1
    if checkpoint is not None and os.path.exists(checkpoint):
        ckpt = load_checkpoint(checkpoint)
        _restore(ckpt, checkpoint, model, optimizer, scheduler, scaler, generator, meta)
        history.epochs, start = list(ckpt["history"]), ckpt["epoch"] + 1
        if progress:
            done = "all done" if start > epochs else f"resuming at epoch {start}"
            tqdm.write(f"capsedu: checkpoint {checkpoint} holds {ckpt['epoch']} finished epoch(s); {done}")
        if start > epochs:
            return history
    if shift:
        from .data import random_shift
    net = torch.compile(model) if compile else model
    sync_every = SYNC_EVERY.get(device.type, 1)
    window = torch.zeros(sync_every, 4, device=device)  # per step: loss, margin, recon, correct
    steps_per_epoch = math.ceil(n / batch_size)
    step = scheduler.last_epoch  # global optimizer steps so far

    for epoch in range(start, epochs + 1):
        t0, sums, seen, filled = time.perf_counter(), [0.0, 0.0, 0.0, 0.0], 0, 0
        model.train()
        order = torch.randperm(n, generator=generator, device=generator.device).to(device)
        bar = tqdm(total=steps_per_epoch, desc=f"epoch {epoch}/{epochs}", disable=not progress, leave=True)
        for b in range(steps_per_epoch):
            idx = order[b * batch_size:(b + 1) * batch_size]
            xb, yb, tb = x_train[idx], y_train[idx], t_train[idx]
            if shift:
                xb = random_shift(xb, shift, generator=generator)
            with _autocast(amp, device):
                scores, margin, recon = _losses(net, xb, tb, loss, margin_lam, recon_weight)
            total = margin + recon
            optimizer.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(total).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                total.backward()
                optimizer.step()
            scheduler.step()
            step += 1
            # Record on the device; read back every `sync_every` steps (each read waits for the GPU).
            window[filled] = torch.stack([total.detach(), margin.detach(), recon.detach(),
                                          _correct(scores.detach(), yb).float()])
            filled += 1
            if filled == sync_every or b == steps_per_epoch - 1:
                for k, row in enumerate(window[:filled].tolist()):
                    if not math.isfinite(row[0]):
                        bad = step - filled + k + 1
                        raise FloatingPointError(
                            f"loss is {row[0]} at epoch {epoch}, step {bad} (batch {b - filled + k + 2} of "
                            f"{steps_per_epoch}); try a lower learning rate or amp='off'")
                    sums = [s + v for s, v in zip(sums, row)]
                seen, done = min(n, (b + 1) * batch_size), b + 1
                bar.set_postfix(loss=f"{sums[0] / done:.4f}", acc=f"{sums[3] / seen:.3f}", refresh=False,
                                **{"img/s": f"{seen / (time.perf_counter() - t0):.0f}"})
                bar.update(filled)  # redraws at most every 0.1 s
                filled = 0
        bar.close()
        train_seconds = time.perf_counter() - t0
        test_acc = None
        if epoch % eval_every == 0 or epoch == epochs:
            test_acc = evaluate(model, x_test, y_test, device="auto", amp=amp)["accuracy"]
        history.epochs.append({
            "epoch": epoch, "steps": step, "loss": sums[0] / steps_per_epoch,
            "margin": sums[1] / steps_per_epoch, "recon": sums[2] / steps_per_epoch,
            "train_acc": sums[3] / n, "test_acc": test_acc, "images_per_s": n / train_seconds,
            "seconds": time.perf_counter() - t0, "lr": scheduler.get_last_lr()[0]})
        if progress and test_acc is not None:
            tqdm.write(f"epoch {epoch}: loss {sums[0] / steps_per_epoch:.4f}, "
                       f"train acc {sums[3] / n:.4f}, test acc {test_acc:.4f}")
        if checkpoint is not None:
            _save_atomic({
                "format": CHECKPOINT_FORMAT, "epoch": epoch, "meta": meta, "history": history.epochs,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict() if scaler else None,
                "rng_cpu": torch.get_rng_state(), "generator": generator.get_state(),
                "generator_device": generator.device.type,
                "rng_cuda": torch.cuda.get_rng_state() if device.type == "cuda" else None,
            }, checkpoint)
    return history
