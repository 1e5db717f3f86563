"""Seconds per epoch and images/s of ``capsedu.training.loop.fit`` on the embedded sample,
and on a replica of it as large as full MNIST (60,000 images, the 9,000 sample
training digits repeated), standing in for full MNIST where no network is.

Prints one JSON object. Examples:

    python benchmarks/epoch.py --sizes 9000                 # CPU, the sample
    python benchmarks/epoch.py --device cuda --sizes 60000 --amp bf16 --compile
"""
import argparse
import json
import sys
import time

import torch

from capsedu.core.capsnet import CapsNet
from capsedu.data.mnist import Dataset, load_dataset
from capsedu.runtime.allocator import keep_freed_memory
from capsedu.runtime.device import resolve_amp, resolve_device
from capsedu.runtime.results import provenance
from capsedu.speed.fast import accelerate
from capsedu.training.loop import fit


def replica(data: Dataset, n: int) -> Dataset:
    """The first n images of the training digits repeated (test set unchanged)."""
    reps = -(-n // len(data.x_train))
    x = data.x_train.repeat(reps, 1, 1, 1)[:n]
    y = data.y_train.repeat(reps)[:n]
    return Dataset(x, y, data.x_test, data.y_test, data.name, f"{data.source} x{n / len(data.x_train):.2f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="9000", help="comma-separated training-set sizes, e.g. 9000,60000")
    p.add_argument("--epochs", type=int, default=1, help="epochs per size; the last is reported")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--device", default="auto")
    p.add_argument("--amp", default="auto", choices=("auto", "bf16", "fp16", "off"),
                   help="auto: capsedu.runtime.device.resolve_amp's choice; fp16 runs with a GradScaler")
    p.add_argument("--default-allocator", action="store_true",
                   help="on CPU, leave glibc as it is (else capsedu.runtime.allocator.keep_freed_memory for this process)")
    p.add_argument("--test-limit", type=int, default=None, help="evaluate on the first N test digits only")
    p.add_argument("--source", default="sample", choices=("sample", "auto", "full"),
                   help="the digits replicated to --sizes (the test set is this source's)")
    p.add_argument("--compile", action="store_true", help="torch.compile the whole model")
    p.add_argument("--fast", action="store_true", help="capsedu.speed.fast.accelerate: fused routing (+ channels-last on CUDA)")
    p.add_argument("--detach-inner", action="store_true", help="with --fast: no gradients through inner routing iterations")
    a = p.parse_args(argv)
    device = resolve_device(a.device)
    amp = resolve_amp(a.amp, device)
    kept = device.type == "cpu" and not a.default_allocator and keep_freed_memory()
    data = load_dataset("mnist", source=a.source, device=device, verbose=False)
    if a.test_limit is not None:
        data = Dataset(data.x_train, data.y_train, data.x_test[:a.test_limit], data.y_test[:a.test_limit],
                       data.name, data.source)
    runs = []
    for n in (int(s) for s in a.sizes.split(",")):
        torch.manual_seed(0)
        model = CapsNet().to(device)
        if a.fast:
            accelerate(model, detach_inner=a.detach_inner)
        t0 = time.perf_counter()
        history = fit(model, replica(data, n), epochs=a.epochs, batch_size=a.batch, device=device,
                      amp=amp, compile=a.compile, progress=False, eval_every=a.epochs)
        last = history[-1]
        runs.append({"train_images": n, "epochs": a.epochs, "seconds_last_epoch": last["seconds"],
                     "train_seconds_last_epoch": n / last["images_per_s"], "images_per_s": last["images_per_s"],
                     "wall_seconds_incl_compile": time.perf_counter() - t0, "test_acc": last["test_acc"],
                     "peak_gpu_memory_gb": torch.cuda.max_memory_allocated() / 1e9 if device.type == "cuda" else None})
    print(json.dumps({
        "benchmark": "epoch",
        **provenance("python benchmarks/epoch.py " + " ".join(argv if argv is not None else sys.argv[1:]), str(device)),
        "device": str(device), "batch": a.batch, "amp": amp,
        "allocator": "keep_freed_memory" if kept else "glibc default",
        "data": f"{data.source} ({len(data.y_train)} train, {len(data.y_test)} test)", "compile": a.compile, "fast": a.fast,
        "detach_inner": a.detach_inner, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
