"""The settings of Su Jianlin's two-digit experiment, one object checked when it is built (no torch
needed), so that a bad value fails before any training starts; each field with a help line is an
option of ``python -m capsedu two-digits``. ``PRESETS``: one per mode and "long", the stored run."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, Mapping, Optional, Tuple, Union

from capsedu import AMP_CHOICES, LR_SCHEDULES, SOURCES
from capsedu.runtime.arguments import MAX_INT, MAX_SEED, check_config, setting
from capsedu.runtime.files import plain

__all__ = ["MODELS", "HEADS", "LAYOUTS", "INITS", "SCHEDULES", "SU_EPOCHS", "TwoDigitConfig", "PRESETS"]

# Heads on Su's ConvStack. HEADS, the experiment's: global average pooling -> dense 128 -> 10
# sigmoids; shared-weight capsules with Su's January routing (b <- <u_hat, v>, squash every
# iteration), Hinton's (b <- b + <u_hat, v>) and Su's March routing (b <- <u_hat, s/|s|>, one squash
# at the end). The controls that separate summing from routing and from capsules (issue 51): one
# routing iteration (uniform couplings: the votes summed), the grid summed, the votes averaged.
HEADS = ("pooling", "capsule-su", "capsule-hinton", "capsule-su-march")
MODELS = (*HEADS, "capsule-su-r1", "pooling-sum", "capsule-mean")
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
    models: Tuple[str, ...] = setting(HEADS, "which models to train", choices=MODELS)
    seeds: Tuple[int, ...] = (0, 1, 2)
    epochs: Union[int, Mapping[str, int]] = 4
    batch_size: int = setting(16, "images per step", high=1 << 20)
    lr: float = setting(1e-3, "Adam learning rate", 0, 10, low_open=True)
    lr_schedule: str = setting("cosine", "constant (Su's) or cosine", choices=SCHEDULES)
    margin_lam: float = setting(0.25, "absent classes' weight (Su: 0.25)", 0, 10)
    squash_k: float = setting(0.5, "k in |s|^2/(k+|s|^2)", 0, 1000, low_open=True)
    iterations: int = setting(3, "routing iterations", high=100)
    init: str = setting("keras", "Keras's (Su's) or PyTorch's", choices=INITS)
    n_train: Optional[int] = setting(None, "train on the first N digits", flag="--limit")
    n_test: Optional[int] = setting(None, "test digits (pairs from them)", flag="--test-limit")
    n_pairs: int = setting(1000, "test images per layout", high=100_000, flag="--pairs")
    layouts: Tuple[str, ...] = setting(LAYOUTS, "how the two digits are placed", choices=LAYOUTS)
    shift: int = setting(0, "random shift augmentation, pixels", 0, 14)
    pair_seed: int = setting(1234, "seed of the test pairs", 0, MAX_SEED)
    source: str = setting("sample", "MNIST source", choices=SOURCES)
    curve: bool = False
    amp: str = setting("off", "mixed precision", choices=AMP_CHOICES)

    def __post_init__(self):
        for name in ("models", "seeds", "layouts"):  # lists from JSON or argparse become tuples
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        check_config(self)
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
        return plain(self)

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

