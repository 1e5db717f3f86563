"""What ``capsedu.runtime.allocator.keep_freed_memory`` does to a CPU training step: one process,
the readable CapsNet's training step timed with glibc's default settings and with freed
memory kept, in turn for several rounds (so that machine load affects both alike), and
the minor page faults of each. Prints one JSON object.

    python benchmarks/allocator.py [--batch 100] [--rounds 5] [--steps 2]
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch

from capsedu.core.capsnet import CapsNet
from capsedu.data.mnist import load_dataset
from capsedu.runtime.allocator import keep_freed_memory, release_freed_memory
from capsedu.runtime.results import provenance
from capsedu.speed import bench

SETTINGS = {"glibc default": release_freed_memory, "keep_freed_memory": keep_freed_memory}


def timed(step, calls):
    """Seconds per call and minor page faults per call over ``calls`` calls."""
    faults, t = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    for _ in range(calls):
        step()
    return ((time.perf_counter() - t) / calls,
            (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / calls)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5, help="rounds of both settings; medians are reported")
    p.add_argument("--steps", type=int, default=2, help="timed steps per setting and round")
    a = p.parse_args(argv)
    load_before = os.getloadavg()
    torch.manual_seed(0)
    data = load_dataset("mnist", source="sample", device="cpu", verbose=False)
    step = bench.train_step(CapsNet(), data.x_train[:a.batch], data.y_train[:a.batch])
    seconds = {name: [] for name in SETTINGS}
    faults = {name: [] for name in SETTINGS}
    for _ in range(a.rounds):
        for name, apply in SETTINGS.items():
            if not apply():
                raise SystemExit("glibc's mallopt is unavailable here (not Linux with glibc): nothing to compare")
            step()                                       # settle the new setting (the heap grows once)
            s, f = timed(step, a.steps)
            seconds[name].append(s)
            faults[name].append(f)
    release_freed_memory()
    med = {name: statistics.median(v) for name, v in seconds.items()}
    result = {
        "benchmark": "allocator",
        **provenance("python benchmarks/allocator.py " + " ".join(argv if argv is not None else sys.argv[1:]), "cpu"),
        "device": "cpu",
        "batch": a.batch, "rounds": a.rounds, "steps_per_round": a.steps, "amp": "off", "model": "CapsNet (readable)",
        "images_per_s": {name: a.batch / s for name, s in med.items()},
        "speedup_keep_vs_default": med["glibc default"] / med["keep_freed_memory"],
        "minor_faults_per_step": {name: statistics.median(v) for name, v in faults.items()},
        "seconds_per_step_all_rounds": seconds,
        "load_average_1min_before_after": [load_before[0], os.getloadavg()[0]],  # other work on the machine
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
