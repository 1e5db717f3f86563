"""The commands ``train``, ``evaluate`` and ``info``: the paper's CapsNet trained and tested from the command
line (``capsedu.cli`` parses their options; torch is imported only here)."""
from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path

__all__ = ["cmd_train", "cmd_evaluate", "cmd_info"]


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

    from capsedu.core.capsnet import CapsNet
    from capsedu.data.mnist import load_dataset
    from capsedu.runtime.allocator import kept_freed_memory
    from capsedu.runtime.checkpoints import CheckpointError
    from capsedu.runtime.device import resolve_amp, resolve_device
    from capsedu.runtime.files import remove_stale_tmp, write_json
    from capsedu.runtime.lock import OutputLock
    from capsedu.runtime.results import command_line, provenance
    from capsedu.training.distributed import is_main, start_from_env, stop, world_size
    from capsedu.training.evaluation import evaluate
    from capsedu.training.config import TrainConfig
    from capsedu.training.loop import fit

    start = time.time()
    if not str(args.out).strip():
        raise ValueError("--out '': expected a folder for checkpoint.pt and metrics.json (created if need be)")
    out = Path(args.out)
    ckpt = out / "checkpoint.pt"
    _check_out_folder(out, ("checkpoint.pt", "metrics.json"))  # nothing is created or removed until the run
    device = start_from_env(resolve_device(args.device))      # under torchrun: join its processes (gloo / NCCL)
    main = is_main()                                            # rank 0 alone locks, writes and prints
    resolve_amp(args.amp, device)                               # an --amp this device lacks: an error now
    data = load_dataset(args.dataset, args.source, device=device, root=args.root, verbose=main)
    if args.limit is not None and args.limit < len(data.y_train):
        data = dataclasses.replace(data, x_train=data.x_train[:args.limit], y_train=data.y_train[:args.limit])
    torch.manual_seed(args.seed)  # the initial weights
    model = CapsNet(routing=args.routing, iterations=args.iterations).to(device)
    if args.fast:
        from capsedu.speed.fast import accelerate
        accelerate(model)
    created = [p for p in (out.absolute(), *out.absolute().parents) if not p.exists() and main]  # deepest first
    out.mkdir(parents=True, exist_ok=True)                      # the arguments are valid: the run starts
    lock = OutputLock(out)                                      # one writer of --out (a lock file beside it)
    # On a CPU, glibc keeps freed memory while training (faster steps; capsedu.runtime.allocator), its defaults after.
    kept = kept_freed_memory() if device.type == "cpu" else contextlib.nullcontext()
    try:
        if main:
            lock.acquire()
            remove_stale_tmp(out / "metrics.json")              # left by a killed run (fit clears the checkpoint's)
        if ckpt.exists() and main:
            print(f"capsedu: {ckpt} is replaced after the first new epoch (--fresh)" if args.fresh
                  else f"capsedu: resuming from {ckpt} (--fresh starts over)")
        with kept:
            history = fit(model, data, TrainConfig.from_args(args, device=device, checkpoint=str(ckpt),
                                                             progress=main and not args.no_progress,
                                                             resume=not args.fresh))
    except BaseException as err:
        if lock.lock.is_locked and created and not any(out.iterdir()):  # nothing written: its lock file goes too
            Path(lock.lock.lock_file).unlink()
        lock.release()
        if isinstance(err, CheckpointError):  # the resume rule's words: the settings that differ, and --fresh
            raise CheckpointError(f"{err}; or pass --fresh to start over") from None
        raise
    finally:  # a run that stops before its first checkpoint leaves no empty folder behind
        for folder in created:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    if not main:
        stop()
        return 0
    test_acc = history[-1]["test_acc"]
    if test_acc is None:
        test_acc = evaluate(model, data.x_test, data.y_test)["accuracy"]
    metrics = {
        **provenance(command_line(args.argv), str(device)),
        "seconds": round(time.time() - start, 3), "processes": world_size(),
        "train_seconds": round(sum(history["seconds"]), 3),
        "device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "dataset": {"name": data.name, "source": data.source, "train": len(data.y_train), "test": len(data.y_test)},
        "final_test_accuracy": test_acc,
        **history.as_dict(),
    }
    write_json(metrics, out / "metrics.json")
    lock.release()
    print(f"capsedu: test accuracy {test_acc:.4f} after {len(history)} epochs; wrote {ckpt} and {out / 'metrics.json'}")
    stop()
    return 0


def cmd_evaluate(args) -> int:
    from capsedu.data.mnist import load_dataset
    from capsedu.runtime.checkpoints import load_checkpoint
    from capsedu.runtime.device import resolve_device
    from capsedu.training.evaluation import evaluate
    from capsedu.training.pretrained import capsnet_from_state

    device = resolve_device(args.device)
    ckpt = load_checkpoint(args.checkpoint, resuming=False)
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
    from capsedu.data.mnist import IDX_FILES
    return all((folder / f).is_file() or (folder / (f + ".gz")).is_file() for f in IDX_FILES)


def cmd_info(args) -> int:
    import importlib.util

    import torch

    from capsedu import __version__
    from capsedu.data.mnist import FASHION_IDX_DIR, sample_ok
    from capsedu.runtime.device import hardware, resolve_amp, resolve_device

    root = Path(args.root or os.environ.get("CAPSEDU_DATA") or "~/.cache/capsedu").expanduser()
    mps = getattr(torch.backends, "mps", None)
    cuda = torch.cuda.is_available()
    info = {
        "python": platform.python_version(), "torch": torch.__version__, "capsedu": __version__,
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
