"""The command line, ``python -m capsedu``: ``train``, ``evaluate``, ``info`` and one command per
stored-run experiment (``capsedu.experiments.catalogue``), each printing JSON. A rerun with the
same ``--out`` resumes; ``--fresh`` starts over, removing only what the command wrote; other
settings, bad arguments (exit 2) and run-time errors (exit 1) are one line (``CAPSEDU_DEBUG=1``:
the traceback); Ctrl-C exits 130. No torch until a command runs: ``--help`` is instant.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

from capsedu import PRESET_NAMES, SOURCES
from capsedu.runtime.arguments import MAX_INT, MAX_SEED, CommandParser, HelpFormatter, add_options, number

__all__ = ["main", "build_parser"]


def _shard(text: str):
    match = re.fullmatch(r"\s*(\d{1,6})\s*/\s*(\d{1,6})\s*", text)
    if match is None or not int(match[1]) < int(match[2]):
        raise argparse.ArgumentTypeError(f"expected K/N, shard K of N with 0 <= K < N (counted from 0, as "
                                         f"torchrun's RANK), got {text!r}")
    return int(match[1]), int(match[2])


def _devices(text: str):
    entries = [e.strip() for e in text.split(",")]
    if not all(entries):
        raise argparse.ArgumentTypeError(f"expected a comma list of devices such as cpu,cpu or cuda:0,cuda:1, got {text!r}")
    return entries


def build_parser() -> argparse.ArgumentParser:
    from capsedu.experiments.catalogue import EXPERIMENTS
    from capsedu.experiments.two_digits.config import PRESETS, TwoDigitConfig
    from capsedu.training.config import TrainConfig
    parser = CommandParser(prog="python -m capsedu", description="Capsule Networks, taught.")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name, about, **options):
        p = sub.add_parser(name, help=about, description=about, formatter_class=HelpFormatter)
        for flags, kw in options.items():  # --no-progress for no_progress
            p.add_argument("--" + flags.replace("_", "-"), **kw)
        return p

    switch = dict(action="store_true")
    common = dict(root=dict(help="data folder (default: $CAPSEDU_DATA)"),
                  device=dict(default="auto", help="auto, cpu, cuda or mps"),
                  no_progress=dict(switch, help="no progress bars"))
    data = dict(dataset=dict(choices=("mnist", "fashion-mnist"), help="which images"),
                source=dict(choices=SOURCES, help="where from (auto: full, else sample)"))
    fresh = dict(switch, help="start over: remove what it wrote")
    t = command("train", "train CapsNet (a rerun resumes)", **data, **common, fresh=fresh,
                routing=dict(choices=("hinton", "su"), default="hinton"),
                iterations=dict(type=number(int, 1, 100), default=3, help="routing iterations"),
                out=dict(default="runs/capsnet", help="folder of checkpoint.pt, metrics.json"),
                fast=dict(switch, help="capsedu.speed.fast's fused routing"),
                limit=dict(type=number(int, 1, MAX_INT), help="train on the first N images"))
    t.set_defaults(dataset="mnist", source="auto")
    add_options(t, TrainConfig, defaults=True)
    command("evaluate", "a checkpoint's test accuracy", **data, **common,  # data: the checkpoint's
            checkpoint=dict(required=True, help="a checkpoint.pt written by train"),
            limit=dict(type=number(int, 1, MAX_INT), help="test on the first N images"),
            batch_size=dict(type=number(int, 1, 1 << 20), default=500, help="images per forward pass"))
    command("info", "versions, devices and data sources", root=common["root"])
    for name, e in EXPERIMENTS.items():
        p = command(name, e.about, **common, fresh=fresh, out=dict(help=f"folder: a JSON file per {e.unit}"),
                    preset=dict(choices=tuple(PRESETS) if name == "two-digits" else PRESET_NAMES,
                                help="default: $CAPSEDU_MODE, else by device"),
                    seeds=dict(nargs="+", type=number(int, 0, MAX_SEED), help="the preset's, or these"),
                    epochs=dict(dest=e.epochs, type=number(int, 1, 100_000), help="the preset's, or this"),
                    threads=dict(type=number(int, 1, 1024), default=2, help="CPU threads for torch"))
        share = p.add_mutually_exclusive_group()  # --devices starts one process per device, each with its share
        share.add_argument("--devices", type=_devices, help="one process each, by torchrun")
        share.add_argument("--shard", type=_shard, help="K/N: only the runs i, i mod N = K")
        p.set_defaults(experiment=name)
        if name == "two-digits":
            add_options(p, TwoDigitConfig)
    return parser


def main(argv=None) -> int:
    """Run one command; returns the exit code (0 ok, 1 run-time error, 2 bad arguments, 130 interrupted)."""
    import importlib

    from capsedu.runtime.files import catch_ctrl_c, ctrl_c_deferred, interrupted
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        print("capsedu: interrupted", file=sys.stderr)
        return 130
    args.argv = argv
    try:
        with catch_ctrl_c():  # Ctrl-C at any moment: exit 130, whatever swallowed it
            with ctrl_c_deferred():  # one that lands inside torch's import can abort the process (SIGABRT)
                importlib.import_module("torch")  # (a test stands in for it)
            if args.command in ("train", "evaluate", "info"):
                from capsedu.experiments import train
                code = {"train": train.cmd_train, "evaluate": train.cmd_evaluate, "info": train.cmd_info
                        }[args.command](args)
            else:
                from capsedu.experiments.shared.arguments import cli_main
                code = cli_main(args)
            if interrupted():
                raise KeyboardInterrupt
            return code
    except KeyboardInterrupt:
        where = "the last finished epoch" if args.command == "train" else f"the runs kept in {getattr(args, 'out', None)}"
        print(f"capsedu {args.command}: interrupted" + (f"; rerun the same command to resume from {where}"
              if args.command == "train" or getattr(args, "out", None) else ""), file=sys.stderr)
        return 130
    except (ValueError, TypeError, RuntimeError, OSError, FloatingPointError) as err:
        if os.environ.get("CAPSEDU_DEBUG"):
            raise
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"capsedu {args.command}: error: {message}", file=sys.stderr)
        return 1
