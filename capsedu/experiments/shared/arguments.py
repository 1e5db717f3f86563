"""The command line of the stored-run experiments (``python -m capsedu robustness``, ..., and the options
two-digits shares): no torch until a command runs, so ``--help`` stays instant; everything is checked
before any training. The grid of runs spreads over processes: under torchrun each takes the runs i with
i mod WORLD_SIZE = RANK; ``--devices cpu,cpu`` starts torchrun itself; ``--shard K/N`` takes one share
by hand (machines that share the folder).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys

from capsedu import PRESET_NAMES, current_mode
from capsedu.experiments.catalogue import EXPERIMENTS
from capsedu.runtime.arguments import epochs_int, seed_int, threads_int

__all__ = ["add_fresh_argument", "add_run_arguments", "add_cli_arguments",
           "choose_shard", "run_command", "cli_main"]

# options that override a config field of another name (two-digits')
RENAMED = {"limit": "n_train", "test_limit": "n_test", "pairs": "n_pairs"}


def add_fresh_argument(parser: argparse.ArgumentParser) -> None:
    """``--fresh``, the one flag of the resume rule (every command that writes a stored run has it)."""
    parser.add_argument("--fresh", action="store_true", help="start over: remove the runs --out already holds "
                        "(rerunning without it skips the runs stored with the same settings)")


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


def add_run_arguments(parser: argparse.ArgumentParser, presets, unit: str, epochs_help: str) -> None:
    """The options every stored-run command shares (two-digits too)."""
    parser.add_argument("--preset", choices=presets, default=None,
                        help="settings: smoke (seconds), quick (the book's preview), long (the stored "
                        "run on a 2-core CPU), gpu, full (default: $CAPSEDU_MODE, else gpu on a GPU, quick on a CPU)")
    parser.add_argument("--out", default=None, help=f"the experiment's folder (created if missing): one JSON "
                        f"file per finished {unit}; rerunning the same command skips the runs it holds")
    add_fresh_argument(parser)
    parser.add_argument("--seeds", nargs="+", type=seed_int, default=None, help="override the preset's seeds")
    parser.add_argument("--epochs", type=epochs_int, default=None, help=epochs_help)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    parser.add_argument("--threads", type=threads_int, default=2, help="CPU threads for torch")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    share = parser.add_mutually_exclusive_group()  # --devices starts one process per device, each with its share
    share.add_argument("--devices", type=_devices, help="spread the grid of runs over these devices, one "
                       "process each, started by torchrun (a comma list: cpu,cpu or cuda:0,cuda:1; needs --out)")
    share.add_argument("--shard", type=_shard, help="train only the runs i with i mod N = K (machines that "
                       "share the --out folder; under torchrun each process takes its RANK)")


def add_cli_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The options of one of ``EXPERIMENTS``' commands."""
    e = EXPERIMENTS[command]
    maximum = " (maximum)" if e.epochs == "max_epochs" else ""
    add_run_arguments(parser, PRESET_NAMES, e.unit, f"override the preset's{maximum} epochs")
    parser.set_defaults(experiment=command)


def choose_shard(args):
    """(this process's ``Shard`` or None, its device): ``--shard``, or torchrun's RANK of WORLD_SIZE on entry
    LOCAL_RANK of ``--devices`` (auto on a GPU machine: ``cuda:LOCAL_RANK``). Flags that clash: one line."""
    from capsedu.experiments.shared.runs import Shard
    world, rank, local = (int(os.environ.get(k, d)) for k, d in (("WORLD_SIZE", "1"), ("RANK", "0"), ("LOCAL_RANK", "0")))
    if getattr(args, "fresh", False) and args.out is None:
        raise ValueError("--fresh starts a stored run over, so it needs --out (the folder to clear)")
    if (args.devices or args.shard) and args.out is None:
        raise ValueError(f"--{'devices' if args.devices else 'shard'} splits the grid over processes that each "
                         "write their runs into --out, so it needs --out")
    if world <= 1:
        return (None if args.shard is None else Shard(*args.shard)), args.device
    if args.shard is not None:
        raise ValueError(f"under torchrun (WORLD_SIZE={world}) each process takes the share of its RANK; drop --shard")
    if args.fresh:  # --devices clears the folder once, before its processes start
        raise ValueError("--fresh under torchrun: every process would clear the folder; clear it first, then rerun")
    devices = os.environ.get("CAPSEDU_DEVICES")
    device = devices.split(",")[local] if devices else args.device
    if device in ("auto", "cuda"):
        import torch
        if torch.cuda.is_available():
            device = f"cuda:{local}"
    return Shard(rank, world), device


def _launch(args) -> None:
    """``--devices``: torchrun starts this command (without ``--devices``) once per device."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as torchrun

    from capsedu.experiments.shared.runs import clear_runs, run_folder
    from capsedu.runtime.device import resolve_device
    for entry in args.devices:
        resolve_device(entry)                         # a device this machine lacks: an error now
    argv, skip = [], False
    for a in args.argv:  # the command without --devices, and without --fresh: the folder is cleared here, once
        if skip or a in ("--devices", "--fresh") or a.startswith("--devices="):
            skip = a == "--devices"
            continue
        argv.append(a)
    if args.fresh:
        clear_runs(run_folder(args.out))
    threads = max(1, args.threads // max(1, sum(d == "cpu" for d in args.devices)))
    os.environ.update(CAPSEDU_DEVICES=",".join(args.devices), OMP_NUM_THREADS=str(threads))
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}  # torchrun replaces them
    try:
        torchrun(["--standalone", f"--nproc_per_node={len(args.devices)}", "-m", "capsedu", *argv, "--threads", str(threads)])
    except Exception as err:  # torchrun's ChildFailedError lists every process that failed
        codes = [f.exitcode for f in getattr(err, "failures", {}).values()]
        if isinstance(err, SignalException) or codes and all(c in (130, -signal.SIGINT) for c in codes):
            raise KeyboardInterrupt from None     # Ctrl-C reached torchrun or every process: exit 130
        raise RuntimeError(f"a process of --devices {','.join(args.devices)} failed ({type(err).__name__}); the "
                           f"finished runs are kept in {args.out}: rerun the same command to resume") from None
    finally:
        os.environ.pop("CAPSEDU_DEVICES")
        for number, handler in handlers.items():
            signal.signal(number, handler)


def run_command(args, config, preset: str, run, command_name: str) -> int:
    """Check ``--out`` and its runs, take this process's share, ``run(out=, fresh=, device=, command=, preset=,
    progress=, shard=)`` and print the result as JSON (stdout carries it alone)."""
    import json

    import torch

    from capsedu.experiments.shared.runs import RunFolder, run_folder, settings
    from capsedu.runtime.device import resolve_device
    from capsedu.runtime.lock import OutputLock
    from capsedu.runtime.results import command_line

    shard, device = choose_shard(args)
    resolve_device(device)                            # a device this machine lacks: an error now
    out = None if args.out is None else run_folder(args.out)
    if out is not None and not args.fresh:            # other settings or a damaged file: an error now
        RunFolder(out, {"settings": settings(config)})
    # one writer per folder; a share of the grid does not lock: --devices' launcher holds it for its
    # processes, and --shard by hand shares the folder on purpose
    with contextlib.nullcontext() if out is None or shard is not None else OutputLock(out):
        if args.devices:
            _launch(args)                             # then every run is stored: the run below trains none
            args.fresh, shard = False, None
        torch.set_num_threads(args.threads)
        with contextlib.redirect_stdout(sys.stderr):
            result = run(out=out, fresh=args.fresh, device=device, command=command_line(args.argv), preset=preset,
                         progress=not args.no_progress, shard=shard)
    if shard is not None and not os.environ.get("CAPSEDU_DEVICES"):
        print(f"capsedu {command_name}: share {shard.index}/{shard.count} of the grid is done; its runs are in {out}",
              file=sys.stderr)
    if shard is None:
        print(json.dumps(result, indent=1))
        if out is not None:
            print(f"capsedu {command_name}: {len(result['runs'])} runs in {out}", file=sys.stderr)
    return 0


def cli_main(args) -> int:
    """Run the experiment ``args.experiment``: its preset, every option that names one of its config's
    fields overriding that field (``--epochs``: the field its ``Experiment`` names; ``RENAMED``); where
    the experiment has an estimate, it is printed first."""
    import dataclasses

    experiment = EXPERIMENTS[args.experiment]
    code, epochs_field = experiment.code(), experiment.epochs
    preset = args.preset or current_mode()
    if preset not in code.presets:
        raise ValueError(f"no preset {preset!r} for {args.experiment}; expected one of {tuple(code.presets)}")
    if args.seeds is not None and len(set(args.seeds)) != len(args.seeds):
        raise ValueError(f"--seeds must be distinct, got {' '.join(map(str, args.seeds))}")
    renamed = {**RENAMED, "epochs": epochs_field}
    known = {f.name for f in dataclasses.fields(code.presets[preset])}
    changes = {renamed.get(k, k): tuple(v) if isinstance(v, list) else v for k, v in vars(args).items()
               if renamed.get(k, k) in known and v is not None}
    config = dataclasses.replace(code.presets[preset], **changes)

    def run(**options):
        from capsedu.data.mnist import load_dataset
        data = load_dataset("mnist", config.source, device="cpu", root=getattr(args, "root", None),
                            verbose=options["progress"])
        if code.estimate is not None and options["progress"] and not args.devices:
            from capsedu.speed.bench import about
            seconds = code.estimate(config, data, options["device"])
            total = sum(seconds.values()) if isinstance(seconds, dict) else seconds
            print(f"capsedu {args.experiment}: {len(config.seeds)} seed(s) x {getattr(config, epochs_field)} "
                  f"epochs; expected {about(total)} on this machine, measured now from a few steps")
        return code.run(config, data=data, **options)
    return run_command(args, config, preset, run, args.experiment)
