"""``TrainConfig``: every setting of a training run, in one frozen dataclass.

``fit`` and ``start_run`` take it (or keyword overrides of it), the ``train`` command's options
are made from its fields (``add_config_arguments``), and a checkpoint resumes only under the same
values of the fields marked ``same_run``: a new setting is one new field, and none can be left
out of the resume check.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Optional

from capsedu import AMP_CHOICES, LOSSES, LR_SCHEDULES
from capsedu.runtime.arguments import MAX_INT, MAX_SEED, float_in, int_in

__all__ = ["TrainConfig", "add_config_arguments"]


def _count(default, help, minimum=1, maximum=MAX_INT, same_run=True):
    """An int field >= ``minimum``; the command line also caps it at ``maximum``."""
    return field(default=default, metadata=dict(help=help, same_run=same_run, minimum=minimum,
                                                arg=int_in(minimum, maximum)))


def _real(default, help, allow_zero=False, maximum=1e6):
    """A finite float field > 0 (>= 0 with ``allow_zero``), shared by a resumed run."""
    what = "a number >= 0" if allow_zero else "a positive number"
    return field(default=default, metadata=dict(help=help, same_run=True, allow_zero=allow_zero,
                                                arg=float_in(0, maximum, what, low_open=not allow_zero)))


def _choice(default, help, choices, same_run=True):
    return field(default=default, metadata=dict(help=help, same_run=same_run, choices=choices))


def _other(default, help=None):
    """A setting of how the run executes, not of what it trains: free to change on resume."""
    return field(default=default, metadata=dict(help=help, same_run=False))


@dataclass(frozen=True)
class TrainConfig:
    """The settings of one ``fit``; invalid values fail here, one line each."""
    epochs: int = _count(10, "passes over the training set", maximum=100_000, same_run=False)
    batch_size: int = _count(128, "images per step", maximum=1 << 20)
    lr: float = _real(1e-3, "Adam learning rate", maximum=10)
    lr_decay: float = _real(0.96, "x lr_decay every decay_steps steps (lr_schedule step)", maximum=1)
    decay_steps: int = _count(2000, "steps between decays (lr_schedule step)")
    lr_schedule: str = _choice("step", "step: the official code's staircase; constant; cosine: from lr "
                               "down to 0 over all epochs", LR_SCHEDULES)
    seed: int = _count(0, "initial weights, shuffling and shifts", minimum=0, maximum=MAX_SEED)
    shift: int = _count(2, "random shift augmentation, pixels", minimum=0, maximum=14)
    loss: str = _choice("capsnet", None, LOSSES)  # capsnet: model(x, labels) -> (capsules, lengths, recon)
    margin_lam: float = _real(0.5, "margin loss: weight of the absent classes' term", allow_zero=True)
    recon_weight: float = _real(0.0005, "weight of the reconstruction loss", allow_zero=True)
    device: object = _other("auto")   # "auto", "cpu", "cuda", "mps" or a torch.device
    amp: str = _choice("auto", "mixed precision; auto: bf16 where the device has it natively (CUDA 8.0+, CPUs "
                       "with AVX512-BF16/AMX), fp16 with a GradScaler on CUDA 7.x (T4, V100), else off",
                       AMP_CHOICES, same_run=False)
    compile: bool = _other(False, "wrap the model in torch.compile")
    eval_every: int = _count(1, "epochs between test-set evaluations (and always the last)", same_run=False)
    checkpoint: Optional[str] = _other(None)  # a file: written after every epoch, resumed from when present
    resume: bool = _other(True)               # False: ignore an existing checkpoint; the first new one replaces it
    progress: bool = _other(True)

    def __post_init__(self):
        from capsedu.core.checks import check_count, check_number  # here: the command line imports no torch
        for f in fields(self):
            value, meta = getattr(self, f.name), f.metadata
            if "minimum" in meta:
                check_count(value, f.name, minimum=meta["minimum"])
            elif "allow_zero" in meta:
                check_number(value, f.name, allow_zero=meta["allow_zero"])
            elif "choices" in meta and value not in meta["choices"]:
                raise ValueError(f"{f.name} must be one of {meta['choices']}, got {value!r}")
        if self.checkpoint is not None and not isinstance(self.checkpoint, (str, os.PathLike)):
            raise TypeError(f"checkpoint must be a file path or None, got {type(self.checkpoint).__name__}")

    @classmethod
    def from_args(cls, args, **overrides) -> "TrainConfig":
        """The settings ``add_config_arguments`` parsed into ``args``, with ``overrides``."""
        return cls(**{**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}, **overrides})

    def same_run(self) -> dict:
        """The settings a resumed run must share with the run that wrote its checkpoint."""
        return {f.name: float(getattr(self, f.name)) if f.type == "float" else getattr(self, f.name)
                for f in fields(self) if f.metadata["same_run"]}


def add_config_arguments(parser, skip=()) -> None:
    """One option per field with a help line (``--batch-size`` for ``batch_size``), except ``skip``."""
    for f in fields(TrainConfig):
        meta = f.metadata
        if meta["help"] is None or f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        if f.type == "bool":
            parser.add_argument(flag, action="store_true", help=meta["help"])
        else:
            parser.add_argument(flag, type=meta.get("arg"), choices=meta.get("choices"), default=f.default,
                                help=meta["help"])
