"""How an experiment's command runs (``python -m capsedu robustness``, ...; ``capsedu.cli`` parses
its options): everything is checked before any training. The grid of runs spreads over processes:
under torchrun each takes the runs i with i mod WORLD_SIZE = RANK; ``--devices cpu,cpu`` starts
torchrun itself; ``--shard K/N`` takes one share by hand (machines that share the folder).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys

from capsedu import current_mode
from capsedu.experiments.catalogue import EXPERIMENTS

__all__ = ["choose_shard", "cli_main"]


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


def cli_main(args) -> int:
    """Run the experiment ``args.experiment`` at its preset, every option named after a field of its
    config overriding that field: check ``--out`` and its runs, take this process's share, train
    (printing first the time it expects, where the experiment has an estimate) and print the result
    as JSON (stdout carries it alone)."""
    import dataclasses
    import json

    import torch

    from capsedu.data.mnist import load_dataset
    from capsedu.experiments.shared.runs import RunFolder, run_folder
    from capsedu.runtime.device import resolve_device
    from capsedu.runtime.files import plain
    from capsedu.runtime.lock import OutputLock
    from capsedu.runtime.results import command_line

    name, epochs = args.experiment, EXPERIMENTS[args.experiment].epochs
    code, preset = EXPERIMENTS[name].code(), args.preset or current_mode()
    known = {f.name for f in dataclasses.fields(code.presets[preset])}
    config = dataclasses.replace(code.presets[preset], **{k: tuple(v) if isinstance(v, list) else v
                                                          for k, v in vars(args).items() if k in known and v is not None})
    shard, device = choose_shard(args)
    resolve_device(device)                            # a device this machine lacks: an error now
    out = None if args.out is None else run_folder(args.out)
    if out is not None and not args.fresh:            # other settings or a damaged file: an error now
        RunFolder(out, {"settings": plain(config)})
    # one writer per folder; a share of the grid does not lock: --devices' launcher holds it for its
    # processes, and --shard by hand shares the folder on purpose
    with contextlib.nullcontext() if out is None or shard is not None else OutputLock(out):
        if args.devices:
            _launch(args)                             # then every run is stored: the run below trains none
            args.fresh, shard = False, None
        torch.set_num_threads(args.threads)
        with contextlib.redirect_stdout(sys.stderr):
            data = load_dataset("mnist", config.source, device="cpu", root=args.root, verbose=not args.no_progress)
            if code.estimate is not None and not args.no_progress and not args.devices:
                from capsedu.speed.bench import about
                seconds = code.estimate(config, data, device)
                total = sum(seconds.values()) if isinstance(seconds, dict) else seconds
                print(f"capsedu {name}: {len(config.seeds)} seed(s) x {getattr(config, epochs)} epochs; "
                      f"expected {about(total)} on this machine, measured now from a few steps")
            result = code.run(config, data=data, out=out, fresh=args.fresh, device=device, preset=preset,
                              command=command_line(args.argv), progress=not args.no_progress, shard=shard)
    if shard is not None and not os.environ.get("CAPSEDU_DEVICES"):
        print(f"capsedu {name}: share {shard.index}/{shard.count} of the grid is done; its runs are in {out}",
              file=sys.stderr)
    if shard is None:
        print(json.dumps(result, indent=1))
        if out is not None:
            print(f"capsedu {name}: {len(result['runs'])} runs in {out}", file=sys.stderr)
    return 0
