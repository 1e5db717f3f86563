"""How a CapsNet training step's time and memory grow with the input size (so the number of
primary capsules), the routing iterations and the batch size, for the readable network and the
fast path (``accelerate``, the device's precision). One JSON object; chapter 8 fits the growth law.

Memory, where each exists: ``graph_bytes``, the tensors autograd saves for backward in one forward
pass (``bench.saved_tensor_bytes``); ``state_bytes``, weights, gradients and Adam's two moments;
``peak_rss_extra_bytes`` (CPU, Linux), the resident set's high-water mark during one step above its
level before (/proc/self/clear_refs resets the mark; glibc is told to mmap every block of 64 KiB
or more, so the resident set follows the live tensors, not glibc's cache); ``cuda_peak_bytes``,
the CUDA allocator's peak. Times: medians of interleaved rounds after a warm-up call (which
compiles the fast path). On a CPU one thread runs, and the process's CPU seconds are stored beside
the wall seconds: on a shared machine the wall time measures the load as much as the step.

    python benchmarks/cost_growth.py [--batch 4] [--rounds 3] [--device cpu]

--batch: of the input-size and iteration sweeps; --rounds: interleaved timing rounds.
"""
import ctypes
import ctypes.util
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from common import options, report

from capsedu.core.capsnet import CapsNet
from capsedu.core.losses import margin_loss, reconstruction_loss
from capsedu.data.mnist import load_dataset
from capsedu.runtime.device import autocast, resolve_amp, resolve_device
from capsedu.speed import bench
from capsedu.speed.fast import accelerate

SIZES = (28, 36, 40, 56)
ITERATIONS = (1, 3, 5)
BATCHES = (2, 4, 8, 16)
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _reset_high_water_mark():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := the current resident set


def rss_tracking() -> bool:
    """Every block of 64 KiB or more mmapped (freed back at once), and a resettable high-water mark."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
        _reset_high_water_mark()
        return mallopt(_M_MMAP_THRESHOLD, 64 * 1024) == 1
    except (OSError, AttributeError):
        return False


def peak_rss_extra(step) -> int:
    """Bytes the resident set rose above its level before ``step()``, at its highest during it."""
    before = _status_kib("VmRSS")
    _reset_high_water_mark()
    step()
    return 1024 * (_status_kib("VmHWM") - before)


def images(digits, size, batch):
    """``batch`` real digits, centred on a size x size canvas (the model's input grows, the digit not)."""
    pad = size - digits.shape[-1]
    return F.pad(digits[:batch], (pad // 2, pad - pad // 2, pad // 2, pad - pad // 2))


def measure(size, iterations, batch, digits, labels, amp, rounds, device, rss):
    """One configuration: the readable and the fast step timed in turn, and each one's memory."""
    x, y = images(digits, size, batch), labels[:batch]
    models = {"readable": CapsNet(image_size=size, iterations=iterations).to(device),
              "fast": accelerate(CapsNet(image_size=size, iterations=iterations).to(device))}
    amps = {"readable": "off", "fast": amp}
    steps = {k: bench.train_step(m, x, y, amp=amps[k]) for k, m in models.items()}
    wall, cpu = {k: [] for k in steps}, {k: [] for k in steps}
    for step in steps.values():
        step()  # warm-up; the fast path compiles here
    for _ in range(rounds):
        for k, step in steps.items():
            c0 = time.process_time()
            wall[k].append(bench.median_seconds(step, repeats=1, warmup=0, device=device))  # synchronised
            cpu[k].append(time.process_time() - c0)
    row = {"image_px": size, "primary_capsules": models["readable"].config.num_primary,
           "iterations": iterations, "batch": batch}
    for k, m in models.items():
        def forward(m=m, k=k):
            with autocast(amps[k], device):
                _, lengths, rec = m(x, y)
                return margin_loss(lengths, y) + reconstruction_loss(rec, x)
        row[k] = {"step_seconds": statistics.median(wall[k]), "step_cpu_seconds": statistics.median(cpu[k]),
                  "amp": amps[k],
                  # the batch's share: the input and the weights (saved as they are) not counted
                  "graph_bytes": bench.saved_tensor_bytes(forward, exclude=[x, *m.parameters()]),
                  "state_bytes": 4 * sum(p.numel() * p.element_size() for p in m.parameters())}
        if rss and rss_tracking():  # set again: compiling the fast path can change glibc's settings
            row[k]["peak_rss_extra_bytes"] = peak_rss_extra(steps[k])
        if device.type == "cuda":
            row[k]["cuda_peak_bytes"] = bench.peak_bytes(steps[k], device)  # the allocator's peak
    print(f"{size} px, r = {iterations}, batch {batch}: " + ", ".join(
        f"{k} {row[k]['step_cpu_seconds']:.2f} s CPU" for k in models), file=sys.stderr, flush=True)  # progress
    return row


def main(argv=None):
    a = options(__doc__, batch=4, rounds=3, device="cpu").parse_args(argv)
    device = resolve_device(a.device)
    amp = resolve_amp("auto", device)
    rss = device.type == "cpu" and rss_tracking()
    if device.type == "cpu":
        torch.set_num_threads(1)  # CPU seconds then count one thread's work, not OpenMP's spinning
    torch.manual_seed(0)
    data = load_dataset("mnist", source="sample", device=device, verbose=False)
    t0 = time.perf_counter()
    run = lambda size, r, batch: measure(size, r, batch, data.x_train, data.y_train, amp, a.rounds, device, rss)
    sweeps = {"image_px": [run(s, 3, a.batch) for s in SIZES],
              "iterations": [run(28, r, a.batch) for r in ITERATIONS],
              "batch": [run(28, 3, b) for b in BATCHES]}
    return report("cost_growth", argv, device, amp_of_fast_path=amp, rounds=a.rounds,
                  seconds_total=round(time.perf_counter() - t0, 1), sweeps=sweeps)


if __name__ == "__main__":
    main()
