"""Images/s of one CapsNet training step: capsedu vs a naive tutorial-style network.

Both do forward, margin + reconstruction loss, backward and an Adam step on the
same batch of real digits. They are timed interleaved in one process, together with
a microbenchmark of the primary-capsule convolution (the step's dominant operation),
so that machine load affects all three alike. Prints one JSON object.

    python benchmarks/train_step.py [--batch 100] [--rounds 5] [--steps 3] [--device cpu]
"""
import argparse
import json
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).parent))
from naive_capsnet import NaiveCapsNet  # noqa: E402

from capsedu.allocator import keep_freed_memory  # noqa: E402
from capsedu.data import load_dataset  # noqa: E402
from capsedu.functional import margin_loss, reconstruction_loss  # noqa: E402
from capsedu.models import CapsNet  # noqa: E402


def hardware(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({torch.get_num_threads()} threads)"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"


def make_step(model, x, y):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        _, lengths, rec = model(x, y)
        loss = margin_loss(lengths, y) + reconstruction_loss(rec, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def make_conv(batch, device, backward):
    conv = torch.nn.Conv2d(256, 256, 9, 2).to(device)
    feats = torch.rand(batch, 256, 20, 20, device=device, requires_grad=backward)

    def run():
        out = conv(feats)
        if backward:
            out.sum().backward()
    return run


def flops_of(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def seconds_per_call(fn, n, device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t = time.perf_counter()
    for _ in range(n):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - t) / n


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median is reported")
    p.add_argument("--steps", type=int, default=3, help="timed calls of each kind per round")
    p.add_argument("--device", default="cpu")
    p.add_argument("--default-allocator", action="store_true",
                   help="leave glibc's allocator as it is (fit() calls keep_freed_memory() on CPU)")
    a = p.parse_args(argv)
    device = torch.device(a.device)
    allocator = "glibc default" if a.default_allocator or device.type != "cpu" else (
        "keep_freed_memory" if keep_freed_memory() else "default (keep_freed_memory unavailable)")
    torch.manual_seed(0)
    data = load_dataset("mnist", source="sample", device=device, verbose=False)
    x, y = data.x_train[:a.batch], data.y_train[:a.batch]

    fns = {
        "capsedu": make_step(CapsNet().to(device), x, y),
        "naive": make_step(NaiveCapsNet().to(device), x, y),
        "conv_fwd": make_conv(a.batch, device, backward=False),
        "conv_fwd_bwd": make_conv(a.batch, device, backward=True),
    }
    flops = {k: flops_of(f) for k, f in fns.items()}           # also warms every path up
    times = {k: [] for k in fns}
    for _ in range(a.rounds):
        for k, f in fns.items():
            times[k].append(seconds_per_call(f, a.steps, device))
    sec = {k: statistics.median(v) for k, v in times.items()}
    gflops = {k: flops[k] / sec[k] / 1e9 for k in fns}

    result = {
        "benchmark": "train_step",
        "command": "python benchmarks/train_step.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": str(device), "hardware": hardware(device),
        "torch": torch.__version__, "allocator": allocator, "batch": a.batch, "rounds": a.rounds, "steps_per_round": a.steps,
        "capsedu_images_per_s": a.batch / sec["capsedu"],
        "naive_images_per_s": a.batch / sec["naive"],
        "speedup_vs_naive": sec["naive"] / sec["capsedu"],
        "step_gflop": flops["capsedu"] / 1e9,
        "step_gflops_per_s": gflops["capsedu"],
        "conv_fwd_gflops_per_s": gflops["conv_fwd"],
        "conv_fwd_bwd_gflops_per_s": gflops["conv_fwd_bwd"],
        "step_vs_conv_fwd": gflops["capsedu"] / gflops["conv_fwd"],
        "step_vs_conv_fwd_bwd": gflops["capsedu"] / gflops["conv_fwd_bwd"],
        "seconds_per_call_all_rounds": times,
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
