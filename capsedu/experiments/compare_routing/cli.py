"""The command line of chapter 10's comparison: ``python -m capsedu compare-routing``.

Imports no torch (``--help`` stays instant); ``cli_main`` imports ``capsedu.experiments.compare_routing.run``
only when the command runs.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys

from capsedu import PRESET_NAMES, current_mode
from capsedu.experiments.shared.arguments import add_run_arguments

__all__ = ["add_cli_arguments", "cli_main"]


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m capsedu compare-routing``."""
    add_run_arguments(parser, PRESET_NAMES, "method x seed", "override the preset's epochs")


def cli_main(args) -> int:
    """Run the comparison; the result JSON goes to ``--out`` (checked before training) and to stdout."""
    import dataclasses

    import torch

    from capsedu.data.mnist import load_dataset
    from capsedu.experiments.compare_routing.run import (
        DEFAULT_NAME,
        PRESETS,
        compare_routing,
        estimate_seconds,
    )
    from capsedu.runtime.results import output_path
    from capsedu.speed.bench import about

    preset = args.preset or current_mode()
    if preset not in PRESETS:
        raise ValueError(f"no preset {preset!r}; expected one of {tuple(PRESETS)}")
    out = None
    if args.out is not None:
        out = output_path(args.out, DEFAULT_NAME)  # a missing folder or an unwritable file: now, not after hours
        if out.exists() and not args.resume:
            raise ValueError(f"{out} exists; pass --resume to finish it, or remove it to start afresh")
    changes = {}
    if getattr(args, "seeds", None) is not None:
        if len(set(args.seeds)) != len(args.seeds):
            raise ValueError(f"--seeds must be distinct, got {' '.join(map(str, args.seeds))}")
        changes["seeds"] = tuple(args.seeds)
    if getattr(args, "epochs", None) is not None:
        changes["epochs"] = args.epochs
    config = dataclasses.replace(PRESETS[preset], **changes)
    torch.set_num_threads(args.threads)
    command = shlex.join(["python", "-m", "capsedu", *getattr(args, "argv", ["compare-routing"])])
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries the JSON only
        data = load_dataset("mnist", config.source, device="cpu", verbose=not args.no_progress)
        if not args.no_progress:
            print(f"capsedu compare-routing: {len(config.methods)} methods x {len(config.seeds)} seeds x "
                  f"{config.epochs} epochs; expected {about(sum(estimate_seconds(config, data, args.device).values()))}"
                  " on this machine, measured now from a few steps")
        result = compare_routing(config, out=out, resume=args.resume, device=args.device, data=data,
                                 command=command, preset=preset, progress=not args.no_progress)
    print(json.dumps(result, indent=1))
    if out is not None:
        print(f"capsedu compare-routing: wrote {out}", file=sys.stderr)
    return 0
