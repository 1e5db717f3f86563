"""Every stored-run experiment, declared once: its command and its code.

The CLI and ``shared.arguments`` take the names from here. The code is imported by
``Experiment.code()``, inside a function, so that ``python -m capsedu --help`` needs no torch;
this is the one module that may import every experiment (tests/test_layout.py).
"""
from __future__ import annotations

from typing import Callable, Dict, NamedTuple, Optional

__all__ = ["Code", "Experiment", "EXPERIMENTS"]


class Code(NamedTuple):
    """An experiment's code: ``run(config, out=, fresh=, device=, ...)``, its presets and, where it has one, ``estimate(config, data, device)``."""
    run: Callable
    presets: Dict
    estimate: Optional[Callable] = None


class Experiment(NamedTuple):
    command: str             # python -m capsedu <command>
    unit: str                # what one run of its grid is
    epochs: str              # the config field that --epochs sets
    about: str               # the command's one-line description
    code: Callable[[], Code]  # imports its code


def _robustness() -> Code:
    from capsedu.experiments import robustness as m
    return Code(m.robustness_experiment, m.PRESETS)


def _ablation() -> Code:
    from capsedu.experiments import ablation as m
    return Code(m.ablation_experiment, m.PRESETS)


def _multimnist() -> Code:
    from capsedu.experiments import multimnist as m
    return Code(m.multimnist_experiment, m.PRESETS)


def _compare_routing() -> Code:
    from capsedu.experiments.compare_routing import run as m
    return Code(m.compare_routing, m.PRESETS, m.estimate_seconds)


def _tutorial_vs_fixed() -> Code:
    from capsedu.experiments import tutorial_vs_fixed as m
    return Code(m.tutorial_vs_fixed, m.PRESETS)


def _two_digits() -> Code:  # its options: TwoDigitConfig's fields (capsedu.cli)
    from capsedu.experiments.two_digits import config, run
    return Code(lambda config, data=None, **options: run.two_digit_experiment(data, config, **options),
                config.PRESETS)


EXPERIMENTS = {e.command: e for e in (
    Experiment("two-digits", "model x seed", "epochs", "Su's digits-to-pairs test (chapter 7)", _two_digits),
    Experiment("robustness", "run", "max_epochs", "affNIST robustness, CNN vs CapsNet", _robustness),
    Experiment("ablation", "run", "epochs", "routing x reconstruction (Table 1)", _ablation),
    Experiment("multimnist", "run", "epochs", "overlapping digits (MultiMNIST)", _multimnist),
    Experiment("compare-routing", "method x seed", "epochs", "routing methods on one budget", _compare_routing),
    Experiment("tutorial-vs-fixed", "model x seed", "epochs", "the tutorial's CapsNet vs capsedu's", _tutorial_vs_fixed),
)}
