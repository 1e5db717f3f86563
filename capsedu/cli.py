"""The command line, ``python -m capsedu``.

- ``train``: train the paper's CapsNet; writes ``checkpoint.pt`` (after every epoch)
  and ``metrics.json`` to ``--out``, and resumes from the checkpoint when rerun.
- ``evaluate``: test accuracy of a checkpoint, printed as JSON.
- ``info``: versions, devices and which data sources are at hand, as JSON.
- ``two-digits``: Su Jianlin's two-digit experiment (train on single digits, test on
  pairs), with the book's settings for a mode (``--preset``); the results as JSON.
- ``robustness``, ``ablation``, ``multimnist``: chapter 9's reruns of the paper's three
  experiments, and ``compare-routing``: chapter 10's routing methods on one budget (every
  experiment is declared in ``capsedu.experiments.catalogue``); JSON on stdout and in ``--out``.

One resume rule for every command that writes a stored run (``train`` and all of the above):
rerunning it with an existing ``--out`` resumes when the stored settings match, ``--fresh``
starts over, and other settings are a one-line error that names them. ``--out`` is a folder,
checked with every other argument before any training: ``train``'s holds its checkpoint and
metrics (one writer at a time, a lock beside them); an experiment's holds one JSON file per
finished (model, seed) run (``capsedu.experiments.shared.runs``), so its grid spreads over
processes (``--devices``, ``--shard``, torchrun) that never write one file. A damaged stored file
is one line naming it (``capsedu.runtime.stored``).

Bad arguments exit with code 2 and one line; errors at run time with code 1 and
one line (set ``CAPSEDU_DEBUG=1`` for the full traceback). torch is imported only
once a command runs, so ``--help`` is instant.
"""
from __future__ import annotations

import argparse
import os
import sys

from capsedu import SOURCES
from capsedu.runtime.arguments import CommandParser, HelpFormatter, batch_int, int_in, positive_int

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    fmt = HelpFormatter
    parser = CommandParser(prog="python -m capsedu", description="Capsule Networks, taught: train, evaluate, inspect.")
    from capsedu.experiments.catalogue import EXPERIMENTS
    sub = parser.add_subparsers(dest="command", required=True,
                                metavar="{" + ",".join(["train", "evaluate", "info", *EXPERIMENTS]) + "}")

    def data_args(p, default):  # default None: the checkpoint's
        theirs = " (default: the checkpoint's)" if default is None else ""
        p.add_argument("--dataset", choices=("mnist", "fashion-mnist"), default=default and "mnist",
                       help="which images" + theirs)
        p.add_argument("--source", choices=SOURCES, default=default, help="auto: full via torchvision if "
                       "it can be had, else the embedded 10k sample" + theirs)
        p.add_argument("--root", default=None, help="data folder (default: $CAPSEDU_DATA or ~/.cache/capsedu; "
                       "for --source idx, the folder of IDX files)")
        p.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")

    t = sub.add_parser("train", help="train the paper's CapsNet", formatter_class=fmt,
                       description="Train CapsNet (Sabour et al., 2017). Rerun the same command to resume "
                       "(--fresh starts over).")
    data_args(t, "auto")
    from capsedu.training.config import add_config_arguments
    add_config_arguments(t)  # --epochs, --batch-size, --lr, ..., --amp, --compile: TrainConfig's fields
    t.add_argument("--routing", choices=("hinton", "su"), default="hinton", help="routing update")
    t.add_argument("--iterations", type=int_in(1, 100), default=3, help="routing iterations")
    t.add_argument("--out", default="runs/capsnet", help="folder for checkpoint.pt and metrics.json "
                   "(created, with its parents, once every argument is checked); one writer at a time")
    from capsedu.experiments.shared.arguments import add_fresh_argument
    add_fresh_argument(t)
    t.add_argument("--fast", action="store_true", help="capsedu.speed.fast: fused routing, channels-last on CUDA")
    t.add_argument("--limit", type=positive_int, default=None, help="train on the first N images only")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")

    e = sub.add_parser("evaluate", help="test accuracy of a checkpoint (JSON)", formatter_class=fmt,
                       description="Rebuild the model stored in a checkpoint and print its test accuracy as JSON.")
    e.add_argument("--checkpoint", required=True, help="a checkpoint.pt written by train")
    data_args(e, None)
    e.add_argument("--limit", type=positive_int, default=None, help="test on the first N images only")
    e.add_argument("--batch-size", type=batch_int, default=500, help="images per forward pass")

    i = sub.add_parser("info", help="versions, devices and data sources (JSON)", formatter_class=fmt,
                       description="Print versions, available devices and data sources as JSON.")
    i.add_argument("--root", default=None, help="data folder (default: $CAPSEDU_DATA or ~/.cache/capsedu)")

    from capsedu.experiments.shared.arguments import add_cli_arguments
    from capsedu.experiments.two_digits.config import add_cli_arguments as two_digit_arguments
    for name, e in EXPERIMENTS.items():
        p = sub.add_parser(name, help=e.about + " (JSON)", formatter_class=fmt, description=e.about + "; the "
                           "result as JSON on stdout (and in --out). Rerun the same command to finish an "
                           "interrupted run (--fresh starts over); options override the preset.")
        if name == "two-digits":  # its own options (capsedu.experiments.two_digits.config)
            two_digit_arguments(p)
            p.set_defaults(experiment=name)
        else:
            add_cli_arguments(p, name)
    return parser


def run(args) -> int:
    """The command's code, imported only now (torch comes with it)."""
    if args.command in ("train", "evaluate", "info"):
        from capsedu.experiments import train
        return {"train": train.cmd_train, "evaluate": train.cmd_evaluate, "info": train.cmd_info}[args.command](args)
    from capsedu.experiments.shared.arguments import cli_main
    return cli_main(args)


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
            code = run(args)
            if interrupted():
                raise KeyboardInterrupt
            return code
    except KeyboardInterrupt:
        hint = "; rerun the same command to resume from the last finished epoch" if args.command == "train" else \
            f"; the finished runs are kept in {args.out}: rerun the same command to resume" \
            if getattr(args, "out", None) else ""
        print(f"capsedu {args.command}: interrupted{hint}", file=sys.stderr)
        return 130
    except (ValueError, TypeError, RuntimeError, OSError, FloatingPointError) as err:
        if os.environ.get("CAPSEDU_DEBUG"):
            raise
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"capsedu {args.command}: error: {message}", file=sys.stderr)
        return 1
