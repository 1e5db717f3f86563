"""``TrainConfig``: every setting of a training run, in one frozen dataclass.

``fit`` and ``start_run`` take it (or keyword overrides of it), the ``train`` command's options
are made from its fields (``capsedu.runtime.arguments.add_options``), and a checkpoint resumes
only under the same values of the fields marked ``same_run``: a new setting is one new field,
and none can be left out of the resume check.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from functools import partial
from typing import Optional

from capsedu import AMP_CHOICES, LOSSES, LR_SCHEDULES
from capsedu.runtime.arguments import MAX_SEED, check_config, setting

__all__ = ["TrainConfig"]

_run = partial(setting, same_run=True)      # a resumed run must share it
_how = partial(setting, same_run=False)     # how the run executes, not what it trains: free on resume


@dataclass(frozen=True)
class TrainConfig:
    """The settings of one ``fit``; invalid values fail here, one line each."""
    epochs: int = _how(10, "passes over the training set", high=100_000)
    batch_size: int = _run(128, "images per step", high=1 << 20)
    lr: float = _run(1e-3, "Adam learning rate", 0, 3.4e38, low_open=True)  # float32's range (a test diverges)
    lr_decay: float = _run(0.96, "lr factor every decay_steps", 0, 1, low_open=True)
    decay_steps: int = _run(2000, "steps between decays (step)")
    lr_schedule: str = _run("step", "step (official code), constant, cosine", choices=LR_SCHEDULES)
    seed: int = _run(0, "weights, shuffling and shifts", 0, MAX_SEED)
    shift: int = _run(2, "random shift augmentation, pixels", 0, 14)
    loss: str = _run("capsnet", choices=LOSSES)  # capsnet: model(x, labels) -> (capsules, lengths, recon)
    margin_lam: float = _run(0.5, "margin loss: absent classes' weight", 0, 1e6)
    recon_weight: float = _run(0.0005, "weight of the reconstruction loss", 0, 1e6)
    device: object = _how("auto")   # "auto", "cpu", "cuda", "mps" or a torch.device
    amp: str = _how("auto", "mixed precision (resolve_amp)", choices=AMP_CHOICES)
    compile: bool = _how(False, "wrap the model in torch.compile")
    eval_every: int = _how(1, "epochs between test evaluations")
    checkpoint: Optional[str] = _how(None)  # a file: written after every epoch, resumed from when present
    resume: bool = _how(True)               # False: ignore an existing checkpoint; the first new one replaces it
    progress: bool = _how(True)

    def __post_init__(self):
        check_config(self)
        if self.checkpoint is not None and not isinstance(self.checkpoint, (str, os.PathLike)):
            raise TypeError(f"checkpoint must be a file path or None, got {type(self.checkpoint).__name__}")

    @classmethod
    def from_args(cls, args, **overrides) -> "TrainConfig":
        """The settings ``add_options`` parsed into ``args``, with ``overrides``."""
        return cls(**{**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}, **overrides})

    def same_run(self) -> dict:
        """The settings a resumed run must share with the run that wrote its checkpoint."""
        return {f.name: float(getattr(self, f.name)) if f.type == "float" else getattr(self, f.name)
                for f in fields(self) if f.metadata["same_run"]}
