"""The command line, ``python -m capsedu``.

- ``train``: train the paper's CapsNet; writes ``checkpoint.pt`` (after every epoch)
  and ``metrics.json`` to ``--out``, and resumes from the checkpoint when rerun.
- ``evaluate``: test accuracy of a checkpoint, printed as JSON.
- ``info``: versions, devices and which data sources are at hand, as JSON.
- ``two-digits``: Su Jianlin's two-digit experiment (train on single digits, test on
  pairs), with the book's settings for a mode (``--preset``); the results as JSON.

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


# capsedu.experiments' MODELS, LAYOUTS and INITS, repeated so that --help need not import torch
# (tests/test_experiments.py checks that they agree).
TWO_DIGIT_MODELS = ("pooling", "capsule-su", "capsule-hinton")
TWO_DIGIT_LAYOUTS = ("vertical", "horizontal", "overlapping")
TWO_DIGIT_INITS = ("keras", "torch")


def build_parser() -> argparse.ArgumentParser:
    fmt = _Help
    parser = _Parser(prog="python -m capsedu", description="Capsule Networks, taught: train, evaluate, inspect.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,evaluate,info,two-digits}")

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
    t.add_argument("--no-resume", action="store_true", help="delete any checkpoint in --out and start fresh")
    t.add_argument("--amp", choices=("auto", "bf16", "fp16", "off"), default="auto",
                   help="mixed precision; auto: bf16 on a CUDA GPU that has it, else off")
    t.add_argument("--compile", action="store_true", help="wrap the model in torch.compile")
    t.add_argument("--fast", action="store_true", help="capsedu.fast: fused routing, channels-last on CUDA, and "
                   "with --amp auto, bf16 wherever the device has it natively (also on CPUs with AVX512-BF16)")
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
    d.add_argument("--preset", choices=("smoke", "quick", "full"), default=None,
                   help="the book's settings for a mode (default: $CAPSEDU_MODE, else full on a GPU, quick on a CPU)")
    d.add_argument("--source", choices=("auto", "sample", "full", "idx"), default=None,
                   help="MNIST source (default: the preset's)")
    d.add_argument("--root", default=None, help="data folder (default: $CAPSEDU_DATA or ~/.cache/capsedu)")
    d.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    d.add_argument("--models", nargs="+", choices=TWO_DIGIT_MODELS, default=None, help="which models to train")
    d.add_argument("--seeds", nargs="+", type=non_negative_int, default=None, help="one training run per seed")
    d.add_argument("--epochs", type=positive_int, default=None, help="epochs for every model "
                   "(default: the preset's; full: Su's 20 for pooling, 10 for the capsule heads)")
    d.add_argument("--batch-size", type=positive_int, default=None, help="images per step")
    d.add_argument("--lr", type=positive_float, default=None, help="Adam learning rate (constant)")
    d.add_argument("--margin-lam", type=non_negative_float, default=None,
                   help="margin loss weight of the absent classes (Su: 0.25)")
    d.add_argument("--squash-k", type=positive_float, default=None, help="k in |s|^2/(k+|s|^2) (capsule heads)")
    d.add_argument("--iterations", type=positive_int, default=None, help="routing iterations")
    d.add_argument("--init", choices=TWO_DIGIT_INITS, default=None,
                   help="initial weights: Keras's defaults (Su's) or PyTorch's")
    d.add_argument("--limit", type=positive_int, default=None, help="train on the first N digits only")
    d.add_argument("--test-limit", type=positive_int, default=None, help="test digits (and pairs from them)")
    d.add_argument("--pairs", type=positive_int, default=None, help="two-digit test images per layout")
    d.add_argument("--layouts", nargs="+", choices=TWO_DIGIT_LAYOUTS, default=None,
                   help="how the two digits are placed")
    d.add_argument("--shift", type=non_negative_int, default=None, help="random shift augmentation, pixels")
    d.add_argument("--amp", choices=("auto", "bf16", "fp16", "off"), default=None,
                   help="mixed precision (the presets: off)")
    d.add_argument("--pair-seed", type=non_negative_int, default=None, help="seed of the test pairs")
    d.add_argument("--out", default=None, help="also write the JSON to this file")
    d.add_argument("--no-progress", action="store_true", help="no progress bar")
    d.set_defaults(func=cmd_two_digits)
    return parser


# ---------------------------------------------------------------- commands
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("capsedu")
    except PackageNotFoundError:
        return "unknown"


def _write_json(obj, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


def cmd_train(args) -> int:
    import dataclasses

    import torch

    from .data import load_dataset
    from .models import CapsNet
    from .train import evaluate, fit, resolve_device

    start = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = out / "checkpoint.pt"
    if ckpt.exists():
        if args.no_resume:
            ckpt.unlink()
            print(f"capsedu: removed {ckpt} (--no-resume); starting fresh")
        else:
            print(f"capsedu: resuming from {ckpt} (--no-resume starts fresh)")
    device = resolve_device(args.device)
    data = load_dataset(args.dataset, args.source, device=device, root=args.root, verbose=True)
    if args.limit is not None and args.limit < len(data.y_train):
        data = dataclasses.replace(data, x_train=data.x_train[:args.limit], y_train=data.y_train[:args.limit])
    torch.manual_seed(args.seed)  # the initial weights
    model = CapsNet(routing=args.routing, iterations=args.iterations).to(device)
    amp = args.amp
    if args.fast:
        from .fast import accelerate, recommended_amp
        accelerate(model)
        amp = recommended_amp(device) if amp == "auto" else amp
    history = fit(model, data, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, device=device,
                  amp=amp, compile=args.compile, checkpoint=str(ckpt), seed=args.seed, shift=args.shift,
                  progress=not args.no_progress)
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
    from .models import CapsNet, CapsNetConfig
    from .train import evaluate, load_checkpoint, resolve_device

    ckpt = load_checkpoint(args.checkpoint)
    meta = ckpt["meta"]
    if meta.get("model") != "CapsNet" or not isinstance(meta.get("model_config"), dict):
        raise ValueError(f"{args.checkpoint} holds a {meta.get('model')}; the CLI evaluates CapsNet checkpoints only")
    try:  # lists back to tuples, as CapsNetConfig has them
        config = CapsNetConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["model_config"].items()})
        model = CapsNet(config)
        model.load_state_dict(ckpt["model"])
    except (TypeError, RuntimeError) as err:
        raise ValueError(f"cannot rebuild the model stored in {args.checkpoint}: {str(err)[:160]}") from None
    name, source = (meta.get("dataset") or [None, None])[:2]
    name, source = args.dataset or name or "mnist", args.source or source or "auto"
    device = resolve_device(args.device)
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
    from importlib import resources

    import torch

    from .data import FASHION_IDX_DIR
    from .train import resolve_device

    root = Path(args.root or os.environ.get("CAPSEDU_DATA") or "~/.cache/capsedu").expanduser()
    mps = getattr(torch.backends, "mps", None)
    cuda = torch.cuda.is_available()
    info = {
        "python": platform.python_version(), "torch": torch.__version__, "capsedu": _version(),
        "devices": {"cuda": cuda, "mps": bool(mps is not None and mps.is_available()), "cpu": True,
                    "cuda_names": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]},
        "default_device": str(resolve_device("auto")),
        "data": {
            "root": str(root),
            "sample": (resources.files("capsedu") / "assets" / "mnist10k.npz").is_file(),
            "torchvision": importlib.util.find_spec("torchvision") is not None,
            "mnist_full": _idx_present(root / "MNIST" / "raw"),
            "fashion_mnist_full": _idx_present(root / "FashionMNIST" / "raw"),
            "fashion_mnist_idx": _idx_present(Path(FASHION_IDX_DIR)),
            "fashion_mnist_idx_dir": FASHION_IDX_DIR,
        },
    }
    print(json.dumps(info, indent=2))
    return 0


# option -> two_digit_experiment argument (--source, --root and --device choose the data)
_TWO_DIGIT_OPTIONS = {"models": "models", "seeds": "seeds", "epochs": "epochs", "batch_size": "batch_size", "lr": "lr",
                      "margin_lam": "margin_lam", "squash_k": "squash_k", "iterations": "iterations",
                      "init": "init", "limit": "n_train", "test_limit": "n_test", "pairs": "n_pairs",
                      "layouts": "layouts", "shift": "shift", "amp": "amp", "pair_seed": "pair_seed"}


def cmd_two_digits(args) -> int:
    import contextlib

    from . import current_mode
    from .data import load_dataset
    from .experiments import PRESETS, two_digit_experiment
    from .train import resolve_device

    for opt in ("models", "seeds", "layouts"):  # a repeated value is a bad argument too: exit 2, one line
        values = getattr(args, opt)
        if values is not None and len(set(values)) != len(values):
            print(f"python -m capsedu two-digits: error: argument --{opt}: values must be distinct, got "
                  f"{' '.join(map(str, values))} (see python -m capsedu two-digits --help)", file=sys.stderr)
            return 2
    preset = args.preset or current_mode()
    kwargs = dict(PRESETS[preset])
    preset_source = kwargs.pop("source")
    source = args.source or preset_source
    kwargs.update({arg: getattr(args, opt) for opt, arg in _TWO_DIGIT_OPTIONS.items()
                   if getattr(args, opt) is not None})  # --epochs N: N for every model
    device = resolve_device(args.device)
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries the JSON only
        data = load_dataset("mnist", source, device=device, root=args.root, verbose=True)
    result = two_digit_experiment(data, device=device, progress=not args.no_progress, **kwargs)
    output = {"command": shlex.join([sys.executable, "-m", "capsedu", *args.argv]), "preset": preset, **result}
    if args.out:
        _write_json(output, Path(args.out))
    print(json.dumps(output, indent=2))
    return 0


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
