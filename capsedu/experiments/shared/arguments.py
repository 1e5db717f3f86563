"""The command line of chapter 9's experiments: ``python -m capsedu robustness|ablation|multimnist``.

The three commands take the same options, so one parser builder serves them; it imports no
torch (``--help`` stays instant), and ``cli_main`` imports the experiment's own module
(``capsedu.experiments.robustness``, ``capsedu.experiments.ablation``, ``capsedu.experiments.multimnist``) only when it runs.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys

from capsedu import PRESET_NAMES, current_mode
from capsedu.runtime.arguments import non_negative_int, positive_int

__all__ = ["EXPERIMENTS", "add_run_arguments", "add_cli_arguments", "cli_main"]

# command -> (module, runner, config field that --epochs sets, one-line description)
EXPERIMENTS = {
    "robustness": ("robustness", "robustness_experiment", "max_epochs",
                   "affine robustness of a CNN and CapsNet matched on clean accuracy (the paper's affNIST test)"),
    "ablation": ("ablation", "ablation_experiment", "epochs",
                 "routing iterations x reconstruction loss, plus detach_inner (the paper's Table 1)"),
    "multimnist": ("multimnist", "multimnist_experiment", "epochs",
                   "overlapping digits: top-2 accuracy and segmentation (the paper's MultiMNIST)"),
}


def add_run_arguments(parser: argparse.ArgumentParser, presets, unit: str, epochs_help: str) -> None:
    """The options every stored-run command of chapters 9 and 10 shares."""
    parser.add_argument("--preset", choices=presets, default=None,
                        help="settings: smoke (seconds), quick (the book's preview), long (the stored "
                        "run on a 2-core CPU), gpu, full (default: $CAPSEDU_MODE, else gpu on a GPU, quick on a CPU)")
    parser.add_argument("--out", default=None, help="JSON file (or a folder: the file goes inside it), "
                        f"rewritten after every finished {unit}")
    parser.add_argument("--resume", action="store_true", help="keep the finished runs --out already holds "
                        "and train only the missing ones")
    parser.add_argument("--seeds", nargs="+", type=non_negative_int, default=None, help="override the preset's seeds")
    parser.add_argument("--epochs", type=positive_int, default=None, help=epochs_help)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    parser.add_argument("--threads", type=positive_int, default=2, help="CPU threads for torch")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def add_cli_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The options of one of ``EXPERIMENTS``' commands."""
    if command not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {command!r}; expected one of {tuple(EXPERIMENTS)}")
    add_run_arguments(parser, PRESET_NAMES, "run", "override the preset's (maximum) epochs")
    parser.set_defaults(experiment=command)


def cli_main(args) -> int:
    """Run the experiment ``args.experiment``; the result JSON goes to ``--out`` and to stdout."""
    import dataclasses
    import importlib

    import torch


    module_name, runner, epochs_field, _ = EXPERIMENTS[args.experiment]
    module = importlib.import_module(f"capsedu.experiments.{module_name}")
    preset = args.preset or current_mode()
    if preset not in module.PRESETS:
        raise ValueError(f"no preset {preset!r} for {args.experiment}; expected one of {tuple(module.PRESETS)}")
    changes = {}
    if args.seeds is not None:
        if len(set(args.seeds)) != len(args.seeds):
            raise ValueError(f"--seeds must be distinct, got {' '.join(map(str, args.seeds))}")
        changes["seeds"] = tuple(args.seeds)
    if args.epochs is not None:
        changes[epochs_field] = args.epochs
    config = dataclasses.replace(module.PRESETS[preset], **changes)
    out = None
    if args.out is not None:
        from capsedu.runtime.results import output_path
        out = output_path(args.out, module.DEFAULT_NAME)  # checked before any training
        if out.exists() and not args.resume:
            raise ValueError(f"{out} exists; pass --resume to finish it, or remove it to start afresh")
    torch.set_num_threads(args.threads)
    command = shlex.join(["python", "-m", "capsedu", *getattr(args, "argv", [])])
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries the JSON only
        result = getattr(module, runner)(config, out=out, resume=args.resume, device=args.device,
                                         command=command, preset=preset, progress=not args.no_progress)
    print(json.dumps(result, indent=1))
    if out is not None:
        print(f"capsedu {args.experiment}: wrote {out}", file=sys.stderr)
    return 0
