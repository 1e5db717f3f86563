"""The command line, ``python -m capsedu``.

- ``train``: train the paper's CapsNet; writes ``checkpoint.pt`` (after every epoch)
  and ``metrics.json`` to ``--out``, and resumes from the checkpoint when rerun.
- ``evaluate``: test accuracy of a checkpoint, printed as JSON.
- ``info``: versions, devices and which data sources are at hand, as JSON.
- ``two-digits``: Su Jianlin's two-digit experiment (train on single digits, test on
  pairs), with the book's settings for a mode (``--preset``); the results as JSON.
- ``robustness``, ``ablation``, ``multimnist``: chapter 9's reruns of the paper's three
  experiments (``capsedu.paper_cli``); JSON on stdout and in ``--out``, resumable.
- ``compare-routing``: chapter 10's four routing methods on one budget
  (``capsedu.compare_routing_cli``); JSON on stdout and in ``--out``, resumable.

Bad arguments exit with code 2 and one line; errors at run time with code 1 and
one line (set ``CAPSEDU_DEBUG=1`` for the full traceback). torch is imported only
once a command runs, so ``--help`` is instant.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main", "build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument prints one line (no usage block) and exits with code 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except the empty ones (None, False)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def _number(kind, ok, what):
    """An argparse type: ``kind(text)`` that must satisfy ``ok``, else one clear error line."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value
    return parse


positive_int = _number(int, lambda v: v > 0, "a positive integer")
non_negative_int = _number(int, lambda v: v >= 0, "an integer >= 0")
positive_float = _number(float, lambda v: 0 < v < float("inf"), "a positive number")
non_negative_float = _number(float, lambda v: 0 <= v < float("inf"), "a number >= 0")


def build_parser() -> argparse.ArgumentParser:
    fmt = _Help
    parser = _Parser(prog="python -m capsedu", description="Capsule Networks, taught: train, evaluate, inspect.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,evaluate,info,two-digits,robustness,ablation,multimnist,compare-routing}")

    def data_args(p, source_default):
        p.add_argument("--dataset", choices=("mnist", "fashion-mnist"), default=None if source_default is None
                       else "mnist", help="which images" + (" (default: the checkpoint's)" if source_default
                                                            is None else ""))
        p.add_argument("--source", choices=("auto", "sample", "full", "idx"), default=source_default,
                       help="auto: full via torchvision if it can be had, else the embedded 10k sample"
                       + (" (default: the checkpoint's)" if source_default is None else ""))
        p.add_argument("--root", default=None, help="data folder (default: $CAPSEDU_DATA or ~/.cache/capsedu; "
                       "for --source idx, the folder of IDX files)")
        p.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")

    t = sub.add_parser("train", help="train the paper's CapsNet", formatter_class=fmt,
                       description="Train CapsNet (Sabour et al., 2017). Rerun the same command to resume.")
    data_args(t, "auto")
    t.add_argument("--epochs", type=positive_int, default=10, help="passes over the training set")
    t.add_argument("--batch-size", type=positive_int, default=128, help="images per step")
    t.add_argument("--lr", type=positive_float, default=1e-3, help="Adam learning rate (x0.96 every 2,000 steps)")
    t.add_argument("--routing", choices=("hinton", "su"), default="hinton", help="routing update")
    t.add_argument("--iterations", type=positive_int, default=3, help="routing iterations")
    t.add_argument("--out", default="runs/capsnet", help="folder for checkpoint.pt and metrics.json")
    t.add_argument("--no-resume", action="store_true",
                   help="start fresh: an old checkpoint in --out is replaced once the first new epoch is saved")
    t.add_argument("--amp", choices=("auto", "bf16", "fp16", "off"), default="auto",
                   help="mixed precision; auto: bf16 where the device has it natively (CUDA 8.0+, CPUs with "
                   "AVX512-BF16/AMX), fp16 with a GradScaler on CUDA 7.x (T4, V100), else off")
    t.add_argument("--compile", action="store_true", help="wrap the model in torch.compile")
    t.add_argument("--fast", action="store_true", help="capsedu.fast: fused routing, channels-last on CUDA")
    t.add_argument("--seed", type=non_negative_int, default=0, help="initial weights, shuffling and shifts")
    t.add_argument("--shift", type=non_negative_int, default=2, help="random shift augmentation, pixels")
    t.add_argument("--limit", type=positive_int, default=None, help="train on the first N images only")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("evaluate", help="test accuracy of a checkpoint (JSON)", formatter_class=fmt,
                       description="Rebuild the model stored in a checkpoint and print its test accuracy as JSON.")
    e.add_argument("--checkpoint", required=True, help="a checkpoint.pt written by train")
    data_args(e, None)
    e.add_argument("--limit", type=positive_int, default=None, help="test on the first N images only")
    e.add_argument("--batch-size", type=positive_int, default=500, help="images per forward pass")
    e.set_defaults(func=cmd_evaluate)

    i = sub.add_parser("info", help="versions, devices and data sources (JSON)", formatter_class=fmt,
                       description="Print versions, available devices and data sources as JSON.")
    i.add_argument("--root", default=None, help="data folder (default: $CAPSEDU_DATA or ~/.cache/capsedu)")
    i.set_defaults(func=cmd_info)

    d = sub.add_parser("two-digits", help="Su's two-digit experiment (JSON)", formatter_class=fmt,
                       description="Train on single MNIST digits only, test on images of two distinct digits "
                       "(Su Jianlin's experiment); print the results as JSON. Options override the preset.")
    from .two_digit_cli import add_cli_arguments as two_digit_arguments
    two_digit_arguments(d)
    d.set_defaults(func=cmd_two_digits)
    from .paper_cli import EXPERIMENTS, add_cli_arguments as paper_arguments  # chapter 9's three experiments
    for name, (*_, about) in EXPERIMENTS.items():
        paper_arguments(sub.add_parser(name, help=about + " (JSON)", formatter_class=fmt, description=about + "; "
                                       "the result as JSON on stdout (and in --out). Rerun with --resume to finish "
                                       "an interrupted run."), name)
        sub.choices[name].set_defaults(func=cmd_paper_experiment)
    from .compare_routing_cli import add_cli_arguments as compare_routing_arguments  # chapter 10
    c = sub.add_parser("compare-routing", help="dynamic, EM, self-attention and no routing on one budget (JSON)",
                       formatter_class=fmt, description="Train the four routing methods of chapter 10 on the same "
                       "data and budget; the result as JSON on stdout (and in --out). Rerun with --resume to "
                       "finish an interrupted run.")
    compare_routing_arguments(c)
    c.set_defaults(func=cmd_compare_routing)
    return parser


# ---------------------------------------------------------------- commands
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("capsedu")
    except PackageNotFoundError:
        return "unknown"


def _write_json(obj, path: Path) -> None:
    """Atomically, Ctrl-C held back until done, no .tmp left on any error."""
    from .checkpoints import write_atomic
    write_atomic(str(path), lambda f: f.write((json.dumps(obj, indent=2) + "\n").encode()))


def _check_out_folder(out: Path, files) -> None:
    """--out must be (or become) a writable folder whose ``files`` are files or absent: checked before any run."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; expected a folder (for {' and '.join(files)})")
    for name in files:
        if (out / name).is_dir():
            raise ValueError(f"{out / name} is a folder; expected the file {name} (or nothing) in --out {out}")
    existing = next(p for p in (out, *out.absolute().parents) if p.exists())
    try:  # a real probe (a nameless temporary file): os.access says yes to root even on /proc
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise OSError
        tempfile.TemporaryFile(dir=existing).close()
    except OSError:
        raise ValueError(f"--out {out}: cannot write into {existing}; choose a folder you can write to") from None


def cmd_train(args) -> int:
    import contextlib
    import dataclasses

    import torch

    from .allocator import kept_freed_memory
    from .checkpoints import remove_stale_tmp
    from .data import load_dataset
    from .device import resolve_amp, resolve_device
    from .models import CapsNet
    from .train import evaluate, fit

    start = time.time()
    out = Path(args.out)
    ckpt = out / "checkpoint.pt"
    _check_out_folder(out, ("checkpoint.pt", "metrics.json"))  # nothing is created or removed until the run
    device = resolve_device(args.device)
    resolve_amp(args.amp, device)                               # an --amp this device lacks: an error now
    data = load_dataset(args.dataset, args.source, device=device, root=args.root, verbose=True)
    if args.limit is not None and args.limit < len(data.y_train):
        data = dataclasses.replace(data, x_train=data.x_train[:args.limit], y_train=data.y_train[:args.limit])
    torch.manual_seed(args.seed)  # the initial weights
    model = CapsNet(routing=args.routing, iterations=args.iterations).to(device)
    if args.fast:
        from .fast import accelerate
        accelerate(model)
    created = [p for p in (out.absolute(), *out.absolute().parents) if not p.exists()]  # deepest first
    out.mkdir(parents=True, exist_ok=True)                      # the arguments are valid: the run starts
    remove_stale_tmp(out / "metrics.json")                      # left by a killed run (fit clears the checkpoint's)
    if ckpt.exists():
        print(f"capsedu: {ckpt} is replaced after the first new epoch (--no-resume)" if args.no_resume
              else f"capsedu: resuming from {ckpt} (--no-resume starts fresh)")
    # On a CPU, glibc keeps freed memory while training (faster steps; capsedu.allocator), its defaults after.
    kept = kept_freed_memory() if device.type == "cpu" else contextlib.nullcontext()
    try:
        with kept:
            history = fit(model, data, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, device=device,
                          amp=args.amp, compile=args.compile, checkpoint=str(ckpt), seed=args.seed,
                          shift=args.shift, progress=not args.no_progress, resume=not args.no_resume)
    finally:  # a run that stops before its first checkpoint leaves no empty folder behind
        for folder in created:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    test_acc = history[-1]["test_acc"]
    if test_acc is None:
        test_acc = evaluate(model, data.x_test, data.y_test)["accuracy"]
    metrics = {
        "command": shlex.join([sys.executable, "-m", "capsedu", *args.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(time.time() - start, 3),
        "train_seconds": round(sum(history["seconds"]), 3),
        "device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "dataset": {"name": data.name, "source": data.source, "train": len(data.y_train), "test": len(data.y_test)},
        "final_test_accuracy": test_acc,
        "versions": {"capsedu": _version(), "torch": torch.__version__, "python": platform.python_version()},
        **history.as_dict(),
    }
    _write_json(metrics, out / "metrics.json")
    print(f"capsedu: test accuracy {test_acc:.4f} after {len(history)} epochs; wrote {ckpt} and {out / 'metrics.json'}")
    return 0


def cmd_evaluate(args) -> int:
    from .data import load_dataset
    from .device import resolve_device
    from .pretrained import capsnet_from_state
    from .train import evaluate, load_checkpoint

    device = resolve_device(args.device)
    ckpt = load_checkpoint(args.checkpoint)
    meta = ckpt["meta"]
    if meta.get("model") != "CapsNet" or not isinstance(meta.get("model_config"), dict):
        raise ValueError(f"{args.checkpoint} holds a {meta.get('model')}; the CLI evaluates CapsNet checkpoints only")
    model = capsnet_from_state(meta["model_config"], ckpt["model"], str(args.checkpoint))
    name, source = (meta.get("dataset") or [None, None])[:2]
    name, source = args.dataset or name or "mnist", args.source or source or "auto"
    model.to(device)
    data = load_dataset(name, source, device=device, root=args.root, verbose=False)
    x, y = data.x_test[:args.limit], data.y_test[:args.limit]  # [:None] keeps all
    result = evaluate(model, x, y, batch_size=args.batch_size)
    print(json.dumps({"checkpoint": str(args.checkpoint), "epoch": ckpt["epoch"], "dataset": data.name,
                      "source": data.source, "device": str(device), **result}, indent=2))
    return 0


def _idx_present(folder: Path) -> bool:
    from .data import IDX_FILES
    return all((folder / f).is_file() or (folder / (f + ".gz")).is_file() for f in IDX_FILES)


def cmd_info(args) -> int:
    import importlib.util

    import torch

    from .data import FASHION_IDX_DIR, sample_ok
    from .device import hardware, resolve_amp, resolve_device

    root = Path(args.root or os.environ.get("CAPSEDU_DATA") or "~/.cache/capsedu").expanduser()
    mps = getattr(torch.backends, "mps", None)
    cuda = torch.cuda.is_available()
    info = {
        "python": platform.python_version(), "torch": torch.__version__, "capsedu": _version(),
        "devices": {"cuda": cuda, "mps": bool(mps is not None and mps.is_available()), "cpu": True,
                    "cuda_names": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]},
        "default_device": str(resolve_device("auto")), "hardware": hardware(resolve_device("auto")),
        "amp_auto": resolve_amp("auto", resolve_device("auto")),
        "data": {
            "root": str(root),
            "sample": sample_ok(),
            "torchvision": importlib.util.find_spec("torchvision") is not None,
            "mnist_full": _idx_present(root / "MNIST" / "raw"),
            "fashion_mnist_full": _idx_present(root / "FashionMNIST" / "raw"),
            "fashion_mnist_idx": _idx_present(Path(FASHION_IDX_DIR)),
            "fashion_mnist_idx_dir": FASHION_IDX_DIR,
        },
    }
    print(json.dumps(info, indent=2))
    return 0


def cmd_paper_experiment(args) -> int:
    from .paper_cli import cli_main
    return cli_main(args)


def cmd_compare_routing(args) -> int:
    from .compare_routing_cli import cli_main
    return cli_main(args)


def cmd_two_digits(args) -> int:
    from .two_digit_cli import cli_main
    return cli_main(args)


def main(argv=None) -> int:
    """Run one command; returns the exit code (0 ok, 1 run-time error, 2 bad arguments, 130 interrupted)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except KeyboardInterrupt:
        hint = "; rerun the same command to resume from the last finished epoch" if args.command == "train" else ""
        print(f"capsedu {args.command}: interrupted{hint}", file=sys.stderr)
        return 130
    except (ValueError, TypeError, RuntimeError, OSError, FloatingPointError) as err:
        if os.environ.get("CAPSEDU_DEBUG"):
            raise
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"capsedu {args.command}: error: {message}", file=sys.stderr)
        return 1
