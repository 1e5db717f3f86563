"""The options of ``python -m capsedu two-digits``, chapter 7's experiment, run as every experiment is
(``capsedu.experiments.shared.arguments.cli_main``: an option named after a ``TwoDigitConfig`` field, or
renamed in ``RENAMED`` there, overrides it); no torch is imported, so ``--help`` is instant."""
from __future__ import annotations

from capsedu import AMP_CHOICES, SOURCES
from capsedu.experiments.shared.arguments import add_run_arguments
from capsedu.experiments.two_digits.config import INITS, LAYOUTS, MODELS, PRESETS, SCHEDULES
from capsedu.runtime.arguments import batch_int, float_in, int_in, positive_int, seed_int

__all__ = ["add_cli_arguments"]


def add_cli_arguments(d) -> None:
    """The options of ``python -m capsedu two-digits`` (an argparse parser)."""
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

