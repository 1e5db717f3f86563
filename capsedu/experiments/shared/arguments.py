"""The command line of the stored-run experiments of chapters 9 and 10: ``python -m capsedu
robustness|ablation|multimnist|compare-routing|tutorial-vs-fixed``.

The commands take the same options, so one parser builder serves them; it imports no torch
(``--help`` stays instant), and ``cli_main`` imports the experiment's own module (named in
``EXPERIMENTS``) only when it runs. Every stored-run command (two-digits too) follows one resume
rule: rerunning it with an existing ``--out`` resumes when the stored settings match, ``--fresh``
starts over, other settings are a one-line error (``capsedu.experiments.shared.runs.resumable``).
Before anything is created: every number within its bounds, ``--device``, ``--out`` (``output_path``),
contradictory flags (``check_flags``) and the stored file; then ``--out`` is locked for the whole run.
The grid of (model, seed) runs spreads over processes (``capsedu.experiments.shared.grid``):
``--devices cpu,cpu`` starts one per device, ``--shard K/N`` (or torchrun's rank) runs one share,
each into its own file beside ``--out`` (that file is the one locked), merged into ``--out`` at the end.
"""
from __future__ import annotations

import argparse
import contextlib
import sys

from capsedu import PRESET_NAMES, current_mode
from capsedu.experiments.shared.grid import add_grid_arguments
from capsedu.runtime.arguments import epochs_int, seed_int, threads_int

__all__ = ["EXPERIMENTS", "add_fresh_argument", "add_run_arguments", "add_cli_arguments", "check_flags", "cli_main"]

# command -> (module, runner, config field that --epochs sets, what --out is rewritten after, one-line description)
EXPERIMENTS = {
    "robustness": ("robustness", "robustness_experiment", "max_epochs", "run",
                   "affine robustness of a CNN and CapsNet matched on clean accuracy (the paper's affNIST test)"),
    "ablation": ("ablation", "ablation_experiment", "epochs", "run",
                 "routing iterations x reconstruction loss, plus detach_inner (the paper's Table 1)"),
    "multimnist": ("multimnist", "multimnist_experiment", "epochs", "run",
                   "overlapping digits: top-2 accuracy and segmentation (the paper's MultiMNIST)"),
    "compare-routing": ("compare_routing.run", "compare_routing", "epochs", "method x seed",
                        "dynamic, EM, self-attention and no routing on one budget"),
    "tutorial-vs-fixed": ("tutorial_vs_fixed", "tutorial_vs_fixed", "epochs", "model x seed",
                          "the tutorial code's CapsNet against capsedu's, same data and budget (chapter 11)"),
}


def add_fresh_argument(parser: argparse.ArgumentParser) -> None:
    """``--fresh``, the one flag of the resume rule (every command that writes a stored run has it)."""
    parser.add_argument("--fresh", action="store_true", help="start over: ignore what --out already holds "
                        "(rerunning without it resumes when the stored settings match)")


def add_run_arguments(parser: argparse.ArgumentParser, presets, unit: str, epochs_help: str) -> None:
    """The options every stored-run command of chapters 9 and 10 shares."""
    parser.add_argument("--preset", choices=presets, default=None,
                        help="settings: smoke (seconds), quick (the book's preview), long (the stored "
                        "run on a 2-core CPU), gpu, full (default: $CAPSEDU_MODE, else gpu on a GPU, quick on a CPU)")
    parser.add_argument("--out", default=None, help="JSON file in an existing folder (or an existing folder: the "
                        f"file goes inside it), rewritten after every finished {unit}; rerunning the same command "
                        "resumes from it; one writer at a time (a lock file beside it)")
    add_fresh_argument(parser)
    parser.add_argument("--seeds", nargs="+", type=seed_int, default=None, help="override the preset's seeds")
    parser.add_argument("--epochs", type=epochs_int, default=None, help=epochs_help)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    parser.add_argument("--threads", type=threads_int, default=2, help="CPU threads for torch")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_grid_arguments(parser)


def add_cli_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The options of one of ``EXPERIMENTS``' commands."""
    if command not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {command!r}; expected one of {tuple(EXPERIMENTS)}")
    epochs = "override the preset's (maximum) epochs" if EXPERIMENTS[command][2] == "max_epochs" else \
        "override the preset's epochs"
    add_run_arguments(parser, PRESET_NAMES, EXPERIMENTS[command][3], epochs)
    parser.set_defaults(experiment=command)


def check_flags(args) -> None:
    """Flags that contradict each other: one line, before anything runs."""
    if getattr(args, "fresh", False) and getattr(args, "out", None) is None:
        raise ValueError("--fresh starts a stored run over, so it needs --out (the file to replace)")


def cli_main(args) -> int:
    """Run the experiment ``args.experiment``; the result JSON goes to ``--out`` and to stdout.

    Everything is checked before any training: the preset, the overrides, ``--out`` and whether it
    can be resumed. A module with ``estimate_seconds(config, data, device)`` gets its estimate printed.
    """
    import dataclasses
    import importlib

    import torch

    from capsedu.experiments.shared import grid
    from capsedu.experiments.shared.runs import check_out, settings
    from capsedu.runtime.device import resolve_device
    from capsedu.runtime.lock import OutputLock
    from capsedu.runtime.results import command_line, output_path

    module_name, runner, epochs_field, *_ = EXPERIMENTS[args.experiment]
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
    check_flags(args)
    shard = grid.choose(args)                             # --devices, --shard, torchrun: their clashes now
    device = grid.shard_device(args.device, shard)
    resolve_device(device)                                # a device this machine lacks: an error now
    out = None
    if args.out is not None:
        out = output_path(args.out, module.DEFAULT_NAME)  # a missing folder or an unwritable file: now, not after hours
        count = len(args.devices) if args.devices is not None else shard and shard.count
        check_out(out, settings(config), args.fresh, count)  # other settings or a damaged file: an error now
    command = command_line(getattr(args, "argv", [args.experiment]))
    if args.devices is not None:                          # one process per device, each a shard; they merge
        return grid.report(grid.launch(args, out, command), out, args.experiment)
    torch.set_num_threads(args.threads)
    progress = not args.no_progress
    lock = OutputLock(out if shard is None else grid.shard_path(out, shard)) if out is not None else \
        contextlib.nullcontext()
    with lock, contextlib.redirect_stdout(sys.stderr):  # one writer of --out; stdout carries the JSON only
        data = None
        if hasattr(module, "estimate_seconds"):
            from capsedu.data.mnist import load_dataset
            from capsedu.speed.bench import about
            data = load_dataset("mnist", config.source, device="cpu", verbose=progress)
            if progress:
                seconds = module.estimate_seconds(config, data, device)
                total = sum(seconds.values()) if isinstance(seconds, dict) else seconds
                print(f"capsedu {args.experiment}: {len(config.seeds)} seed(s) x {getattr(config, epochs_field)} "
                      f"epochs; expected {about(total)} on this machine, measured now from a few steps")
        result = getattr(module, runner)(config, out=out, fresh=args.fresh, device=device, data=data,
                                         command=command, preset=preset, progress=progress, shard=shard)
    return grid.report(result, out, args.experiment)
