"""Seconds per epoch and images/s of ``capsedu.training.loop.fit`` on the embedded sample,
and on a replica of it as large as full MNIST (60,000 images, the 9,000 sample
training digits repeated), standing in for full MNIST where no network is.

Prints one JSON object. Examples:

    python benchmarks/epoch.py --sizes 9000                 # CPU, the sample
    python benchmarks/epoch.py --device cuda --sizes 60000 --amp bf16 --compile

--sizes: comma-separated training-set sizes; --epochs: per size, the last reported; --amp auto:
``resolve_amp``'s choice (fp16 runs with a GradScaler); --test-limit: test on the first N digits;
--source: the digits replicated (the test set is this source's); --compile: the whole model;
--fast: ``capsedu.speed.fast.accelerate``. On a CPU, freed memory is kept (``keep_freed_memory``).
"""
import time

import torch
from common import options, report

from capsedu.core.capsnet import CapsNet
from capsedu.data.mnist import Dataset, load_dataset
from capsedu.runtime.allocator import keep_freed_memory
from capsedu.runtime.device import resolve_amp, resolve_device
from capsedu.speed.fast import accelerate
from capsedu.training.loop import fit


def replica(data: Dataset, n: int) -> Dataset:
    """The first n images of the training digits repeated (test set unchanged)."""
    reps = -(-n // len(data.x_train))
    return Dataset(data.x_train.repeat(reps, 1, 1, 1)[:n], data.y_train.repeat(reps)[:n], data.x_test,
                   data.y_test, data.name, f"{data.source} x{n / len(data.x_train):.2f}")


def main(argv=None):
    p = options(__doc__, sizes="9000", epochs=1, batch=128, device="auto", compile=False, fast=False)
    p.add_argument("--amp", default="auto", choices=("auto", "bf16", "fp16", "off"))
    p.add_argument("--test-limit", type=int, default=None)
    p.add_argument("--source", default="sample", choices=("sample", "auto", "full"))
    a = p.parse_args(argv)
    device = resolve_device(a.device)
    amp = resolve_amp(a.amp, device)
    kept = device.type == "cpu" and keep_freed_memory()
    data = load_dataset("mnist", source=a.source, device=device, verbose=False)
    data = Dataset(data.x_train, data.y_train, data.x_test[:a.test_limit], data.y_test[:a.test_limit],
                   data.name, data.source)
    runs = []
    for n in (int(s) for s in a.sizes.split(",")):
        torch.manual_seed(0)
        model = CapsNet().to(device)
        if a.fast:
            accelerate(model)
        t0 = time.perf_counter()
        last = fit(model, replica(data, n), epochs=a.epochs, batch_size=a.batch, device=device,
                   amp=amp, compile=a.compile, progress=False, eval_every=a.epochs)[-1]
        runs.append({"train_images": n, "epochs": a.epochs, "seconds_last_epoch": last["seconds"],
                     "train_seconds_last_epoch": n / last["images_per_s"], "images_per_s": last["images_per_s"],
                     "wall_seconds_incl_compile": time.perf_counter() - t0, "test_acc": last["test_acc"],
                     "peak_gpu_memory_gb": torch.cuda.max_memory_allocated() / 1e9 if device.type == "cuda" else None})
    return report("epoch", argv, device, batch=a.batch, amp=amp,
                  allocator="keep_freed_memory" if kept else "glibc default",
                  data=f"{data.source} ({len(data.y_train)} train, {len(data.y_test)} test)",
                  compile=a.compile, fast=a.fast, runs=runs)


if __name__ == "__main__":
    main()
