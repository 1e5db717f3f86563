"""The settings of Su Jianlin's two-digit experiment, one object checked when it is built (no torch needed),
so that a bad value fails before any training starts; ``PRESETS``: one per mode and "long", the stored run;
``add_cli_arguments``: the command's options."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Dict, Mapping, Optional, Tuple, Union

from capsedu import AMP_CHOICES, LR_SCHEDULES, SOURCES
from capsedu.experiments.shared.arguments import add_run_arguments
from capsedu.runtime.arguments import (MAX_INT, MAX_SEED, batch_int, check_config, float_in, int_in,
                                       positive_int, seed_int)

__all__ = ["MODELS", "HEADS", "LAYOUTS", "INITS", "SCHEDULES", "SU_EPOCHS", "TwoDigitConfig", "PRESETS",
           "add_cli_arguments"]

# name -> what the head is; all share Su's ConvStack. The first four are the experiment's (HEADS).
MODELS = {
    "pooling": "global average pooling -> dense 128 -> 10 sigmoids",
    "capsule-su": "shared-weight capsules, Su's January routing (b <- <u_hat, v>, squash every iteration)",
    "capsule-hinton": "shared-weight capsules, Hinton's routing (b <- b + <u_hat, v>)",
    "capsule-su-march": "shared-weight capsules, Su's March routing (b <- <u_hat, s/|s|>, one squash at the end)",
    "capsule-su-r1": "shared-weight capsules, one routing iteration (uniform couplings: the votes summed)",
    # the controls that separate summing from routing and from capsules (issue 51)
    "pooling-sum": "global sum pooling -> dense 128 -> 10 sigmoids (summing without capsules)",
    "capsule-mean": "shared-weight capsules, the votes averaged (capsules without routing or summing)",
}
HEADS = ("pooling", "capsule-su", "capsule-hinton", "capsule-su-march")
# vertical: Su's script (56x28); horizontal: his prose (28x56); overlapping: MultiMNIST-style 36x36.
LAYOUTS = ("vertical", "horizontal", "overlapping")
INITS = ("keras", "torch")  # keras: Glorot-uniform weights and zero biases, as in Su's script
SCHEDULES = tuple(s for s in LR_SCHEDULES if s != "step")  # Su's script: constant
SU_EPOCHS = {"pooling": 20, "capsule-su": 10, "capsule-hinton": 10, "capsule-su-march": 10}  # batch 128


@dataclass(frozen=True)
class TwoDigitConfig:
    """``epochs``: one int for every model, or model -> epochs (Su: ``SU_EPOCHS``); ``n_train``/``n_test``: the
    first N digits (None: all); ``curve``: the pair accuracies after every epoch too (the learning curve);
    ``iterations``: of every capsule head but "capsule-su-r1", which has one."""
    models: Tuple[str, ...] = HEADS
    seeds: Tuple[int, ...] = (0, 1, 2)
    epochs: Union[int, Mapping[str, int]] = 4
    batch_size: int = 16
    lr: float = 1e-3
    lr_schedule: str = "cosine"
    margin_lam: float = 0.25
    squash_k: float = 0.5
    iterations: int = 3
    init: str = "keras"
    n_train: Optional[int] = None
    n_test: Optional[int] = None
    n_pairs: int = 1000
    layouts: Tuple[str, ...] = LAYOUTS
    shift: int = 0
    pair_seed: int = 1234
    source: str = "sample"
    curve: bool = False
    amp: str = "off"

    def __post_init__(self):
        for name in ("models", "seeds", "layouts"):  # lists from JSON or argparse become tuples
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        check_config(self, tuple(MODELS), {"shift": (0, MAX_INT), "pair_seed": (0, MAX_SEED),
                                           "margin_lam": (0, math.inf)},
                     choices={"layouts": LAYOUTS, "init": INITS, "lr_schedule": SCHEDULES, "source": SOURCES,
                              "amp": AMP_CHOICES})
        epochs = self.epochs if isinstance(self.epochs, Mapping) else {m: self.epochs for m in self.models}
        missing = [m for m in self.models if m not in epochs]
        if missing:
            raise ValueError(f"epochs has no entry for {missing}; give an int or one per model")
        object.__setattr__(self, "epochs", {m: epochs[m] for m in self.models})
        for m, e in self.epochs.items():
            if not (isinstance(e, int) and not isinstance(e, bool) and 1 <= e <= MAX_INT):
                raise ValueError(f"TwoDigitConfig.epochs[{m!r}] must be an int in [1, {MAX_INT:,}], got {e!r}")

    def as_dict(self) -> Dict:
        """Plain JSON types (lists, not tuples), as stored in a result."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def replace(self, **changes) -> "TwoDigitConfig":
        """A copy with some settings changed (checked again)."""
        return replace(self, **changes)


QUICK_EPOCHS = {"pooling": 3, "capsule-su": 2, "capsule-hinton": 2, "capsule-su-march": 2}
INVESTIGATION_EPOCHS = {"pooling": 5, "capsule-su": 3, "capsule-hinton": 3, "capsule-su-march": 3}
_SAMPLE = dict(source="sample", n_train=None, n_test=None)  # the sample's 9,000 training and 1,000 test digits
PRESETS: Dict[str, TwoDigitConfig] = {
    # every code path, a handful of steps
    "smoke": TwoDigitConfig(seeds=(0,), epochs=1, n_train=64, n_test=100, n_pairs=100, source="sample"),
    # the chapter's live preview on 2 CPU cores (within its 3 minutes); pooling gets more epochs: it learns
    # single digits more slowly (Su gave it twice theirs)
    "quick": TwoDigitConfig(models=("pooling", "capsule-su"), seeds=(0,), epochs=QUICK_EPOCHS, n_pairs=500, **_SAMPLE),
    # the budget chapter 7's investigation changes one setting of at a time (results/two_digits_variants/):
    # the quick preview's until 2026-12-03, with three seeds
    "investigation": TwoDigitConfig(models=("pooling", "capsule-su"), epochs=INVESTIGATION_EPOCHS, n_pairs=500,
                                    **_SAMPLE),
    # a GPU (a Colab T4 in ~4 min, estimated), in its own precision (capsedu.runtime.device.resolve_amp)
    "gpu": TwoDigitConfig(epochs=2, batch_size=64, n_pairs=2000, source="auto", amp="auto"),
    # Su's script: all of MNIST, batch 128, constant learning rate, 20 / 10 epochs
    "full": TwoDigitConfig(epochs=SU_EPOCHS, batch_size=128, lr_schedule="constant", n_pairs=10000, source="auto"),
    # the stored CPU run (results/two_digits_long), with the learning curve
    "long": TwoDigitConfig(epochs=12, curve=True, **_SAMPLE),
    # the same budget with 5 seeds, per-item outcomes, the one-iteration head and the two controls
    # (results/two_digits_items)
    "long-items": TwoDigitConfig(models=HEADS + ("capsule-su-r1", "pooling-sum", "capsule-mean"),
                                 seeds=(0, 1, 2, 3, 4), epochs=12, curve=True, **_SAMPLE),
}


def add_cli_arguments(d) -> None:
    """The options of ``python -m capsedu two-digits`` (an argparse parser), run as every experiment is
    (``capsedu.experiments.shared.arguments.cli_main``: an option named after a ``TwoDigitConfig``
    field, or renamed in ``RENAMED`` there, overrides it)."""
    add_run_arguments(d, tuple(PRESETS), "model x seed", "epochs for every model")
    d.add_argument("--source", choices=SOURCES, default=None, help="MNIST source (default: the preset's)")
    d.add_argument("--root", default=None, help="data folder (default: $CAPSEDU_DATA or ~/.cache/capsedu)")
    d.add_argument("--models", nargs="+", choices=tuple(MODELS), default=None, help="which models to train")
    d.add_argument("--batch-size", type=batch_int, default=None, help="images per step")
    d.add_argument("--lr", type=float_in(0, 10, "a positive learning rate"), default=None, help="Adam learning rate")
    d.add_argument("--lr-schedule", choices=SCHEDULES, default=None, help="constant (Su's) or cosine")
    d.add_argument("--margin-lam", type=float_in(0, 10, "a number >= 0", low_open=False), default=None,
                   help="margin loss weight of the absent classes (Su: 0.25)")
    d.add_argument("--squash-k", type=float_in(0, 1000, "a positive number"), default=None,
                   help="k in |s|^2/(k+|s|^2) (capsule heads)")
    d.add_argument("--iterations", type=int_in(1, 100), default=None, help="routing iterations")
    d.add_argument("--init", choices=INITS, default=None, help="initial weights: Keras's defaults (Su's) or PyTorch's")
    d.add_argument("--limit", type=positive_int, default=None, help="train on the first N digits only")
    d.add_argument("--test-limit", type=positive_int, default=None, help="test digits (and pairs from them)")
    d.add_argument("--pairs", type=int_in(1, 100_000), default=None, help="two-digit test images per layout")
    d.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=None, help="how the two digits are placed")
    d.add_argument("--shift", type=int_in(0, 14), default=None, help="random shift augmentation, pixels")
    d.add_argument("--amp", choices=AMP_CHOICES, default=None, help="mixed precision")
    d.add_argument("--pair-seed", type=seed_int, default=None, help="seed of the test pairs")
